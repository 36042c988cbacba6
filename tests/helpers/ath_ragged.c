/*
 * A ragged step (ABI 2.3, AH_FEAT_RAGGED_KV) through a plugin against the
 * oracle: keys and values packed by cu_seqlens_k, no cache.
 */
#include "ath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_REQS = 64, MAX_HEADS = 256 };

/* Bottom-right steps: k_len >= q_len (a whole prompt for request 0,
 * context before the rest), and on a bidirectional layer request 1 with
 * fewer keys than queries; context steps: request 0 without keys. */
static void ragged_lengths(const ath_ragged_spec *c, uint64_t *rng, int32_t *ql, int32_t *kl)
{
    for (uint32_t r = 0; r < c->reqs; r++) {
        const int32_t q = 1 + (int32_t)(ath_rand_u64(rng) % c->max_len);
        const int32_t more = r ? (int32_t)(ath_rand_u64(rng) % c->max_len) : 0;
        ql[r] = q;
        kl[r] = c->context ? more : q + more;
        if (!c->causal && !c->context && r == 1) kl[r] = 1 + q / 3;
    }
}

/* Every byte 0xff (NaN): an output the plugin leaves unwritten fails. */
static int poison(ath_host *h, ath_tensor *t)
{
    void *buf = malloc(t->bytes + 1);
    if (!buf) return 1;
    memset(buf, 0xff, t->bytes);
    const int rc = ath_upload(h, t, buf);
    free(buf);
    return rc;
}

