/*
 * Workloads for `attnhost run` and `attnhost bench`: a bound model with KV
 * caches and per-step batches of random data, on whatever devices the
 * layers were bound to, with host mirrors so the oracle can check results.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "workload.h"

static int wl_fail(workload *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int wl_fail(workload *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t next_u64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Uniform in [-1, 1). */
static float next_f(uint64_t *s) { return (float)((next_u64(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

static int tensor_init(workload *w, ah_mirror *t, ah_device *dev, DLDataType dt, int ndim,
                       const int64_t *shape)
{
    return ah_mirror_init(t, dev, dt, ndim, shape, w->err, sizeof w->err);
}

static int to_device(workload *w, ah_mirror *t, size_t bytes)
{
    return ah_mirror_upload(t, bytes, w->err, sizeof w->err);
}

static int to_host(workload *w, ah_mirror *t, size_t bytes)
{
    return ah_mirror_download(t, bytes, w->err, sizeof w->err);
}

/* Random values of type t with random signs and mantissas, magnitudes in
 * [0.5, 1): written as bit patterns, so filling gigabytes of KV cache for a
 * benchmark stays cheap. Never zeros. */
static void fill_random(uint64_t *rng, void *host, size_t n, ah_dtype t)
{
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if ((i & 3) == 0) r = next_u64(rng);
        uint16_t bits = (uint16_t)(r >> ((i & 3) * 16));
        switch (t) {
        case AH_DTYPE_FP32: ((uint32_t *)host)[i] = ((uint32_t)(bits & 0x807f) << 16 | 0x3f000000u) ^ (uint32_t)(r & 0xffff); break;
        case AH_DTYPE_BF16: ((uint16_t *)host)[i] = (uint16_t)((bits & 0x807f) | 0x3f00); break;
        case AH_DTYPE_FP16: ((uint16_t *)host)[i] = (uint16_t)((bits & 0x83ff) | 0x3800); break;
        case AH_DTYPE_FP8_E4M3: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x87) | 0x30); break;
        case AH_DTYPE_FP8_E5M2: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x83) | 0x38); break;
        default: break;
        }
    }
}

static int layer_init(workload *w, uint32_t l, uint32_t max_tokens)
{
    wl_layer *L = &w->layers[l];
    L->dev = ah_binding_device(w->b, l, AH_PHASE_PREFILL);
    if (ah_binding_device(w->b, l, AH_PHASE_DECODE) != L->dev &&
        ah_device_kind_of(ah_binding_device(w->b, l, AH_PHASE_DECODE)) != ah_device_kind_of(L->dev))
        return wl_fail(w, "layer %u: prefill and decode are bound to different devices", l);
    const ah_layer_spec *s = &L->spec;
    ah_kv_cache_desc kd, vd;
    if (ah_binding_kv_cache_desc(w->b, l, w->limits.num_blocks, &kd, &vd) != AH_OK)
        return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    DLDataType kvt = ah_dtype_to_dl(s->kv_dtype), qt = ah_dtype_to_dl(s->q_dtype);
    DLDataType f32 = {kDLFloat, 32, 1};
    int fp8 = s->kv_dtype == AH_DTYPE_FP8_E4M3 || s->kv_dtype == AH_DTYPE_FP8_E5M2;
    L->k_scale = fp8 ? 1.0f / 64 : 1.0f;
    L->v_scale = fp8 ? 1.0f / 48 : 1.0f;
    if (tensor_init(w, &L->kcache, L->dev, kvt, kd.ndim, kd.shape)) return -1;
    size_t ncache = L->kcache.bytes / ah_dtype_size(s->kv_dtype);
    fill_random(&w->rng, L->kcache.host, ncache, s->kv_dtype);
    if (to_device(w, &L->kcache, L->kcache.bytes)) return -1;
    if (!s->use_mla) {
        if (tensor_init(w, &L->vcache, L->dev, kvt, vd.ndim, vd.shape)) return -1;
        fill_random(&w->rng, L->vcache.host, L->vcache.bytes / ah_dtype_size(s->kv_dtype),
                    s->kv_dtype);
        if (to_device(w, &L->vcache, L->vcache.bytes)) return -1;
    }
    int64_t qs[3] = {max_tokens, s->num_q_heads, s->qk_head_size};
    int64_t ks[3] = {max_tokens, s->num_kv_heads, s->qk_head_size};
    int64_t vs[3] = {max_tokens, s->num_kv_heads, s->v_head_size};
    int64_t os[3] = {max_tokens, s->num_q_heads, s->v_head_size};
    int64_t ls[2] = {max_tokens, s->num_q_heads};
    int64_t hs[1] = {s->num_q_heads};
    if (tensor_init(w, &L->q, L->dev, qt, 3, qs) || tensor_init(w, &L->k, L->dev, qt, 3, ks) ||
        tensor_init(w, &L->out, L->dev, qt, 3, os) || tensor_init(w, &L->lse, L->dev, f32, 2, ls))
        return -1;
    if (!s->use_mla && tensor_init(w, &L->v, L->dev, qt, 3, vs)) return -1;
    if (s->use_sinks) {
        if (tensor_init(w, &L->sinks, L->dev, f32, 1, hs)) return -1;
        for (uint32_t h = 0; h < s->num_q_heads; h++) ((float *)L->sinks.host)[h] = 2 * next_f(&w->rng);
        if (to_device(w, &L->sinks, L->sinks.bytes)) return -1;
    }
    if (s->use_alibi) {
        if (tensor_init(w, &L->alibi, L->dev, f32, 1, hs)) return -1;
        for (uint32_t h = 0; h < s->num_q_heads; h++)
            ((float *)L->alibi.host)[h] = exp2f(-8.0f * (float)(h + 1) / (float)s->num_q_heads);
        if (to_device(w, &L->alibi, L->alibi.bytes)) return -1;
    }
    return 0;
}

