/*
 * Ragged steps (ABI 2.3): a layer's ragged prefill form attends over keys
 * and values handed to forward packed by cu_seqlens_k, not over the paged
 * cache. The case's model gives its layer a ragged form; the forced
 * selection must bind it, and a plugin that does not claim ragged_kv
 * leaves it unbound, which is a skip with the selection's reason.
 *
 * A ragged step plans the layer's paged form too (so write_kv can fill the
 * cache), so the batch keeps valid paging; its slots are all padding, so
 * nothing is written and only attention is compared.
 *
 * ragged_context runs a context step (ragged_keys = context): klen[q] keys
 * of cached context before every query, some request with none, against
 * the oracle. ragged_merge runs the prefill of vLLM's MLA backend in one
 * binding: a context step over a prefix chunk of context, the new tokens
 * bottom-right over their own keys, the two merged by their LSE with the
 * plugin's merge_states; the oracle sees one causal pass over chunk and
 * new tokens together.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#include "runner.h"

/* The three key sets of a merge case, per request: the prefix chunk, the
 * new tokens, and both (chunk rows first). */
enum { KEYS_FULL = 0, KEYS_CHUNK = 1, KEYS_NEW = 2 };

static uint32_t keys_of(const ah__conf_case *c, uint32_t q, int which)
{
    if (!c->ragged_merge) return c->klen[q];
    return which == KEYS_CHUNK ? c->klen[q]
           : which == KEYS_NEW ? c->qlen[q]
                               : c->klen[q] + c->qlen[q];
}

/* Point the batch at one key set: cu_seqlens_k on the host and device,
 * and where the keys sit (a prefix chunk, or a context case's keys, before
 * every query). */
static int set_keys(ah__conf_run *r, int which)
{
    const ah__conf_case *c = r->c;
    ah__conf_batch *b = &r->batch;
    const int context = which == KEYS_CHUNK || (which == KEYS_FULL && c->ragged_context);
    b->b.ragged_keys = context ? AH_RAGGED_KEYS_CONTEXT : AH_RAGGED_KEYS_BOTTOM_RIGHT;
    b->cuk[0] = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++)
        b->cuk[q + 1] = b->cuk[q] + (int32_t)keys_of(c, q, which);
    memcpy(b->d_cuk.host, b->cuk, sizeof(int32_t) * (c->num_reqs + 1));
    b->b.cu_seqlens_k = &b->d_cuk.t;
    b->b.cu_seqlens_k_host = b->cuk;
    b->b.num_k_tokens = (uint32_t)b->cuk[c->num_reqs];
    return ah__conf_upload(r, &b->d_cuk);
}

static void fill(ah__conf_rng *g, ah_mirror *m, ah_dtype t, double amp)
{
    const size_t n = m->bytes / ah_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        ah_store_f32(m->host, i, t, (float)ah__conf_uniform(g, -amp, amp));
}

/* Rows of the full key tensor that belong to one key set, gathered. */
static void gather(const ah__conf_case *c, const ah_mirror *full, ah_mirror *part, int which,
                   size_t row_bytes)
{
    size_t src = 0, dst = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) {
        const size_t chunk = c->klen[q], n = keys_of(c, q, which);
        const size_t skip = which == KEYS_NEW ? chunk : 0;
        memcpy((char *)part->host + dst * row_bytes, (char *)full->host + (src + skip) * row_bytes,
               n * row_bytes);
        dst += n;
        src += chunk + c->qlen[q];
    }
}

/* Plan the batch on bind and run layer 0 over k, v into out (and lse). */
static int plan_forward(ah__conf_run *r, ah_binding *bind, const ah_mirror *k, const ah_mirror *v,
                        ah_mirror *out, ah_mirror *lse)
{
    if (ah_binding_plan(bind, &r->batch.b, AH_PLAN_EAGER, ah_device_stream(r->dev)) != AH_OK)
        return ah__conf_fail(r, "plan: %s", ah_binding_errmsg(bind));
    ah_forward_args a;
    DLTensor out_desc;
    ah__conf_forward_args(r, &a, &out_desc, 0);
    a.key = &k->t;
    a.value = &v->t;
    a.out = &out->t;
    a.lse = lse ? &lse->t : NULL;
    if (ah_binding_forward(bind, 0, &a) != AH_OK)
        return ah__conf_fail(r, "forward: %s", ah_binding_errmsg(bind));
    return 0;
}

