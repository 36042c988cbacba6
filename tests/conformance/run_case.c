/*
 * Running one case through the public host API: model text -> forced
 * selection -> binding -> device buffers -> plan -> forward (with the
 * plugin's own KV write) -> copy back -> compare with the oracle.
 *
 * The KV cache starts as random finite values everywhere (so a plugin that
 * wrongly reads a slot gets a wrong answer, not a zero that happens to fit),
 * with each request's context written through the oracle's write_kv. After
 * the run the whole cache is compared bit for bit with the oracle's own
 * write of the new tokens: written slots must match exactly, every other
 * byte must be untouched. Outputs are poisoned with a NaN pattern first, so
 * an element the plugin never wrote is told apart from a wrong one.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "runner.h"

static int set_verdict(ah__conf_run *r, ah__conf_verdict v, const char *fmt, va_list ap)
{
    if (r->res->verdict != AH__CONF_FAIL) { /* the first failure's message stays */
        r->res->verdict = v;
        vsnprintf(r->res->detail, sizeof r->res->detail, fmt, ap);
    }
    return -1;
}

int ah__conf_fail(ah__conf_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_verdict(r, AH__CONF_FAIL, fmt, ap);
    va_end(ap);
    return -1;
}

int ah__conf_skip(ah__conf_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_verdict(r, AH__CONF_SKIP, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- binding -------------------------------------------------------------- */

int ah__conf_bind_prepare(ah__conf_run *r, const char *plugin, ah_phase phase)
{
    ah_error err = {{0}};
    char *text = r->c->kind == AH__CONF_RAGGED ? ah__conf_model_text_ragged(r->c)
                                               : ah__conf_model_text(&r->c->spec);
    if (!text) return ah__conf_fail(r, "out of memory building the model text");
    ah_status s = ah_model_parse(text, "<conformance case>", &r->model, &err);
    free(text);
    if (s != AH_OK) return ah__conf_fail(r, "model text rejected: %s", err.msg);
    s = r->c->ragged_beside ? ah_host_select_ragged(r->host, r->model, plugin, &r->sel, &err)
                            : ah_host_select_forced(r->host, r->model, plugin, &r->sel, &err);
    if (s != AH_OK)
        return ah__conf_skip(r, "%s: %s",
                             r->c->ragged_beside ? "no plugin serves the paged form"
                                                 : "plugin refuses this layer",
                             err.msg);
    const ah_decision *d = ah_selection_decision(r->sel, 0, phase);
    if (r->c->ragged_beside && (!d || !d->plugin))
        return ah__conf_skip(r, "no plugin serves the paged form beside the ragged one");
    if (!d || !d->plugin) return ah__conf_fail(r, "selection has no decision for layer 0");
    r->spec = d->spec;
    const ah_layer_spec *want = &r->c->spec;
    if (r->spec.kv_dtype != want->kv_dtype || r->spec.kv_layout != want->kv_layout ||
        r->spec.qk_head_size != want->qk_head_size || r->spec.block_size != want->block_size)
        return ah__conf_fail(r,
                             "resolved spec differs from the model text (kv %s/%s, hd %u, bs %u)",
                             ah_dtype_name(r->spec.kv_dtype), ah_kv_layout_str(r->spec.kv_layout),
                             r->spec.qk_head_size, r->spec.block_size);
    return 0;
}

int ah__conf_bind_open(ah__conf_run *r, ah_phase phase)
{
    ah_error err = {{0}};
    ah_binding_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.limits = r->lim;
    ah_status s = ah_binding_create(r->host, r->sel, &o, &r->bind, &err);
    if (s != AH_OK) return ah__conf_fail(r, "ah_binding_create: %s: %s", ah_status_str(s), err.msg);
    r->dev = ah_binding_device(r->bind, 0, phase);
    if (!r->dev) return ah__conf_fail(r, "ah_binding_device returned NULL");
    return 0;
}

/* ---- tensors -------------------------------------------------------------- */

int ah__conf_tensor_alloc(ah__conf_run *r, ah_mirror *t, ah_dtype dt, int ndim,
                          const int64_t *shape)
{
    DLDataType d = ah_dtype_to_dl(dt);
    return ah__conf_tensor_alloc_dl(r, t, d, ndim, shape);
}

int ah__conf_tensor_alloc_dl(ah__conf_run *r, ah_mirror *t, DLDataType d, int ndim,
                             const int64_t *shape)
{
    char why[512];
    return ah_mirror_init(t, r->dev, d, ndim, shape, why, sizeof why) ? ah__conf_fail(r, "%s", why)
                                                                      : 0;
}

int ah__conf_upload(ah__conf_run *r, ah_mirror *t)
{
    char why[512];
    return ah_mirror_upload(t, 0, why, sizeof why) ? ah__conf_fail(r, "%s", why) : 0;
}

int ah__conf_download(ah__conf_run *r, ah_mirror *t)
{
    char why[512];
    return ah_mirror_download(t, 0, why, sizeof why) ? ah__conf_fail(r, "%s", why) : 0;
}

/* ---- the batch ------------------------------------------------------------ */

int ah__conf_batch_fill(ah__conf_run *r, ah__conf_batch *b, const uint32_t *qlen,
                        const uint32_t *slen, int with_slots)
{
    const uint32_t R = r->c->num_reqs, bs = r->spec.block_size;
    if (!b->qsl) {
        b->qsl = calloc(R + 1, sizeof(int32_t));
        b->sl = calloc(R, sizeof(int32_t));
        b->bt = calloc((size_t)R * r->stride, sizeof(int32_t));
        b->slots = calloc(r->T ? r->T : 1, sizeof(int64_t));
        b->el = calloc(R, sizeof(int32_t));
        b->mip = calloc(R + 1, sizeof(int64_t));
        if (!b->qsl || !b->sl || !b->bt || !b->slots || !b->el || !b->mip)
            return ah__conf_fail(r, "out of host memory");
        const int64_t s_qsl = R + 1, s_sl = R, s_bt[2] = {R, r->stride}, s_slots = r->T;
        const DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1}, u8 = {kDLUInt, 8, 1};
        if (ah__conf_tensor_alloc_dl(r, &b->d_qsl, i32, 1, &s_qsl) ||
            ah__conf_tensor_alloc_dl(r, &b->d_sl, i32, 1, &s_sl) ||
            ah__conf_tensor_alloc_dl(r, &b->d_bt, i32, 2, s_bt) ||
            ah__conf_tensor_alloc_dl(r, &b->d_slots, i64, 1, &s_slots) ||
            ah__conf_tensor_alloc_dl(r, &b->d_el, i32, 1, &s_sl) ||
            ah__conf_tensor_alloc_dl(r, &b->d_mip, i64, 1, &s_qsl))
            return -1;
        if (r->c->tree_mask) {
            int64_t n = 0;
            for (uint32_t q = 0; q < R; q++) n += (int64_t)r->c->qlen[q] * r->c->slen[q];
            b->mask = calloc((size_t)n + 1, 1);
            if (!b->mask) return ah__conf_fail(r, "out of host memory");
            const int64_t s_mask = n;
            if (ah__conf_tensor_alloc_dl(r, &b->d_mask, u8, 1, &s_mask)) return -1;
        }
    }
    /* a shuffled pool: blocks go to requests in a random order */
    uint32_t *perm = malloc(sizeof(uint32_t) * r->num_blocks);
    if (!perm) return ah__conf_fail(r, "out of host memory");
    for (uint32_t i = 0; i < r->num_blocks; i++) perm[i] = i;
    for (uint32_t i = r->num_blocks - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(ah__conf_next(&r->rng) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    uint32_t next = 0, max_q = 0, max_s = 0, released = 0;
    const int32_t spare = (int32_t)perm[r->num_blocks - 1]; /* never a request's */
    b->qsl[0] = 0;
    const int cross = r->spec.attn_type == AH_ATTN_ENCODER_DECODER;
    uint32_t max_e = 0;
    b->mip[0] = 0;
    for (uint32_t q = 0; q < R; q++) {
        const uint32_t el = cross ? r->c->elen[q] : 0, kv = el > slen[q] ? el : slen[q];
        uint32_t nb = (kv + bs - 1) / bs;
        b->el[q] = (int32_t)el;
        if (el > max_e) max_e = el;
        /* a speculative tree: each draft token sees its ancestors and
         * itself; the prefix is visible except a few random holes (the
         * mask covers the whole row) */
        b->mip[q + 1] = b->mip[q] + (int64_t)qlen[q] * slen[q];
        if (b->mask) {
            uint8_t *m = b->mask + b->mip[q];
            const uint32_t first = slen[q] - qlen[q];
            uint32_t parent[64];
            for (uint32_t i = 0; i < qlen[q] && i < 64; i++) {
                parent[i] = i ? (uint32_t)(ah__conf_next(&r->rng) % i) : 0;
                uint8_t *row = m + (size_t)i * slen[q];
                for (uint32_t j = 0; j < first; j++) row[j] = (ah__conf_next(&r->rng) % 10) != 0;
                if (i) memcpy(row + first, m + (size_t)parent[i] * slen[q] + first, i);
                row[first + i] = 1;
            }
        }
        int32_t *row = b->bt + (size_t)q * r->stride;
        for (uint32_t k = 0; k < r->stride; k++) row[k] = k < nb ? (int32_t)perm[next++] : spare;
        /* released: block k's last position is at least W before the first
         * query's, so no query sees it (plugin.h, ah_kv_group) */
        const int64_t W = r->spec.sliding_window, p0 = (int64_t)slen[q] - qlen[q];
        for (uint32_t k = 0; r->c->release && W && k < nb && (int64_t)(k + 1) * bs - 1 <= p0 - W;
             k++, released++)
            row[k] = -1;
        b->qsl[q + 1] = b->qsl[q] + (int32_t)qlen[q];
        b->sl[q] = (int32_t)slen[q];
        for (uint32_t i = 0; i < qlen[q]; i++) {
            int64_t pos = (int64_t)slen[q] - qlen[q] + i;
            b->slots[b->qsl[q] + (int32_t)i] =
                with_slots && pos >= 0 ? (int64_t)row[pos / bs] * bs + pos % bs : -1;
        }
        if (qlen[q] > max_q) max_q = qlen[q];
        if (slen[q] > max_s) max_s = slen[q];
    }
    free(perm);
    if (next >= r->num_blocks) return ah__conf_fail(r, "internal: block pool too small");
    if (r->c->release && !released) return ah__conf_fail(r, "internal: no block to release");
    if (max_e > max_s) max_s = max_e; /* max_seq_len bounds encoder lengths too */
    memcpy(b->d_el.host, b->el, sizeof(int32_t) * R);
    memcpy(b->d_mip.host, b->mip, sizeof(int64_t) * (R + 1));
    if (b->mask) memcpy(b->d_mask.host, b->mask, (size_t)b->mip[R]);
    memcpy(b->d_qsl.host, b->qsl, sizeof(int32_t) * (R + 1));
    memcpy(b->d_sl.host, b->sl, sizeof(int32_t) * R);
    memcpy(b->d_bt.host, b->bt, sizeof(int32_t) * R * r->stride);
    memcpy(b->d_slots.host, b->slots, sizeof(int64_t) * r->T);
    ah_batch *x = &b->b;
    memset(x, 0, sizeof *x);
    x->struct_size = sizeof *x;
    x->num_reqs = R;
    x->num_tokens = (uint32_t)b->qsl[R];
    x->max_query_len = max_q;
    x->max_seq_len = max_s;
    x->num_blocks = r->num_blocks;
    x->query_start_loc = &b->d_qsl.t;
    x->seq_lens = &b->d_sl.t;
    x->block_table = &b->d_bt.t;
    x->slot_mapping = &b->d_slots.t;
    x->query_start_loc_host = b->qsl;
    x->seq_lens_host = b->sl;
    x->block_table_host = b->bt;
    x->slot_mapping_host = b->slots;
    x->block_table_stride = r->stride;
    if (cross) {
        x->encoder_seq_lens = &b->d_el.t;
        x->encoder_seq_lens_host = b->el;
    }
    if (b->mask) {
        x->custom_mask = &b->d_mask.t;
        x->mask_indptr = &b->d_mip.t;
        x->custom_mask_host = b->mask;
        x->mask_indptr_host = b->mip;
        x->custom_mask_len = (uint64_t)b->mip[R];
    }
    return 0;
}

int ah__conf_batch_upload(ah__conf_run *r, ah__conf_batch *b)
{
    if (ah__conf_upload(r, &b->d_qsl) || ah__conf_upload(r, &b->d_sl) ||
        ah__conf_upload(r, &b->d_bt) || ah__conf_upload(r, &b->d_slots) ||
        ah__conf_upload(r, &b->d_el) || ah__conf_upload(r, &b->d_mip) ||
        (b->mask && ah__conf_upload(r, &b->d_mask)))
        return -1;
    return 0;
}

static void batch_free(ah__conf_batch *b)
{
    free(b->qsl);
    free(b->sl);
    free(b->bt);
    free(b->slots);
    free(b->el);
    free(b->mip);
    free(b->mask);
    free(b->cuk);
    ah_mirror_free(&b->d_cuk);
    ah_mirror_free(&b->d_el);
    ah_mirror_free(&b->d_mip);
    ah_mirror_free(&b->d_mask);
    ah_mirror_free(&b->d_qsl);
    ah_mirror_free(&b->d_sl);
    ah_mirror_free(&b->d_bt);
    ah_mirror_free(&b->d_slots);
    memset(b, 0, sizeof *b);
}

/* ---- inputs ------------------------------------------------------------- */

static int is_fp8(ah_dtype t) { return ah_dtype_is_fp8(t); }

/* Largest amplitude of the random queries: logits of a few units, so the
 * softmax is neither flat nor one-hot. */
#define Q_AMP 4.0

static void fill_uniform(ah__conf_rng *g, void *buf, size_t n, ah_dtype t, double amp, double div)
{
    for (size_t i = 0; i < n; i++)
        ah_store_f32(buf, i, t, (float)(ah__conf_uniform(g, -amp, amp) / div));
}

/* An interleaved cache: kc's tensor becomes the key view of the whole
 * [nb, 2, ...] allocation (cache[:, 0]) and vview the value view
 * (cache[:, 1]), its offset in the data pointer as PyTorch's DLPack export
 * puts it. */
static void interleave_views(ah__conf_run *r, int64_t d1, int64_t d2)
{
    const ah_layer_spec *s = &r->spec;
    const int64_t per_block = d1 * d2 * s->qk_head_size;
    const size_t esz = ah_dtype_size(s->kv_dtype);
    r->kc.shape[1] = d1;
    r->view_strides[3] = 1;
    r->view_strides[2] = s->qk_head_size;
    r->view_strides[1] = d2 * s->qk_head_size;
    r->view_strides[0] = 2 * per_block;
    r->kc.t.strides = r->view_strides;
    r->vview = r->kc.t;
    r->vview.data = (char *)r->kc.t.data + (size_t)per_block * esz;
    r->vhost = (char *)r->kc.host + (size_t)per_block * esz;
}

/* Random finite values into a cache of head size D, each element stored
 * as value / its KV head's scale: heads[h] when given, else scale. */
static void fill_cache(ah__conf_rng *g, void *buf, size_t n, const ah_layer_spec *s, uint32_t D,
                       const float *heads, double scale)
{
    const size_t hk = s->num_kv_heads,
                 per_head_run = ah_kv_layout_is_hnd(s->kv_layout) ? (size_t)D * s->block_size : D;
    for (size_t i = 0; i < n; i++) {
        const double div = heads ? heads[i / per_head_run % hk] : scale;
        ah_store_f32(buf, i, s->kv_dtype, (float)(ah__conf_uniform(g, -1.0, 1.0) / div));
    }
}

const float *ah__conf_head_scales(const ah__conf_run *r, const ah_mirror *m)
{
    return ah_spec_kv_scales(&r->spec) == AH_KV_SCALES_PER_HEAD ? m->host : NULL;
}

ah_status ah__conf_ref_write_kv(const ah__conf_run *r, const ah_batch *batch, const void *key,
                                const void *value, void *key_cache, void *value_cache,
                                ah_error *err)
{
    if (ah_spec_kv_scales(&r->spec) == AH_KV_SCALES_PER_HEAD)
        return ah_reference_write_kv_per_head(&r->spec, batch, key, value, key_cache, value_cache,
                                              r->ksc.host, r->vsc.host, err);
    return ah_reference_write_kv(&r->spec, batch, key, value, key_cache, value_cache, r->k_scale,
                                 r->v_scale, err);
}

/* This fill's scales: fresh random K and V scales (FP8 caches), under
 * kv_scales = PER_HEAD a different one per KV head (head h's is 1 + 0.75 h
 * times head 0's, so a plugin that reads one head's scale for another is
 * off by a large factor), and a query scale that fits the queries with room
 * to spare. Tensors are rewritten in place, so a graph captured earlier
 * must read the new values. */
static int set_scales(ah__conf_run *r)
{
    const ah_layer_spec *s = &r->spec;
    ah__conf_rng *g = &r->rng;
    const int fp8 = is_fp8(s->kv_dtype);
    r->k_scale = fp8 ? (float)ah__conf_uniform(g, 0.004, 0.02) : 1.0f;
    r->v_scale = fp8 ? (float)ah__conf_uniform(g, 0.004, 0.02) : 1.0f;
    const double fp8_max = ah_fp8_max(s->kv_dtype);
    r->q_scale = ah_spec_q_scale(s) ? (float)(Q_AMP / fp8_max * ah__conf_uniform(g, 1.25, 2.0)) : 0;
    const ah_kv_scales form = ah_spec_kv_scales(s);
    if (form == AH_KV_SCALES_HOST) return 0;
    const int64_t n = form == AH_KV_SCALES_PER_HEAD ? s->num_kv_heads : 1, one = 1;
    if (!r->ksc.t.data && (ah__conf_tensor_alloc(r, &r->ksc, AH_DTYPE_FP32, 1, &n) ||
                           ah__conf_tensor_alloc(r, &r->vsc, AH_DTYPE_FP32, 1, &n) ||
                           ah__conf_tensor_alloc(r, &r->qsc, AH_DTYPE_FP32, 1, &one)))
        return -1;
    float *k = r->ksc.host, *v = r->vsc.host;
    for (int64_t h = 0; h < n; h++) {
        k[h] = r->k_scale * (1.0f + 0.75f * (float)h);
        v[h] = r->v_scale * (1.0f + 0.75f * (float)h);
    }
    *(float *)r->qsc.host = r->q_scale;
    return ah__conf_upload(r, &r->ksc) || ah__conf_upload(r, &r->vsc) || ah__conf_upload(r, &r->qsc)
               ? -1
               : 0;
}

/* Allocate the data tensors once (graph cases refill them in place). */
static int alloc_data(ah__conf_run *r)
{
    if (r->q.t.data) return 0;
    const ah_layer_spec *s = &r->spec;
    const int hnd = ah_kv_layout_is_hnd(s->kv_layout);
    const int inter = ah_kv_layout_is_interleaved(s->kv_layout);
    const int64_t T = r->T, hq = s->num_q_heads, hk = s->num_kv_heads;
    const int64_t d1 = hnd ? hk : s->block_size, d2 = hnd ? s->block_size : hk;
    const int64_t sq[3] = {T, hq, s->qk_head_size}, sk[3] = {T, hk, s->qk_head_size},
                  sv[3] = {T, hk, s->v_head_size};
    const int64_t skc[4] = {r->num_blocks, inter ? 2 * d1 : d1, d2, s->qk_head_size},
                  svc[4] = {r->num_blocks, d1, d2, s->v_head_size};
    const int64_t so[3] = {T, hq, s->v_head_size}, sl[2] = {T, hq}, sh[1] = {hq};
    if (ah__conf_tensor_alloc(r, &r->q, s->q_dtype, 3, sq) ||
        ah__conf_tensor_alloc(r, &r->knew, s->q_dtype, 3, sk) ||
        ah__conf_tensor_alloc(r, &r->kc, s->kv_dtype, 4, skc) ||
        ah__conf_tensor_alloc(r, &r->out, s->q_dtype, 3, so) ||
        ah__conf_tensor_alloc(r, &r->lse, AH_DTYPE_FP32, 2, sl) ||
        ah__conf_tensor_alloc(r, &r->sinks, AH_DTYPE_FP32, 1, sh) ||
        ah__conf_tensor_alloc(r, &r->alibi, AH_DTYPE_FP32, 1, sh))
        return -1;
    if (!s->use_mla && ah__conf_tensor_alloc(r, &r->vnew, s->q_dtype, 3, sv)) return -1;
    if (inter) interleave_views(r, d1, d2);
    else if (!s->use_mla && ah__conf_tensor_alloc(r, &r->vc, s->kv_dtype, 4, svc)) return -1;
    if (!inter) r->vhost = r->vc.host;
    r->kc0 = malloc(r->kc.bytes);
    r->vc0 = malloc(r->vc.bytes ? r->vc.bytes : 1);
    if (!r->kc0 || !r->vc0) return ah__conf_fail(r, "out of host memory");
    return 0;
}

int ah__conf_fill_inputs(ah__conf_run *r, int context_all)
{
    if (alloc_data(r)) return -1;
    const ah_layer_spec *s = &r->spec;
    ah__conf_rng *g = &r->rng;
    const ah_batch *b = &r->batch.b;
    if (set_scales(r)) return -1;
    const int fp8 = is_fp8(s->kv_dtype);
    const double kdiv = fp8 ? r->k_scale : 1.0, vdiv = fp8 ? r->v_scale : 1.0;
    size_t esz = ah_dtype_size(s->kv_dtype);
    /* every slot finite and random, so stray reads show */
    fill_cache(g, r->kc.host, r->kc.bytes / esz, s, s->qk_head_size,
               fp8 ? ah__conf_head_scales(r, &r->ksc) : NULL, kdiv);
    if (r->vc.host)
        fill_cache(g, r->vc.host, r->vc.bytes / esz, s, s->v_head_size,
                   fp8 ? ah__conf_head_scales(r, &r->vsc) : NULL, vdiv);
    /* the context: positions before the new tokens (or all of them) */
    const int32_t *el = ah_batch_encoder_seq_lens(b);
    size_t nctx = 0;
    for (uint32_t q = 0; q < b->num_reqs; q++) {
        size_t u =
            (size_t)b->seq_lens_host[q] -
            (context_all ? 0
                         : (size_t)(b->query_start_loc_host[q + 1] - b->query_start_loc_host[q]));
        nctx += el && (size_t)el[q] > u ? (size_t)el[q] : u;
    }
    int64_t *pslots = malloc(sizeof(int64_t) * (nctx ? nctx : 1));
    void *pk = malloc(nctx * s->num_kv_heads * s->qk_head_size * ah_dtype_size(s->q_dtype) + 1);
    void *pv = malloc(nctx * s->num_kv_heads * s->v_head_size * ah_dtype_size(s->q_dtype) + 1);
    if (!pslots || !pk || !pv) {
        free(pslots), free(pk), free(pv);
        return ah__conf_fail(r, "out of host memory");
    }
    size_t n = 0;
    for (uint32_t q = 0; q < b->num_reqs; q++) {
        uint32_t ql = (uint32_t)(b->query_start_loc_host[q + 1] - b->query_start_loc_host[q]);
        uint32_t upto = (uint32_t)b->seq_lens_host[q] - (context_all ? 0 : ql);
        if (el && (uint32_t)el[q] > upto) upto = (uint32_t)el[q]; /* the encoder's K/V */
        const int32_t *row = b->block_table_host + (size_t)q * b->block_table_stride;
        for (uint32_t j = 0; j < upto; j++)
            pslots[n++] = (int64_t)row[j / s->block_size] * s->block_size + j % s->block_size;
    }
    fill_uniform(g, pk, n * s->num_kv_heads * s->qk_head_size, s->q_dtype, 1.0, 1.0);
    fill_uniform(g, pv, n * s->num_kv_heads * s->v_head_size, s->q_dtype, 1.0, 1.0);
    ah_batch ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.struct_size = sizeof ctx;
    ctx.num_tokens = (uint32_t)n;
    ctx.num_blocks = r->num_blocks;
    ctx.slot_mapping_host = pslots;
    ah_error err = {{0}};
    ah_status st = ah__conf_ref_write_kv(r, &ctx, pk, pv, r->kc.host, r->vhost, &err);
    free(pslots), free(pk), free(pv);
    if (st != AH_OK) return ah__conf_fail(r, "oracle write_kv of the context: %s", err.msg);
    memcpy(r->kc0, r->kc.host, r->kc.bytes);
    if (r->vc.host) memcpy(r->vc0, r->vc.host, r->vc.bytes);
    /* new tokens, queries, sinks, slopes: q amplitude 4 gives logits of a
     * few units, so the softmax is neither flat nor one-hot */
    fill_uniform(g, r->knew.host, r->knew.bytes / ah_dtype_size(s->q_dtype), s->q_dtype, 1.0, 1.0);
    if (r->vnew.host)
        fill_uniform(g, r->vnew.host, r->vnew.bytes / ah_dtype_size(s->q_dtype), s->q_dtype, 1.0,
                     1.0);
    fill_uniform(g, r->q.host, r->q.bytes / ah_dtype_size(s->q_dtype), s->q_dtype, Q_AMP, 1.0);
    float *sk = r->sinks.host, *sa = r->alibi.host;
    for (uint32_t h = 0; h < s->num_q_heads; h++) {
        sk[h] = (float)ah__conf_uniform(g, -1.0, 3.0);
        sa[h] = exp2f(-8.0f * (float)(h + 1) / (float)s->num_q_heads);
    }
    if (ah__conf_upload(r, &r->kc) || (r->vc.host && ah__conf_upload(r, &r->vc)) ||
        ah__conf_upload(r, &r->knew) || (r->vnew.host && ah__conf_upload(r, &r->vnew)) ||
        ah__conf_upload(r, &r->q) || ah__conf_upload(r, &r->sinks) || ah__conf_upload(r, &r->alibi))
        return -1;
    return 0;
}

/* ---- checks ------------------------------------------------------------- */

static void note_diff(ah__conf_run *r, const ah__conf_diff *d)
{
    if (d->rel_l2 > r->res->rel_l2 || r->res->rel_l2 != r->res->rel_l2) r->res->rel_l2 = d->rel_l2;
    if (d->max_abs > r->res->max_abs) r->res->max_abs = d->max_abs;
}

int ah__conf_check_output(ah__conf_run *r, const void *out_host, const float *lse_host,
                          const char *label)
{
    const ah_layer_spec *s = &r->spec;
    const size_t no = (size_t)r->T * s->num_q_heads * s->v_head_size,
                 nl = (size_t)r->T * s->num_q_heads;
    double *ref = malloc(sizeof(double) * (no ? no : 1)),
           *rl = malloc(sizeof(double) * (nl ? nl : 1));
    if (!ref || !rl) {
        free(ref), free(rl);
        return ah__conf_fail(r, "out of host memory");
    }
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = s,
                        .batch = &r->batch.b,
                        .q = r->q.host,
                        .key_cache = r->kc.host,
                        .value_cache = r->vhost,
                        .sinks = r->sinks.host,
                        .alibi_slopes = r->alibi.host,
                        .k_scale = r->k_scale,
                        .v_scale = r->v_scale,
                        .key = r->knew.host,
                        .value = r->vnew.host,
                        .k_scales = ah__conf_head_scales(r, &r->ksc),
                        .v_scales = ah__conf_head_scales(r, &r->vsc)};
    ah_error err = {{0}};
    if (ah_reference_attention(&in, ref, rl, &err) != AH_OK) {
        free(ref), free(rl);
        return ah__conf_fail(r, "%s: oracle: %s", label, err.msg);
    }
    double refmax = 0;
    const ah__conf_tol tol = ah__conf_tolerance(s->q_dtype, s->kv_dtype, (int)s->fp8_attention);
    for (size_t i = 0; i < no; i++)
        if (fabs(ref[i]) > refmax) refmax = fabs(ref[i]);
    ah__conf_diff d;
    ah__conf_compare(out_host, s->q_dtype, ref, no, &d);
    note_diff(r, &d);
    int rc = 0;
    if (d.n_unwritten || d.n_nan) {
        size_t i = d.first_bad, hv = (size_t)s->num_q_heads * s->v_head_size;
        rc = ah__conf_fail(
            r,
            "%s: out has %zu unwritten and %zu NaN/inf elements (first at token %zu, head %zu, channel %zu)",
            label, d.n_unwritten, d.n_nan, i / hv, i % hv / s->v_head_size, i % s->v_head_size);
    } else if (!(d.rel_l2 <= tol.rel_l2) ||
               !(d.max_abs <= tol.max_abs_rel * (refmax > 1 ? refmax : 1))) {
        rc = ah__conf_fail(
            r, "%s: out error rel_l2 %.3g (tolerance %.3g), max_abs %.3g (tolerance %.3g)", label,
            d.rel_l2, tol.rel_l2, d.max_abs, tol.max_abs_rel * (refmax > 1 ? refmax : 1));
    }
    if (lse_host) {
        ah__conf_compare_lse(lse_host, rl, nl, &d);
        const double lse_tol = tol.lse_abs;
        if (d.n_unwritten || d.n_nan)
            rc = ah__conf_fail(
                r, "%s: lse has %zu unwritten and %zu wrong non-finite values (first at %zu)",
                label, d.n_unwritten, d.n_nan, d.first_bad);
        else if (!(d.max_abs <= lse_tol))
            rc = ah__conf_fail(r, "%s: lse max error %.3g (tolerance %.3g)", label, d.max_abs,
                               lse_tol);
    }
    free(ref), free(rl);
    return rc;
}

/* Compare the cache the plugin wrote (got) with the oracle's (want). */
static int check_cache(ah__conf_run *r, const uint8_t *got, const uint8_t *want, size_t bytes,
                       uint32_t head_size, const char *name)
{
    if (!memcmp(got, want, bytes)) return 0;
    const ah_layer_spec *s = &r->spec;
    size_t esz = ah_dtype_size(s->kv_dtype), i = 0;
    while (i < bytes && got[i] == want[i]) i++;
    size_t e = i / esz, per_block = (size_t)s->block_size * s->num_kv_heads * head_size;
    const int inter = ah_kv_layout_is_interleaved(s->kv_layout); /* [nb, 2, ...]: K then V */
    size_t blk = e / per_block / (inter ? 2 : 1), in = e % per_block, slot, head,
           ch = in % head_size;
    if (inter) name = e / per_block % 2 ? "kv_cache (value half)" : "kv_cache (key half)";
    if (ah_kv_layout_is_hnd(s->kv_layout)) {
        head = in / head_size / s->block_size;
        slot = in / head_size % s->block_size;
    } else {
        slot = in / head_size / s->num_kv_heads;
        head = in / head_size % s->num_kv_heads;
    }
    int64_t cache_slot = (int64_t)(blk * s->block_size + slot);
    int written = 0;
    for (uint32_t t = 0; t < r->T; t++) written |= r->batch.slots[t] == cache_slot;
    return ah__conf_fail(r, "%s: block %zu slot %zu head %zu channel %zu: %s (got %g, expected %g)",
                         name, blk, slot, head, ch,
                         written ? "the new token's value differs from the oracle's write"
                                 : "a slot outside slot_mapping was modified",
                         (double)ah_load_f32(got, e, s->kv_dtype),
                         (double)ah_load_f32(want, e, s->kv_dtype));
}

/* ---- the eager attention case --------------------------------------------- */

ah_phase ah__conf_phase_of(const ah__conf_case *c)
{
    for (uint32_t q = 0; q < c->num_reqs; q++)
        if (c->qlen[q] > 1) return AH_PHASE_PREFILL;
    return AH_PHASE_DECODE;
}

/* Forward args over r's tensors; out_desc is used when the plugin fills
 * its own output buffer. */
void ah__conf_forward_args(ah__conf_run *r, ah_forward_args *a, DLTensor *out_desc, int with_kv)
{
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->q = &r->q.t;
    /* keys are packed rows: the new tokens', or a ragged step's */
    const int nocache = ah_spec_cacheless(&r->spec) || ah_spec_ragged(&r->spec);
    a->key = with_kv || nocache ? &r->knew.t : NULL;
    a->value = (with_kv || nocache) && r->vnew.t.data ? &r->vnew.t : NULL;
    a->key_cache = nocache ? NULL : &r->kc.t;
    a->value_cache = nocache ? NULL : ah__conf_value_cache(r);
    if (r->caps->caller_output) {
        a->out = &r->out.t;
    } else {
        memset(out_desc, 0, sizeof *out_desc);
        a->out = out_desc;
    }
    a->lse = r->c->want_lse ? &r->lse.t : NULL;
    a->sinks = r->spec.use_sinks ? &r->sinks.t : NULL;
    a->alibi_slopes = r->spec.use_alibi ? &r->alibi.t : NULL;
    if (ah_spec_kv_scales(&r->spec) == AH_KV_SCALES_HOST) {
        a->k_scale = r->k_scale;
        a->v_scale = r->v_scale;
        a->q_scale = r->q_scale;
    } else { /* the scales in tensors (ABI 2.3); MLA takes no V scale */
        a->k_scale_tensor = &r->ksc.t;
        a->v_scale_tensor = r->spec.use_mla ? NULL : &r->vsc.t;
        a->q_scale_tensor = ah_spec_q_scale(&r->spec) ? &r->qsc.t : NULL;
    }
    a->stream = ah_device_stream(r->dev);
}

const DLTensor *ah__conf_value_cache(const ah__conf_run *r)
{
    return r->vview.data ? &r->vview : r->vc.t.data ? &r->vc.t : NULL;
}

/* Poison out and lse on the device. */
int ah__conf_poison_outputs(ah__conf_run *r)
{
    ah__conf_poison(r->out.host, r->out.bytes / ah_dtype_size(r->spec.q_dtype), r->spec.q_dtype);
    ah__conf_poison_f32(r->lse.host, r->lse.bytes / 4);
    return ah__conf_upload(r, &r->out) || ah__conf_upload(r, &r->lse) ? -1 : 0;
}

/* Copy the output back from wherever the plugin put it. */
int ah__conf_fetch_outputs(ah__conf_run *r, const ah_forward_args *a)
{
    if (ah_device_sync(r->dev) != AH_OK)
        return ah__conf_fail(r, "synchronize: %s", ah_device_errmsg(r->dev));
    if (a->out != &r->out.t) {
        if (!a->out->data) return ah__conf_fail(r, "plugin left the out descriptor empty");
        if (ah_device_copy(r->dev, r->out.host, ah_dl_data(a->out), r->out.bytes,
                           AH_COPY_DEVICE_TO_HOST) != AH_OK)
            return ah__conf_fail(r, "copy out back: %s", ah_device_errmsg(r->dev));
    } else if (ah__conf_download(r, &r->out)) {
        return -1;
    }
    return a->lse && ah__conf_download(r, &r->lse) ? -1 : 0;
}

static void run_attention(ah__conf_run *r, const char *plugin)
{
    const ah__conf_case *c = r->c;
    ah_phase ph = ah__conf_phase_of(c);
    if (ah__conf_bind_prepare(r, plugin, ph)) return;
    uint32_t maxb = 0, total = 0, max_s = 0;
    r->T = 0;
    for (uint32_t q = 0; q < c->num_reqs; q++) {
        const uint32_t kv = c->elen[q] > c->slen[q] ? c->elen[q] : c->slen[q];
        uint32_t nb = (kv + r->spec.block_size - 1) / r->spec.block_size;
        total += nb;
        if (nb > maxb) maxb = nb;
        if (kv > max_s) max_s = kv;
        r->T += c->qlen[q];
    }
    r->stride = maxb + 2;
    r->num_blocks = total + 3;
    r->lim = (ah_limits){sizeof(ah_limits), c->num_reqs, r->T, r->stride, max_s, r->num_blocks};
    if (ah__conf_bind_open(r, ph)) return;
    if (ah__conf_batch_fill(r, &r->batch, c->qlen, c->slen, c->write_kv) ||
        ah__conf_batch_upload(r, &r->batch) || ah__conf_fill_inputs(r, !c->write_kv) ||
        ah__conf_poison_outputs(r))
        return;
    /* the oracle's write of the new tokens: what the cache must hold after */
    ah_error err = {{0}};
    if (c->write_kv && ah__conf_ref_write_kv(r, &r->batch.b, r->knew.host, r->vnew.host, r->kc.host,
                                             r->vhost, &err) != AH_OK) {
        ah__conf_fail(r, "oracle write_kv: %s", err.msg);
        return;
    }
    ah_status s = ah_binding_plan(r->bind, &r->batch.b, AH_PLAN_EAGER, ah_device_stream(r->dev));
    if (s != AH_OK) {
        ah__conf_fail(r, "plan: %s", ah_binding_errmsg(r->bind));
        return;
    }
    ah_forward_args a;
    DLTensor out_desc;
    ah__conf_forward_args(r, &a, &out_desc, c->write_kv);
    s = ah_binding_forward(r->bind, 0, &a);
    if (s != AH_OK) {
        ah__conf_fail(r, "forward: %s", ah_binding_errmsg(r->bind));
        return;
    }
    if (ah__conf_fetch_outputs(r, &a)) return;
    /* the cache: new slots bit-exact, the rest untouched (kc0 reused as "got") */
    if (ah_device_copy(r->dev, r->kc0, r->kc.t.data, r->kc.bytes, AH_COPY_DEVICE_TO_HOST) !=
            AH_OK ||
        (r->vc.t.data && ah_device_copy(r->dev, r->vc0, r->vc.t.data, r->vc.bytes,
                                        AH_COPY_DEVICE_TO_HOST) != AH_OK)) {
        ah__conf_fail(r, "copy cache back: %s", ah_device_errmsg(r->dev));
        return;
    }
    check_cache(r, r->kc0, r->kc.host, r->kc.bytes, r->spec.qk_head_size,
                r->vview.data ? "kv_cache" : "key_cache");
    if (r->vc.t.data)
        check_cache(r, r->vc0, r->vc.host, r->vc.bytes, r->spec.v_head_size, "value_cache");
    ah__conf_check_output(r, r->out.host, a.lse ? r->lse.host : NULL, "eager");
}

/* ---- merge_states ----------------------------------------------------------- */

static void run_merge(ah__conf_run *r, const char *plugin)
{
    if (ah__conf_bind_prepare(r, plugin, AH_PHASE_PREFILL)) return;
    r->lim = (ah_limits){sizeof(ah_limits), 1, 16, 4, 64, 4};
    if (ah__conf_bind_open(r, AH_PHASE_PREFILL)) return;
    const ah_layer_spec *s = &r->spec;
    const uint32_t T = 7, H = s->num_q_heads, D = s->v_head_size;
    const int64_t sv[3] = {T, H, D}, sl[2] = {T, H};
    ah_mirror va, vb, la, lb;
    memset(&va, 0, sizeof va), memset(&vb, 0, sizeof vb), memset(&la, 0, sizeof la),
        memset(&lb, 0, sizeof lb);
    double *a = NULL, *b = NULL, *ref = NULL, *rl = NULL, *dla = NULL, *dlb = NULL;
    if (ah__conf_tensor_alloc(r, &va, s->q_dtype, 3, sv) ||
        ah__conf_tensor_alloc(r, &vb, s->q_dtype, 3, sv) ||
        ah__conf_tensor_alloc(r, &la, AH_DTYPE_FP32, 2, sl) ||
        ah__conf_tensor_alloc(r, &lb, AH_DTYPE_FP32, 2, sl) ||
        ah__conf_tensor_alloc(r, &r->out, s->q_dtype, 3, sv) ||
        ah__conf_tensor_alloc(r, &r->lse, AH_DTYPE_FP32, 2, sl))
        goto done;
    size_t n = (size_t)T * H * D, nl = (size_t)T * H;
    a = malloc(sizeof(double) * n), b = malloc(sizeof(double) * n),
    ref = malloc(sizeof(double) * n);
    rl = malloc(sizeof(double) * nl), dla = malloc(sizeof(double) * nl),
    dlb = malloc(sizeof(double) * nl);
    if (!a || !b || !ref || !rl || !dla || !dlb) {
        ah__conf_fail(r, "out of host memory");
        goto done;
    }
    fill_uniform(&r->rng, va.host, n, s->q_dtype, 1.0, 1.0);
    fill_uniform(&r->rng, vb.host, n, s->q_dtype, 1.0, 1.0);
    for (size_t i = 0; i < nl; i++) {
        ((float *)la.host)[i] = (float)ah__conf_uniform(&r->rng, -2.0, 6.0);
        ((float *)lb.host)[i] = (float)ah__conf_uniform(&r->rng, -2.0, 6.0);
    }
    ((float *)la.host)[1] = -INFINITY; /* an empty part: the other passes through */
    ((float *)lb.host)[nl - 1] = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        a[i] = ah_load_f32(va.host, i, s->q_dtype);
        b[i] = ah_load_f32(vb.host, i, s->q_dtype);
    }
    for (size_t i = 0; i < nl; i++) dla[i] = ((float *)la.host)[i], dlb[i] = ((float *)lb.host)[i];
    ah_reference_merge_states(T, H, D, a, dla, b, dlb, ref, rl);
    ah__conf_poison(r->out.host, n, s->q_dtype);
    ah__conf_poison_f32(r->lse.host, nl);
    if (ah__conf_upload(r, &va) || ah__conf_upload(r, &vb) || ah__conf_upload(r, &la) ||
        ah__conf_upload(r, &lb) || ah__conf_upload(r, &r->out) || ah__conf_upload(r, &r->lse))
        goto done;
    ah_merge_args m = {sizeof m, &va.t,     &la.t,     &vb.t,
                       &lb.t,    &r->out.t, &r->lse.t, ah_device_stream(r->dev)};
    ah_status st = ah_binding_merge_states(r->bind, 0, &m);
    if (st == AH_ERR_UNSUPPORTED) {
        ah__conf_skip(r, "the plugin offers no merge_states");
        goto done;
    }
    if (st != AH_OK) {
        ah__conf_fail(r, "merge_states: %s", ah_binding_errmsg(r->bind));
        goto done;
    }
    if (ah_device_sync(r->dev) != AH_OK || ah__conf_download(r, &r->out) ||
        ah__conf_download(r, &r->lse)) {
        ah__conf_fail(r, "copy back: %s", ah_device_errmsg(r->dev));
        goto done;
    }
    ah__conf_diff d;
    const double tol = ah__conf_tolerance(s->q_dtype, s->q_dtype, 0).rel_l2;
    ah__conf_compare(r->out.host, s->q_dtype, ref, n, &d);
    note_diff(r, &d);
    if (d.n_nan || d.n_unwritten)
        ah__conf_fail(r, "merge: out has %zu unwritten and %zu NaN/inf elements", d.n_unwritten,
                      d.n_nan);
    else if (!(d.rel_l2 <= tol))
        ah__conf_fail(r, "merge: out error rel_l2 %.3g (tolerance %.3g)", d.rel_l2, tol);
    ah__conf_compare_lse(r->lse.host, rl, nl, &d);
    if (d.n_nan || d.n_unwritten || !(d.max_abs <= 1e-4))
        ah__conf_fail(r, "merge: lse_out max error %.3g, %zu unwritten, %zu non-finite", d.max_abs,
                      d.n_unwritten, d.n_nan);
done:
    free(a), free(b), free(ref), free(rl), free(dla), free(dlb);
    ah_mirror_free(&va), ah_mirror_free(&vb), ah_mirror_free(&la), ah_mirror_free(&lb);
}

/* ---- entry -------------------------------------------------------------- */

void ah__conf_run_free(ah__conf_run *r)
{
    batch_free(&r->batch);
    ah_mirror *ts[] = {&r->q,   &r->knew,  &r->vnew,  &r->kc,  &r->vc,  &r->out,
                       &r->lse, &r->sinks, &r->alibi, &r->ksc, &r->vsc, &r->qsc};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ah_mirror_free(ts[i]);
    free(r->kc0), free(r->vc0);
    if (r->bind) ah_binding_destroy(r->bind);
    if (r->sel) ah_selection_destroy(r->sel);
    if (r->model) ah_model_destroy(r->model);
    memset(r, 0, sizeof *r);
}

void ah__conf_run_case(ah_host *host, const char *plugin, const ah_plugin_info *info,
                       const ah__conf_case *c, uint32_t cp_devices, ah__conf_result *res)
{
    memset(res, 0, sizeof *res);
    res->verdict = AH__CONF_PASS;
    ah__conf_run r;
    memset(&r, 0, sizeof r);
    r.host = host;
    r.c = c;
    r.caps = info->caps;
    r.res = res;
    ah__conf_rng_seed(&r.rng, c->seed, 1);
    switch (c->kind) {
    case AH__CONF_ATTENTION: run_attention(&r, plugin); break;
    case AH__CONF_MERGE: run_merge(&r, plugin); break;
    case AH__CONF_GRAPH: ah__conf_run_graph(&r, plugin); break;
    case AH__CONF_CP: ah__conf_run_cp(&r, plugin, cp_devices); break;
    case AH__CONF_RAGGED: ah__conf_run_ragged(&r, plugin); break;
    }
    ah__conf_run_free(&r);
}