int wl_create(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
              uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->m = m;
    w->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    w->num_layers = ah_selection_num_layers(sel);
    w->num_reqs = num_reqs;
    uint32_t bs = 0;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) continue; /* nothing to run */
        uint32_t lbs = ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec.block_size;
        if (bs && lbs != bs)
            return wl_fail(w, "layer %u has block size %u, layer 0 %u: one batch serves one "
                              "block size (use a model or config with one)", l, lbs, bs);
        bs = lbs;
    }
    if (!bs) return wl_fail(w, "the model has no attention layers");
    uint32_t mb = (max_seq_len + bs - 1) / bs;
    w->limits = (ah_limits){sizeof(ah_limits), num_reqs, max_tokens, mb, max_seq_len, num_reqs * mb + 1};
    ah_binding_options bo = {sizeof bo, w->limits, 0, 0};
    ah_error err;
    if (ah_binding_create(h, sel, &bo, &w->b, &err) != AH_OK) return wl_fail(w, "%s", err.msg);
    w->layers = calloc(w->num_layers, sizeof *w->layers);
    w->context = calloc(num_reqs, sizeof *w->context);
    w->blocks = malloc((size_t)num_reqs * mb * sizeof *w->blocks);
    if (!w->layers || !w->context || !w->blocks) return wl_fail(w, "out of host memory");
    /* requests own a random permutation of the blocks: paging is exercised */
    uint32_t nb = w->limits.num_blocks;
    int32_t *perm = malloc(nb * sizeof *perm);
    if (!perm) return wl_fail(w, "out of host memory");
    for (uint32_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (uint32_t i = nb - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next_u64(&w->rng) % (i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memcpy(w->blocks, perm, (size_t)num_reqs * mb * sizeof *w->blocks);
    free(perm);

    for (uint32_t l = 0; l < w->num_layers; l++) {
        if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) continue; /* dev stays NULL */
        w->layers[l].spec = ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec;
        if (layer_init(w, l, max_tokens)) return -1;
        if (!w->meta_dev || ah_device_kind_of(w->meta_dev) == AH_DEVICE_CPU)
            w->meta_dev = w->layers[l].dev;
    }
    DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    int64_t s_qsl[1] = {num_reqs + 1}, s_req[1] = {num_reqs}, s_tab[2] = {num_reqs, mb},
            s_tok[1] = {max_tokens};
    if (tensor_init(w, &w->qsl, w->meta_dev, i32, 1, s_qsl) ||
        tensor_init(w, &w->seqlens, w->meta_dev, i32, 1, s_req) ||
        tensor_init(w, &w->table, w->meta_dev, i32, 2, s_tab) ||
        tensor_init(w, &w->slots, w->meta_dev, i64, 1, s_tok))
        return -1;
    memcpy(w->table.host, w->blocks, w->table.bytes);
    return to_device(w, &w->table, w->table.bytes);
}

void wl_destroy(workload *w)
{
    for (uint32_t l = 0; w->layers && l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        ah_mirror *all[] = {&L->kcache, &L->vcache, &L->q, &L->k, &L->v, &L->out, &L->lse,
                            &L->sinks, &L->alibi};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ah_mirror_free(all[i]);
    }
    ah_mirror_free(&w->qsl);
    ah_mirror_free(&w->seqlens);
    ah_mirror_free(&w->table);
    ah_mirror_free(&w->slots);
    free(w->layers);
    free(w->context);
    free(w->blocks);
    ah_binding_destroy(w->b);
    memset(w, 0, sizeof *w);
}

int wl_step(workload *w, const uint32_t *query_lens)
{
    int32_t *qsl = w->qsl.host, *sl = w->seqlens.host;
    int64_t *slots = w->slots.host;
    uint32_t bs = 0, mb = w->limits.max_blocks_per_req;
    for (uint32_t l = 0; l < w->num_layers && !bs; l++) bs = w->layers[l].spec.block_size; /* attention */
    uint32_t T = 0, maxq = 0, maxs = 0;
    qsl[0] = 0;
    for (uint32_t r = 0; r < w->num_reqs; r++) {
        uint32_t q = query_lens[r], s = w->context[r] + q;
        if (!q || s > w->limits.max_seq_len || T + q > w->limits.max_num_tokens)
            return wl_fail(w, "request %u: %u new tokens over %u do not fit the limits", r, q,
                           w->context[r]);
        for (uint32_t i = 0; i < q; i++) {
            uint32_t pos = w->context[r] + i;
            slots[T + i] = (int64_t)w->blocks[r * mb + pos / bs] * bs + pos % bs;
        }
        T += q;
        qsl[r + 1] = (int32_t)T;
        sl[r] = (int32_t)s;
        maxq = q > maxq ? q : maxq;
        maxs = s > maxs ? s : maxs;
    }
    w->qsl.shape[0] = w->num_reqs + 1;
    w->slots.shape[0] = T;
    if (to_device(w, &w->qsl, w->qsl.bytes) || to_device(w, &w->seqlens, w->seqlens.bytes) ||
        to_device(w, &w->slots, T * sizeof(int64_t)))
        return -1;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        if (!L->dev) continue; /* not attention */
        const ah_layer_spec *s = &L->spec;
        ah_mirror *fresh[] = {&L->q, &L->k, &L->v};
        for (int i = 0; i < 3; i++) {
            if (!fresh[i]->host || !fresh[i]->t.data) continue;
            size_t per_tok = (size_t)fresh[i]->shape[1] * fresh[i]->shape[2];
            fill_random(&w->rng, fresh[i]->host, T * per_tok, s->q_dtype);
            fresh[i]->t.shape[0] = T;
            if (to_device(w, fresh[i], T * per_tok * ah_dtype_size(s->q_dtype))) return -1;
        }
        L->out.shape[0] = T;
        L->lse.shape[0] = T;
    }
    w->batch = (ah_batch){
        .struct_size = sizeof(ah_batch), .num_reqs = w->num_reqs, .num_tokens = T,
        .max_query_len = maxq, .max_seq_len = maxs, .num_blocks = w->limits.num_blocks,
        .query_start_loc = &w->qsl.t, .seq_lens = &w->seqlens.t, .block_table = &w->table.t,
        .slot_mapping = &w->slots.t, .query_start_loc_host = qsl, .seq_lens_host = sl,
        .block_table_host = w->blocks, .slot_mapping_host = slots, .block_table_stride = mb};
    if (ah_binding_plan(w->b, &w->batch, AH_PLAN_EAGER, ah_device_stream(w->meta_dev)) != AH_OK)
        return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    return 0;
}