/* The merge case's two passes and their merge into r->out / r->lse. */
static void run_merge(ah__conf_run *r, const ah_layer_spec *s)
{
    const ah__conf_case *c = r->c;
    ah_mirror m[8];
    memset(m, 0, sizeof m);
    ah_mirror *kc = &m[0], *vc = &m[1], *kn = &m[2], *vn = &m[3], *oc = &m[4], *lc = &m[5],
              *on = &m[6], *ln = &m[7];
    uint32_t nc = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) nc += c->klen[q];
    const int64_t hk = s->num_kv_heads, hq = s->num_q_heads, T = r->T;
    const int64_t skc[3] = {nc, hk, s->qk_head_size}, svc[3] = {nc, hk, s->v_head_size},
                  skn[3] = {T, hk, s->qk_head_size}, svn[3] = {T, hk, s->v_head_size},
                  so[3] = {T, hq, s->v_head_size}, sl[2] = {T, hq};
    const size_t esz = ah_dtype_size(s->q_dtype);
    if (ah__conf_tensor_alloc(r, kc, s->q_dtype, 3, skc) ||
        ah__conf_tensor_alloc(r, vc, s->q_dtype, 3, svc) ||
        ah__conf_tensor_alloc(r, kn, s->q_dtype, 3, skn) ||
        ah__conf_tensor_alloc(r, vn, s->q_dtype, 3, svn) ||
        ah__conf_tensor_alloc(r, oc, s->q_dtype, 3, so) ||
        ah__conf_tensor_alloc(r, lc, AH_DTYPE_FP32, 2, sl) ||
        ah__conf_tensor_alloc(r, on, s->q_dtype, 3, so) ||
        ah__conf_tensor_alloc(r, ln, AH_DTYPE_FP32, 2, sl))
        goto done;
    const size_t krow = (size_t)hk * s->qk_head_size * esz,
                 vrow = (size_t)hk * s->v_head_size * esz;
    gather(c, &r->knew, kc, KEYS_CHUNK, krow);
    gather(c, &r->vnew, vc, KEYS_CHUNK, vrow);
    gather(c, &r->knew, kn, KEYS_NEW, krow);
    gather(c, &r->vnew, vn, KEYS_NEW, vrow);
    if (ah__conf_upload(r, kc) || ah__conf_upload(r, vc) || ah__conf_upload(r, kn) ||
        ah__conf_upload(r, vn))
        goto done;
    /* the prefix chunk in a context step, the new tokens bottom-right:
     * one binding, two plans */
    if (set_keys(r, KEYS_CHUNK) || plan_forward(r, r->bind, kc, vc, oc, lc) ||
        set_keys(r, KEYS_NEW) || plan_forward(r, r->bind, kn, vn, on, ln))
        goto done;
    ah_merge_args ma = {sizeof ma, &on->t,    &ln->t,    &oc->t,
                        &lc->t,    &r->out.t, &r->lse.t, ah_device_stream(r->dev)};
    ah_status st = ah_binding_merge_states(r->bind, 0, &ma);
    if (st == AH_ERR_UNSUPPORTED) ah__conf_skip(r, "the plugin offers no merge_states");
    else if (st != AH_OK) ah__conf_fail(r, "merge_states: %s", ah_binding_errmsg(r->bind));
done:
    for (int i = 0; i < 8; i++) ah_mirror_free(&m[i]);
}