int ath_ragged_run(ath_host *h, const ath_ragged_spec *c, const double tol[3], uint64_t *rng,
                   ath_cmp *out, ath_cmp *lse, char *why, size_t cap)
{
    if (c->reqs < 1 || c->reqs > MAX_REQS || c->hq > MAX_HEADS || !c->hk || c->hq % c->hk) {
        snprintf(why, cap,
                 "a ragged case takes 1 to %d requests and up to %d query heads, a "
                 "multiple of the KV heads",
                 MAX_REQS, MAX_HEADS);
        return -1;
    }
    const ah_plugin_ops *O = h->ops;
    int32_t ql[MAX_REQS], kl[MAX_REQS], qsl[MAX_REQS + 1] = {0}, cuk[MAX_REQS + 1] = {0},
                                                       sl[MAX_REQS];
    ragged_lengths(c, rng, ql, kl);
    uint32_t max_q = 0, max_s = 0;
    for (uint32_t r = 0; r < c->reqs; r++) {
        qsl[r + 1] = qsl[r] + ql[r];
        cuk[r + 1] = cuk[r] + kl[r];
        sl[r] = kl[r] > ql[r] ? kl[r] : ql[r];
        if ((uint32_t)ql[r] > max_q) max_q = (uint32_t)ql[r];
        if ((uint32_t)sl[r] > max_s) max_s = (uint32_t)sl[r];
    }
    const int64_t T = qsl[c->reqs], Tk = cuk[c->reqs];
    ah_layer_spec sp = ath_spec(AH_ATTN_DECODER, c->hq, c->hk, c->dqk, c->dt, 16);
    sp.v_head_size = c->dv;
    sp.ragged_kv = 1;
    sp.causal = c->causal ? AH_CAUSAL_BY_TYPE : AH_CAUSAL_OFF;
    sp.sliding_window = c->window;
    sp.softcap = c->softcap;
    sp.use_sinks = (uint32_t)c->sinks;
    sp.use_alibi = (uint32_t)c->alibi;
    sp.scale = 1.0f / sqrtf((float)c->dqk);
    const int64_t sq[3] = {T, c->hq, c->dqk}, sk[3] = {Tk, c->hk, c->dqk},
                  sv[3] = {Tk, c->hk, c->dv}, so[3] = {T, c->hq, c->dv}, sl2[2] = {T, c->hq},
                  sh[1] = {c->hq}, nr1[1] = {c->reqs + 1}, nr[1] = {c->reqs};
    const size_t esz = ah_dtype_size(c->dt), nq = (size_t)T * c->hq * c->dqk,
                 nk = (size_t)Tk * c->hk * c->dqk, nv = (size_t)Tk * c->hk * c->dv,
                 no = (size_t)T * c->hq * c->dv, nl = (size_t)T * c->hq;
    void *hq = malloc(nq * esz + 1), *hk = malloc(nk * esz + 1), *hv = malloc(nv * esz + 1),
         *ho = malloc(no * esz + 1);
    float *hl = malloc(sizeof(float) * (nl + 1)), hs[MAX_HEADS], ha[MAX_HEADS];
    double *ref = malloc(sizeof(double) * (no + 1)), *rl = malloc(sizeof(double) * (nl + 1));
    ath_tensor d[10];
    memset(d, 0, sizeof d);
    ath_tensor *dq = &d[0], *dk = &d[1], *dv = &d[2], *dout = &d[3], *dlse = &d[4], *dsink = &d[5],
               *dal = &d[6], *dqsl = &d[7], *dcuk = &d[8], *dsl = &d[9];
    ah_state *st = NULL;
    int rc = -1;
    snprintf(why, cap, "out of memory");
    if (!hq || !hk || !hv || !ho || !hl || !ref || !rl) goto done;
    ath_fill_uniform(hq, nq, c->dt, 2.f, 1.f, rng);
    ath_fill_uniform(hk, nk, c->dt, 1.f, 1.f, rng);
    ath_fill_uniform(hv, nv, c->dt, 1.f, 1.f, rng);
    for (uint32_t i = 0; i < c->hq; i++) {
        hs[i] = (float)ath_rand_range(rng, -1.0, 3.0);
        ha[i] = exp2f(-8.0f * (float)(i + 1) / (float)c->hq);
    }
    snprintf(why, cap, "device memory");
    if (ath_tensor_new(h, dq, c->dt, 3, sq) || ath_tensor_new(h, dk, c->dt, 3, sk) ||
        ath_tensor_new(h, dv, c->dt, 3, sv) || ath_tensor_new(h, dout, c->dt, 3, so) ||
        ath_tensor_new(h, dlse, AH_DTYPE_FP32, 2, sl2) ||
        ath_tensor_new(h, dsink, AH_DTYPE_FP32, 1, sh) ||
        ath_tensor_new(h, dal, AH_DTYPE_FP32, 1, sh) ||
        ath_tensor_alloc(h, dqsl, ath_i32, 1, nr1) || ath_tensor_alloc(h, dcuk, ath_i32, 1, nr1) ||
        ath_tensor_alloc(h, dsl, ath_i32, 1, nr) || ath_upload(h, dq, hq) ||
        ath_upload(h, dk, hk) || ath_upload(h, dv, hv) || ath_upload(h, dsink, hs) ||
        ath_upload(h, dal, ha) || ath_upload(h, dqsl, qsl) || ath_upload(h, dcuk, cuk) ||
        ath_upload(h, dsl, sl) || poison(h, dout) || poison(h, dlse))
        goto done;
    ah_batch b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.num_reqs = c->reqs;
    b.num_tokens = (uint32_t)T;
    b.max_query_len = max_q;
    b.max_seq_len = max_s;
    b.query_start_loc = &dqsl->t;
    b.seq_lens = &dsl->t;
    b.query_start_loc_host = qsl;
    b.seq_lens_host = sl;
    b.cu_seqlens_k = &dcuk->t;
    b.cu_seqlens_k_host = cuk;
    b.num_k_tokens = (uint32_t)Tk;
    b.ragged_keys = c->context ? AH_RAGGED_KEYS_CONTEXT : AH_RAGGED_KEYS_BOTTOM_RIGHT;
    ah_limits lim = {sizeof lim, c->reqs, (uint32_t)T, 1, max_s, 1};
    ah_forward_args a = ath_forward_args(&dq->t, NULL, NULL, &dout->t, &dlse->t, h->stream);
    a.key = &dk->t;
    a.value = &dv->t;
    a.sinks = c->sinks ? &dsink->t : NULL;
    a.alibi_slopes = c->alibi ? &dal->t : NULL;
    const char *step = "state_create";
    ah_status s = O->state_create(h->ctx, &sp, &lim, &st);
    if (s == AH_OK) step = "plan", s = O->plan(st, &b, AH_PLAN_EAGER, h->stream);
    if (s == AH_OK) step = "forward", s = O->forward(st, &a);
    if (s == AH_OK) step = "synchronize", s = O->synchronize(h->ctx, h->stream);
    if (s != AH_OK) {
        snprintf(why, cap, "%s: %s", step, st ? O->state_error(st) : O->context_error(h->ctx));
        goto done;
    }
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &sp,
                        .batch = &b,
                        .q = hq,
                        .sinks = c->sinks ? hs : NULL,
                        .alibi_slopes = c->alibi ? ha : NULL,
                        .key = hk,
                        .value = hv};
    ah_error e;
    if (ah_reference_attention(&in, ref, rl, &e) != AH_OK) {
        snprintf(why, cap, "reference: %.400s", e.msg);
        goto done;
    }
    snprintf(why, cap, "download");
    if (ath_download(h, ho, dout) || ath_download(h, hl, dlse)) goto done;
    *out = ath_compare(ho, c->dt, ref, no, tol ? tol[0] : 0, tol ? tol[1] : 0);
    *lse = ath_compare(hl, AH_DTYPE_FP32, rl, nl, tol ? tol[2] : 0, 0);
    why[0] = '\0';
    rc = 0;
done:
    if (st) O->state_destroy(st);
    for (int i = 0; i < 10; i++) ath_tensor_free(h, &d[i]);
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    free(hl);
    free(ref);
    free(rl);
    return rc;
}