int wl_forward_all(workload *w, int store_kv) { return wl_enqueue_all(w, store_kv) || wl_sync(w); }

int wl_enqueue_all(workload *w, int store_kv)
{
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        if (!L->dev) continue; /* not attention */
        ah_forward_args a = {
            .struct_size = sizeof a, .q = &L->q.t, .key = store_kv ? &L->k.t : NULL,
            .value = store_kv && !L->spec.use_mla ? &L->v.t : NULL, .key_cache = &L->kcache.t,
            .value_cache = L->spec.use_mla ? NULL : &L->vcache.t, .out = &L->out.t, .lse = NULL,
            .sinks = L->spec.use_sinks ? &L->sinks.t : NULL,
            .alibi_slopes = L->spec.use_alibi ? &L->alibi.t : NULL, .k_scale = L->k_scale,
            .v_scale = L->v_scale, .stream = ah_device_stream(L->dev)};
        if (ah_binding_forward(w->b, l, &a) != AH_OK) return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    }
    return 0;
}

int wl_sync(workload *w)
{
    for (uint32_t l = 0; l < w->num_layers; l++)
        if (w->layers[l].dev && ah_device_sync(w->layers[l].dev) != AH_OK)
            return wl_fail(w, "layer %u: %s", l, ah_device_errmsg(w->layers[l].dev));
    return 0;
}