void ah__conf_run_ragged(ah__conf_run *r, const char *plugin)
{
    const ah__conf_case *c = r->c;
    if (ah__conf_bind_prepare(r, plugin, AH_PHASE_PREFILL)) return;
    const ah_decision *rd = ah_selection_ragged_decision(r->sel, 0);
    if (!rd) {
        ah__conf_fail(r, "the model's layer 0 has no ragged prefill form");
        return;
    }
    if (!ah_selection_ragged_bound(r->sel, 0)) {
        const ah_candidate *cd = rd->n_candidates ? &rd->candidates[0] : NULL;
        if (cd && cd->n_reasons)
            ah__conf_skip(r, "plugin refuses the ragged form: %s = %s (supported: %s)",
                          cd->reasons[0].field, cd->reasons[0].value, cd->reasons[0].supported);
        else if (c->ragged_beside)
            ah__conf_skip(r, "the ragged form is not bound beside %s, which serves the paged form",
                          ah_selection_decision(r->sel, 0, AH_PHASE_PREFILL)->plugin);
        else ah__conf_skip(r, "the ragged form is not bound");
        return;
    }
    if (!r->caps->caller_output) {
        ah__conf_skip(r, "ragged cases hand forward the caller's output buffers, which a "
                         "plugin with caller_output = 0 does not take");
        return;
    }
    /* paging for the paged form: every key position the request has */
    uint32_t slen[AH_CONF_MAX_REQS], maxb = 0, total = 0, max_s = 0, tk = 0;
    r->T = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) {
        const uint32_t k = keys_of(c, q, KEYS_FULL);
        slen[q] = k > c->qlen[q] ? k : c->qlen[q];
        const uint32_t nb = (slen[q] + r->spec.block_size - 1) / r->spec.block_size;
        total += nb;
        if (nb > maxb) maxb = nb;
        if (slen[q] > max_s) max_s = slen[q];
        r->T += c->qlen[q];
        tk += k;
    }
    r->stride = maxb + 2;
    r->num_blocks = total + 3;
    r->lim = (ah_limits){sizeof(ah_limits), c->num_reqs, r->T, r->stride, max_s, r->num_blocks};
    if (ah__conf_bind_open(r, AH_PHASE_PREFILL)) return;
    if (ah__conf_batch_fill(r, &r->batch, c->qlen, slen, 0)) return;
    ah__conf_batch *b = &r->batch;
    const int64_t ncuk = c->num_reqs + 1;
    const DLDataType i32 = {kDLInt, 32, 1};
    if (!(b->cuk = calloc(c->num_reqs + 1, sizeof(int32_t)))) {
        ah__conf_fail(r, "out of host memory");
        return;
    }
    if (ah__conf_tensor_alloc_dl(r, &b->d_cuk, i32, 1, &ncuk) || ah__conf_batch_upload(r, b))
        return;
    /* from here on the ragged form's spec describes every tensor */
    r->spec = rd->spec;
    const ah_layer_spec *s = &r->spec;
    const int64_t hq = s->num_q_heads, hk = s->num_kv_heads, T = r->T;
    const int64_t sq[3] = {T, hq, s->qk_head_size}, sk[3] = {tk, hk, s->qk_head_size},
                  sv[3] = {tk, hk, s->v_head_size}, so[3] = {T, hq, s->v_head_size},
                  sl[2] = {T, hq}, sh[1] = {hq};
    if (ah__conf_tensor_alloc(r, &r->q, s->q_dtype, 3, sq) ||
        ah__conf_tensor_alloc(r, &r->knew, s->q_dtype, 3, sk) ||
        ah__conf_tensor_alloc(r, &r->vnew, s->q_dtype, 3, sv) ||
        ah__conf_tensor_alloc(r, &r->out, s->q_dtype, 3, so) ||
        ah__conf_tensor_alloc(r, &r->lse, AH_DTYPE_FP32, 2, sl) ||
        ah__conf_tensor_alloc(r, &r->sinks, AH_DTYPE_FP32, 1, sh) ||
        ah__conf_tensor_alloc(r, &r->alibi, AH_DTYPE_FP32, 1, sh))
        return;
    /* q amplitude 4: logits of a few units, as the paged cases */
    fill(&r->rng, &r->q, s->q_dtype, 4.0);
    fill(&r->rng, &r->knew, s->q_dtype, 1.0);
    fill(&r->rng, &r->vnew, s->q_dtype, 1.0);
    float *sk_ = r->sinks.host, *sa = r->alibi.host;
    for (uint32_t h = 0; h < s->num_q_heads; h++) {
        sk_[h] = (float)ah__conf_uniform(&r->rng, -1.0, 3.0);
        sa[h] = exp2f(-8.0f * (float)(h + 1) / (float)s->num_q_heads);
    }
    r->k_scale = r->v_scale = 1.0f;
    if (ah__conf_upload(r, &r->q) || ah__conf_upload(r, &r->knew) || ah__conf_upload(r, &r->vnew) ||
        ah__conf_upload(r, &r->sinks) || ah__conf_upload(r, &r->alibi) ||
        ah__conf_poison_outputs(r))
        return;
    if (c->ragged_merge) run_merge(r, s);
    else if (!set_keys(r, KEYS_FULL))
        plan_forward(r, r->bind, &r->knew, &r->vnew, &r->out, c->want_lse ? &r->lse : NULL);
    if (r->res->verdict != AH__CONF_PASS) return;
    ah_forward_args a; /* where the outputs are: the caller's buffers */
    memset(&a, 0, sizeof a);
    a.out = &r->out.t;
    a.lse = c->want_lse || c->ragged_merge ? &r->lse.t : NULL;
    if (set_keys(r, KEYS_FULL) || ah__conf_fetch_outputs(r, &a)) return;
    ah__conf_check_output(r, r->out.host, a.lse ? r->lse.host : NULL,
                          c->ragged_merge     ? "ragged merge"
                          : c->ragged_context ? "ragged context"
                                              : "ragged");
}