void wl_advance(workload *w)
{
    const int32_t *qsl = w->qsl.host;
    for (uint32_t r = 0; r < w->num_reqs; r++) w->context[r] += (uint32_t)(qsl[r + 1] - qsl[r]);
}

double wl_tolerance(const ah_layer_spec *s)
{
    double t = s->q_dtype == AH_DTYPE_FP32 ? 1e-4 : s->q_dtype == AH_DTYPE_FP16 ? 5e-3 : 2e-2;
    if (s->kv_dtype == AH_DTYPE_FP8_E4M3 || s->kv_dtype == AH_DTYPE_FP8_E5M2) t = t < 2e-2 ? 2e-2 : t;
    return t;
}

int wl_check(workload *w, double *max_err, int *ok)
{
    *max_err = 0;
    *ok = 1;
    uint32_t T = w->batch.num_tokens;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        if (!L->dev) continue; /* not attention */
        const ah_layer_spec *s = &L->spec;
        ah_error err;
        if (ah_reference_write_kv(s, &w->batch, L->k.host, s->use_mla ? NULL : L->v.host,
                                  L->kcache.host, s->use_mla ? NULL : L->vcache.host, L->k_scale,
                                  L->v_scale, &err) != AH_OK)
            return wl_fail(w, "layer %u: reference KV write: %s", l, err.msg);
        size_t n = (size_t)T * s->num_q_heads * s->v_head_size;
        if (to_host(w, &L->out, n * ah_dtype_size(s->q_dtype))) return -1;
        double *ref = malloc(n * sizeof *ref);
        if (!ref) return wl_fail(w, "out of host memory");
        ah_ref_inputs in = {sizeof in, s, &w->batch, L->q.host, L->kcache.host,
                            s->use_mla ? NULL : L->vcache.host,
                            s->use_sinks ? L->sinks.host : NULL,
                            s->use_alibi ? L->alibi.host : NULL, L->k_scale, L->v_scale, NULL, NULL};
        if (ah_reference_attention(&in, ref, NULL, &err) != AH_OK) {
            free(ref);
            return wl_fail(w, "layer %u: reference: %s", l, err.msg);
        }
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            double got = ah_load_f32(L->out.host, i, s->q_dtype), d = got - ref[i];
            num += d * d;
            den += ref[i] * ref[i];
        }
        free(ref);
        double rel = sqrt(num / (den > 0 ? den : 1));
        if (rel != rel) rel = INFINITY; /* NaN never passes */
        if (rel > *max_err) *max_err = rel;
        if (!(rel <= wl_tolerance(s))) *ok = 0;
    }
    return 0;
}
