/*
 * Workloads for `attnhost run` and `attnhost bench`: a bound model with KV
 * caches and per-step batches of random data, on whatever devices the
 * layers were bound to, with host mirrors so the oracle can check results
 * (workload_oracle.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <attnhost/plugin_util.h>
#include <attnhost/reference.h>

#include "workload_int.h"

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

void wl_fill_random(uint64_t *rng, void *host, size_t n, ah_dtype t)
{
    const size_t period = (size_t)1 << 24, esize = ah_dtype_size(t);
    if (n > period) { /* the first 16M values, then copies of them */
        wl_fill_random(rng, host, period, t);
        for (size_t done = period; done < n;) {
            size_t m = done < n - done ? done : n - done;
            memcpy((char *)host + done * esize, host, m * esize);
            done += m;
        }
        return;
    }
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if ((i & 3) == 0) r = next_u64(rng);
        uint16_t bits = (uint16_t)(r >> ((i & 3) * 16));
        switch (t) {
        case AH_DTYPE_FP32:
            ((uint32_t *)host)[i] =
                ((uint32_t)(bits & 0x807f) << 16 | 0x3f000000u) ^ (uint32_t)(r & 0xffff);
            break;
        case AH_DTYPE_BF16: ((uint16_t *)host)[i] = (uint16_t)((bits & 0x807f) | 0x3f00); break;
        case AH_DTYPE_FP16: ((uint16_t *)host)[i] = (uint16_t)((bits & 0x83ff) | 0x3800); break;
        case AH_DTYPE_FP8_E4M3: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x87) | 0x30); break;
        case AH_DTYPE_FP8_E5M2: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x83) | 0x38); break;
        /* the same bits: values of a quarter to a half (never 0x80, fnuz's NaN) */
        case AH_DTYPE_FP8_E4M3_FNUZ: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x87) | 0x30); break;
        case AH_DTYPE_FP8_E5M2_FNUZ: ((uint8_t *)host)[i] = (uint8_t)((bits & 0x83) | 0x38); break;
        default: break;
        }
    }
}

int wl_fill_device(ah_device *dev, void *p, size_t bytes, ah_dtype t, uint64_t *rng, char *err,
                   size_t cap)
{
    const size_t chunk = bytes < ((size_t)8 << 20) ? bytes : (size_t)8 << 20;
    void *host = malloc(chunk ? chunk : 1);
    if (!host) {
        snprintf(err, cap, "out of host memory");
        return -1;
    }
    wl_fill_random(rng, host, chunk / ah_dtype_size(t), t);
    ah_status st = ah_device_copy(dev, p, host, chunk, AH_COPY_HOST_TO_DEVICE);
    free(host);
    for (size_t done = chunk; st == AH_OK && done < bytes; done *= 2)
        st = ah_device_copy(dev, (char *)p + done, p, done < bytes - done ? done : bytes - done,
                            AH_COPY_DEVICE_TO_DEVICE);
    if (st == AH_OK) st = ah_device_sync(dev);
    if (st == AH_OK) return 0;
    snprintf(err, cap, "filling on the device: %s", ah_device_errmsg(dev));
    return -1;
}

int wl_role(const ah_selection *sel, uint32_t l)
{
    if (ah_selection_layer_kind(sel, l) != AH_LAYER_ATTENTION) return WL_NONE;
    const ah_layer_spec *s = &ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec;
    return ah_spec_cacheless(s)                      ? WL_CACHELESS
           : s->attn_type == AH_ATTN_ENCODER_DECODER ? WL_CROSS
                                                     : WL_SELF;
}

uint32_t wl_ragged_forms(const ah_selection *sel, const uint8_t *keep, int64_t *unbound, char *why,
                         size_t cap)
{
    uint32_t n = 0;
    *unbound = -1;
    for (uint32_t l = 0; l < ah_selection_num_layers(sel); l++) {
        const ah_decision *d = ah_selection_ragged_decision(sel, l);
        if (wl_role(sel, l) != WL_SELF || !d || (keep && !keep[l])) continue;
        n++;
        if (*unbound >= 0 || ah_selection_ragged_bound(sel, l)) continue;
        *unbound = l;
        const ah_candidate *c = d->n_candidates ? &d->candidates[0] : NULL;
        if (d->plugin)
            snprintf(why, cap, "its backend %s is not on the device of the layer's prefill winner",
                     d->plugin);
        else if (c && c->n_reasons)
            snprintf(why, cap, "no backend serves it (%s: %s = %s, supported: %s)", c->plugin,
                     c->reasons[0].field, c->reasons[0].value, c->reasons[0].supported);
        else snprintf(why, cap, "no backend serves it");
    }
    return n;
}

/* 1 when layer l of sel runs its ragged prefill form in a ragged workload. */
static int runs_ragged(const ah_selection *sel, uint32_t l)
{
    return wl_role(sel, l) == WL_SELF && ah_selection_ragged_bound(sel, l);
}

/* Per-token element counts of a layer's activations: q, k, v, out, lse. */
static void act_elems(const ah_layer_spec *s, size_t e[5])
{
    e[0] = (size_t)s->num_q_heads * s->qk_head_size;
    e[1] = (size_t)s->num_kv_heads * s->qk_head_size;
    e[2] = s->use_mla ? 0 : (size_t)s->num_kv_heads * s->v_head_size;
    e[3] = (size_t)s->num_q_heads * s->v_head_size;
    e[4] = s->num_q_heads;
}

static uint64_t cache_bytes(const ah_layer_spec *s, uint32_t num_blocks)
{
    uint64_t d = s->qk_head_size + (s->use_mla ? 0 : s->v_head_size);
    return (uint64_t)num_blocks * s->block_size * s->num_kv_heads * d * ah_dtype_size(s->kv_dtype);
}

/* The KV-cache groups of a selection's cache layers: *n gets their count
 * (1 when there is none), bs[g] group g's block size (0: no cache layer),
 * window[g] its smallest sliding window (0: a layer without one). -1, with
 * msg, when a group's layers resolved to different block sizes. */
static int group_shapes(const ah_selection *sel, uint32_t *n, uint32_t bs[AH_MAX_KV_GROUPS],
                        uint32_t window[AH_MAX_KV_GROUPS], char *msg, size_t cap)
{
    uint32_t first[AH_MAX_KV_GROUPS];
    *n = 1;
    for (uint32_t g = 0; g < AH_MAX_KV_GROUPS; g++) bs[g] = window[g] = 0;
    for (uint32_t l = 0; l < ah_selection_num_layers(sel); l++) {
        int role = wl_role(sel, l);
        if (role != WL_SELF && role != WL_CROSS) continue;
        const ah_layer_spec *s = &ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec;
        uint32_t g = ah_spec_kv_group(s) < AH_MAX_KV_GROUPS ? ah_spec_kv_group(s) : 0;
        uint32_t w = role == WL_SELF ? s->sliding_window : 0;
        if (g + 1 > *n) *n = g + 1;
        if (!bs[g]) {
            bs[g] = s->block_size;
            window[g] = w;
            first[g] = l;
        } else if (bs[g] != s->block_size) {
            snprintf(msg, cap,
                     "layers %u and %u of kv_group %u resolved to block sizes %u and %u: a "
                     "group's layers share one block table (set block_size in the model)",
                     first[g], l, g, bs[g], s->block_size);
            return -1;
        } else if (!w || w < window[g]) {
            window[g] = window[g] && w ? w : 0;
        }
    }
    return 0;
}

/* Blocks in the cache: each request's own, one spare. */
static uint32_t blocks_needed(uint32_t bs, uint32_t num_reqs, uint32_t max_seq_len,
                              const uint32_t *req_max)
{
    if (!bs) return 1;
    uint64_t nb = 1;
    for (uint32_t r = 0; r < num_reqs; r++) {
        uint32_t s = req_max && req_max[r] < max_seq_len ? req_max[r] : max_seq_len;
        nb += (s + bs - 1) / bs;
    }
    return nb > UINT32_MAX ? UINT32_MAX : (uint32_t)nb;
}

/* Key rows a step may carry: every request's capacity. */
static uint64_t key_rows(uint32_t num_reqs, uint32_t max_seq_len, const uint32_t *req_max)
{
    uint64_t n = 0;
    for (uint32_t r = 0; r < num_reqs; r++)
        n += req_max && req_max[r] < max_seq_len ? req_max[r] : max_seq_len;
    return n;
}

void wl_estimate(ah_host *h, const ah_selection *sel, uint32_t num_reqs, uint32_t max_seq_len,
                 uint32_t max_tokens, const uint32_t *req_max, int ragged, wl_mem *out)
{
    memset(out, 0, sizeof *out);
    uint32_t G, bs[AH_MAX_KV_GROUPS], win[AH_MAX_KV_GROUPS];
    char msg[256];
    group_shapes(sel, &G, bs, win, msg, sizeof msg); /* a fault: wl_create says it */
    uint64_t tables = 0;
    for (uint32_t g = 0; g < G; g++)
        tables += (uint64_t)num_reqs * (bs[g] ? (max_seq_len + bs[g] - 1) / bs[g] : 1) * 4 * 2 +
                  (uint64_t)max_tokens * 8;
    /* the shared activations: the largest per-token size of each, per device kind */
    uint64_t act[AH_DEVICE_KIND_COUNT][5] = {{0}};
    int used[AH_DEVICE_KIND_COUNT] = {0};
    uint64_t ref = 0;
    for (uint32_t l = 0; l < ah_selection_num_layers(sel); l++) {
        int role = wl_role(sel, l);
        if (role == WL_NONE) continue;
        const ah_decision *d = ah_selection_decision(sel, l, AH_PHASE_PREFILL);
        const ah_plugin_info *pi = d->plugin ? ah_host_find_plugin(h, d->plugin) : NULL;
        ah_device_kind kind = pi ? pi->device_kind : AH_DEVICE_CPU;
        const ah_layer_spec *s = &d->spec;
        /* a host mirror always; the device side is host memory on a CPU plugin */
        int sides = kind == AH_DEVICE_CPU ? 2 : 1;
        if (role != WL_CACHELESS) {
            uint32_t g = ah_spec_kv_group(s) < G ? ah_spec_kv_group(s) : 0;
            out->kv += sides * cache_bytes(s, blocks_needed(bs[g], num_reqs, max_seq_len, req_max));
        }
        size_t e[5];
        act_elems(s, e);
        for (int i = 0; i < 5; i++) {
            uint64_t b = (uint64_t)e[i] * (i == 4 ? 4 : ah_dtype_size(s->q_dtype));
            if (b > act[kind][i]) act[kind][i] = b;
        }
        used[kind] = sides;
        uint64_t r = (uint64_t)e[3] * 8;
        if (r > ref) ref = r;
        if (ragged && runs_ragged(sel, l)) {
            /* q, three outputs and LSEs per query token; a pass's keys and
             * values, and the whole step's on the host, per key row */
            const ah_layer_spec *rs = &ah_selection_ragged_decision(sel, l)->spec;
            act_elems(rs, e);
            const uint64_t es = ah_dtype_size(rs->q_dtype);
            const uint64_t per_tok = (e[0] + 3 * e[3]) * es + 3 * e[4] * 4,
                           per_key = (e[1] + e[2]) * es;
            const uint64_t b = sides * (per_tok * max_tokens +
                                        per_key * key_rows(num_reqs, max_seq_len, req_max)) +
                               per_key * key_rows(num_reqs, max_seq_len, req_max);
            if (b > out->act) out->act = b;
            if ((uint64_t)e[3] * 8 > ref) ref = (uint64_t)e[3] * 8;
        }
    }
    /* the paged forms' shared buffers (beside the largest ragged form's) */
    for (int k = 0; k < AH_DEVICE_KIND_COUNT; k++)
        for (int i = 0; i < 5; i++) out->act += (uint64_t)used[k] * act[k][i] * max_tokens;
    /* the oracle: one layer's output in double, its score rows */
    out->oracle = ref * max_tokens + 8ull * 16 * (max_seq_len + max_tokens);
    /* block table, slots, per-request state */
    out->other =
        2ull * (tables + num_reqs * 16) + (uint64_t)ah_selection_num_layers(sel) * sizeof(wl_layer);
}

/* The device's shared activation buffers, made or grown to hold every
 * layer of the workload on it (sized in wl_create before any view). */
static wl_arena *arena_of(workload *w, ah_device *dev)
{
    for (uint32_t i = 0; i < w->n_arenas; i++)
        if (w->arenas[i].dev == dev) return &w->arenas[i];
    if (w->n_arenas == WL_MAX_DEVS) return NULL;
    wl_arena *a = &w->arenas[w->n_arenas++];
    a->dev = dev;
    return a;
}

/* A view of an arena buffer with this layer's shape. */
static void view(ah_mirror *v, const ah_mirror *arena, DLDataType dt, int ndim,
                 const int64_t *shape)
{
    *v = *arena;
    v->view = 1; /* the arena frees the buffer */
    v->t.dtype = dt;
    v->t.ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->t.shape = v->shape;
    v->t.strides = NULL;
    v->t.byte_offset = 0;
}

/* Scales in tensors (kv_scales tensor or per_head): K and V [1] or [Hk],
 * head h's 1 + h / 4 times the per-tensor scale, and the query's [1]. */
static int scales_init(workload *w, wl_layer *L)
{
    const ah_layer_spec *s = &L->spec;
    const ah_kv_scales form = ah_spec_kv_scales(s);
    L->q_scale = ah_spec_q_scale(s) ? 1.0f / 32 : 0; /* queries up to 14 in e4m3 */
    if (form == AH_KV_SCALES_HOST) return 0;
    const DLDataType f32 = {kDLFloat, 32, 1};
    const int64_t n = form == AH_KV_SCALES_PER_HEAD ? s->num_kv_heads : 1, one = 1;
    if (tensor_init(w, &L->ksc, L->dev, f32, 1, &n) ||
        tensor_init(w, &L->vsc, L->dev, f32, 1, &n) ||
        tensor_init(w, &L->qsc, L->dev, f32, 1, &one))
        return -1;
    for (int64_t h = 0; h < n; h++) {
        ((float *)L->ksc.host)[h] = L->k_scale * (1 + (float)h / 4);
        ((float *)L->vsc.host)[h] = L->v_scale * (1 + (float)h / 4);
    }
    *(float *)L->qsc.host = L->q_scale;
    return to_device(w, &L->ksc, L->ksc.bytes) || to_device(w, &L->vsc, L->vsc.bytes) ||
                   to_device(w, &L->qsc, L->qsc.bytes)
               ? -1
               : 0;
}

/* The layer's new K/V into its cache, with its scales in the form the
 * layer takes them. */
static ah_kv_write_args kv_write_args(const workload *w, const wl_layer *L)
{
    const int mla = L->spec.use_mla;
    ah_kv_write_args a = {.struct_size = sizeof a,
                          .key = &L->k.t,
                          .value = mla ? NULL : &L->v.t,
                          .key_cache = &L->kcache.t,
                          .value_cache = mla ? NULL : &L->vcache.t,
                          .stream = w->stream};
    if (ah_spec_kv_scales(&L->spec) == AH_KV_SCALES_HOST) {
        a.k_scale = L->k_scale;
        a.v_scale = L->v_scale;
    } else {
        a.k_scale_tensor = &L->ksc.t;
        a.v_scale_tensor = mla ? NULL : &L->vsc.t;
    }
    return a;
}

static int layer_init(workload *w, uint32_t l, uint32_t max_tokens)
{
    wl_layer *L = &w->layers[l];
    L->dev = ah_binding_device(w->b, l, AH_PHASE_PREFILL);
    if (ah_binding_device(w->b, l, AH_PHASE_DECODE) != L->dev &&
        ah_device_kind_of(ah_binding_device(w->b, l, AH_PHASE_DECODE)) != ah_device_kind_of(L->dev))
        return wl_fail(w, "layer %u: prefill and decode are bound to different devices", l);
    const ah_layer_spec *s = &L->spec;
    DLDataType f32 = {kDLFloat, 32, 1};
    int fp8 = ah_dtype_is_fp8(s->kv_dtype);
    L->k_scale = fp8 ? 1.0f / 64 : 1.0f;
    L->v_scale = fp8 ? 1.0f / 48 : 1.0f;
    if (scales_init(w, L)) return -1;
    if (L->role != WL_CACHELESS) {
        ah_kv_cache_desc kd = {.struct_size = sizeof kd}, vd = {.struct_size = sizeof vd};
        const wl_group *G = &w->groups[ah_spec_kv_group(s) < w->n_groups ? ah_spec_kv_group(s) : 0];
        if (ah_binding_kv_cache_desc(w->b, l, G->num_blocks, &kd, &vd) != AH_OK)
            return wl_fail(w, "%s", ah_binding_errmsg(w->b));
        if (ah_mirror_kv_init(&L->kcache, &L->vcache, L->dev, &kd, &vd, !w->timing, w->err,
                              sizeof w->err))
            return -1;
        /* every element of what each owns, so an interleaved layout's
         * values (in the key's allocation) are random too */
        ah_mirror *own[2] = {&L->kcache, &L->vcache};
        for (int i = 0; i < 2; i++) {
            if (!own[i]->bytes) continue; /* a view, or MLA's value */
            if (w->timing) {
                if (wl_fill_device(L->dev, own[i]->t.data, own[i]->bytes, s->kv_dtype, &w->rng,
                                   w->err, sizeof w->err))
                    return -1;
                continue;
            }
            wl_fill_random(&w->rng, own[i]->host, own[i]->bytes / ah_dtype_size(s->kv_dtype),
                           s->kv_dtype);
            if (to_device(w, own[i], own[i]->bytes)) return -1;
        }
    }
    int64_t hs[1] = {s->num_q_heads};
    if (s->use_sinks) {
        if (tensor_init(w, &L->sinks, L->dev, f32, 1, hs)) return -1;
        for (uint32_t h = 0; h < s->num_q_heads; h++)
            ((float *)L->sinks.host)[h] = 2 * next_f(&w->rng);
        if (to_device(w, &L->sinks, L->sinks.bytes)) return -1;
    }
    if (s->use_sinks && L->ragged) {
        if (tensor_init(w, &L->nosinks, L->dev, f32, 1, hs)) return -1;
        for (uint32_t h = 0; h < s->num_q_heads; h++) ((float *)L->nosinks.host)[h] = -INFINITY;
        if (to_device(w, &L->nosinks, L->nosinks.bytes)) return -1;
    }
    if (s->use_alibi) {
        if (tensor_init(w, &L->alibi, L->dev, f32, 1, hs)) return -1;
        for (uint32_t h = 0; h < s->num_q_heads; h++)
            ((float *)L->alibi.host)[h] = exp2f(-8.0f * (float)(h + 1) / (float)s->num_q_heads);
        if (to_device(w, &L->alibi, L->alibi.bytes)) return -1;
    }
    (void)max_tokens;
    return 0;
}

/* The views of layer l into its device's buffers. */
static void layer_views(workload *w, uint32_t l, uint32_t max_tokens)
{
    wl_layer *L = &w->layers[l];
    const ah_layer_spec *s = &L->spec;
    wl_arena *a = arena_of(w, L->dev);
    DLDataType qt = ah_dtype_to_dl(s->q_dtype), f32 = {kDLFloat, 32, 1};
    int64_t qs[3] = {max_tokens, s->num_q_heads, s->qk_head_size};
    int64_t ks[3] = {max_tokens, s->num_kv_heads, s->qk_head_size};
    int64_t vs[3] = {max_tokens, s->num_kv_heads, s->v_head_size};
    int64_t os[3] = {max_tokens, s->num_q_heads, s->v_head_size};
    int64_t ls[2] = {max_tokens, s->num_q_heads};
    view(&L->q, &a->m[0], qt, 3, qs);
    view(&L->k, &a->m[1], qt, 3, ks);
    if (!s->use_mla) view(&L->v, &a->m[2], qt, 3, vs);
    view(&L->out, &a->m[3], qt, 3, os);
    view(&L->lse, &a->m[4], f32, 2, ls);
    if (!L->ragged) return;
    const ah_layer_spec *r = &L->rspec;
    int64_t rqs[3] = {max_tokens, r->num_q_heads, r->qk_head_size};
    int64_t rks[3] = {w->max_keys, r->num_kv_heads, r->qk_head_size};
    int64_t rvs[3] = {w->max_keys, r->num_kv_heads, r->v_head_size};
    int64_t ros[3] = {max_tokens, r->num_q_heads, r->v_head_size};
    view(&L->rq, &a->m[WL_RQ], qt, 3, rqs);
    view(&L->rk, &a->m[WL_RK], qt, 3, rks);
    view(&L->rv, &a->m[WL_RV], qt, 3, rvs);
    for (int i = 0; i < 3; i++) {
        view(&L->rout[i], &a->m[WL_ROUT + i], qt, 3, ros);
        view(&L->rlse[i], &a->m[WL_RLSE + i], f32, 2, ls);
    }
}

/* Request r owns the blocks of group G that its longest sequence needs,
 * a random permutation of the group's cache (paging is exercised); the
 * rest of its row repeats its first block (never read). */
static int group_blocks(workload *w, wl_group *G)
{
    G->blocks = calloc((size_t)w->num_reqs * G->row, sizeof *G->blocks);
    int32_t *perm = malloc(G->num_blocks * sizeof *perm);
    if (!G->blocks || !perm) {
        free(perm);
        return wl_fail(w, "out of host memory");
    }
    uint32_t nb = G->num_blocks;
    for (uint32_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
    for (uint32_t i = nb - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next_u64(&w->rng) % (i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint32_t r = 0, next = 0; G->block_size && r < w->num_reqs; r++) {
        uint32_t own = (w->req_cap[r] + G->block_size - 1) / G->block_size;
        for (uint32_t k = 0; k < G->row; k++)
            G->blocks[(size_t)r * G->row + k] = k < own ? perm[next + k] : perm[next];
        next += own;
    }
    free(perm);
    return 0;
}

int wl_create(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
              uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens, uint64_t seed)
{
    return wl_create_sized(w, h, m, sel, num_reqs, max_seq_len, max_tokens, NULL, 0,
                           AH_MIXED_STEPS_CONFIG, seed);
}

int wl_create_sized(workload *w, ah_host *h, const ah_model *m, const ah_selection *sel,
                    uint32_t num_reqs, uint32_t max_seq_len, uint32_t max_tokens,
                    const uint32_t *req_max, unsigned flags, ah_mixed_steps mixed, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    const int ragged = (flags & WL_RAGGED) != 0;
    w->timing = (flags & WL_TIMING) != 0;
    w->m = m;
    w->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    w->rplanned = WL_NO_PASS;
    w->num_layers = ah_selection_num_layers(sel);
    w->num_reqs = num_reqs;
    uint32_t n_attn = 0;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        int role = wl_role(sel, l);
        if (role == WL_NONE) continue; /* nothing to run */
        n_attn++;
        if (role == WL_CROSS) w->has_cross = 1;
        if (role != WL_CACHELESS) w->has_cache = 1;
    }
    if (!n_attn) return wl_fail(w, "the model has no attention layers");
    uint32_t bs[AH_MAX_KV_GROUPS], win[AH_MAX_KV_GROUPS];
    if (group_shapes(sel, &w->n_groups, bs, win, w->err, sizeof w->err)) return -1;
    w->groups = calloc(w->n_groups, sizeof *w->groups);
    w->kvg = calloc(w->n_groups, sizeof *w->kvg);
    if (!w->groups || !w->kvg) return wl_fail(w, "out of host memory");
    /* limits bound every group: the longest row, the largest cache */
    uint32_t mb = 1, nb = 1;
    for (uint32_t g = 0; g < w->n_groups; g++) {
        wl_group *G = &w->groups[g];
        G->block_size = bs[g];
        G->window = win[g];
        G->release = win[g] > 0;
        G->row = bs[g] ? (max_seq_len + bs[g] - 1) / bs[g] : 1;
        G->num_blocks = blocks_needed(bs[g], num_reqs, max_seq_len, req_max);
        mb = G->row > mb ? G->row : mb;
        nb = G->num_blocks > nb ? G->num_blocks : nb;
    }
    /* a group releases blocks only where every plugin of its layers skips
     * them (AH_FEAT_RELEASED_BLOCKS), as an engine would decide */
    for (uint32_t l = 0; l < w->num_layers; l++) {
        if (wl_role(sel, l) != WL_SELF) continue;
        for (int ph = 0; ph < AH_PHASE_COUNT; ph++) {
            const ah_decision *d = ah_selection_decision(sel, l, (ah_phase)ph);
            const ah_plugin_info *pi = d->plugin ? ah_host_find_plugin(h, d->plugin) : NULL;
            uint32_t g = ah_spec_kv_group(&d->spec);
            if (g < w->n_groups &&
                (!pi || !pi->caps || !(pi->caps->features & AH_FEAT_RELEASED_BLOCKS)))
                w->groups[g].release = 0;
        }
    }
    w->limits = (ah_limits){sizeof(ah_limits), num_reqs, max_tokens, mb, max_seq_len, nb};
    ah_binding_options bo = {sizeof bo, w->limits, 0, 0, NULL, mixed};
    ah_error err;
    if (ah_binding_create(h, sel, &bo, &w->b, &err) != AH_OK) return wl_fail(w, "%s", err.msg);
    w->layers = calloc(w->num_layers, sizeof *w->layers);
    w->context = calloc(num_reqs, sizeof *w->context);
    w->enc_lens = calloc(num_reqs, sizeof *w->enc_lens);
    w->req_cap = calloc(num_reqs, sizeof *w->req_cap);
    if (!w->layers || !w->context || !w->enc_lens || !w->req_cap)
        return wl_fail(w, "out of host memory");
    for (uint32_t r = 0; r < num_reqs; r++)
        w->req_cap[r] = req_max && req_max[r] < max_seq_len ? req_max[r] : max_seq_len;
    for (uint32_t g = 0; g < w->n_groups; g++)
        if (group_blocks(w, &w->groups[g])) return -1;
    w->max_keys = (uint32_t)key_rows(num_reqs, max_seq_len, req_max);

    /* per device, the largest activation of each kind over its layers (per
     * token, per key row for the ragged keys and values) */
    size_t need[WL_MAX_DEVS][WL_BUFS] = {{0}};
    size_t ref = 0, rkey = 0, rval = 0;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        L->role = wl_role(sel, l);
        if (L->role == WL_NONE) continue; /* dev stays NULL */
        L->spec = ah_selection_decision(sel, l, AH_PHASE_PREFILL)->spec;
        L->ragged = ragged && runs_ragged(sel, l);
        if (L->ragged) L->rspec = ah_selection_ragged_decision(sel, l)->spec;
        if (layer_init(w, l, max_tokens)) return -1;
        if (!w->meta_dev || ah_device_kind_of(w->meta_dev) == AH_DEVICE_CPU) w->meta_dev = L->dev;
        wl_arena *a = arena_of(w, L->dev);
        if (!a) return wl_fail(w, "more than %d devices", WL_MAX_DEVS);
        size_t e[5];
        act_elems(&L->spec, e);
        size_t *n = need[a - w->arenas];
        for (int i = 0; i < 5; i++) {
            size_t b = e[i] * (i == 4 ? 4 : ah_dtype_size(L->spec.q_dtype));
            if (b > n[i]) n[i] = b;
        }
        if (e[3] > ref) ref = e[3];
        if (!L->ragged) continue;
        act_elems(&L->rspec, e);
        const size_t es = ah_dtype_size(L->rspec.q_dtype);
        const size_t rb[WL_BUFS - WL_RQ] = {e[0] * es, e[1] * es, e[2] * es, e[3] * es, e[3] * es,
                                            e[3] * es, e[4] * 4,  e[4] * 4,  e[4] * 4};
        for (int i = 0; i < WL_BUFS - WL_RQ; i++)
            if (rb[i] > n[WL_RQ + i]) n[WL_RQ + i] = rb[i];
        if (e[3] > ref) ref = e[3];
        if (e[1] * es > rkey) rkey = e[1] * es;
        if (e[2] * es > rval) rval = e[2] * es;
    }
    w->stream = w->meta_dev ? ah_device_stream(w->meta_dev) : NULL;
    DLDataType u8 = {kDLUInt, 8, 1};
    for (uint32_t d = 0; d < w->n_arenas; d++)
        for (int i = 0; i < WL_BUFS; i++) {
            /* the ragged keys and values have key rows, the rest token rows */
            const size_t rows = i == WL_RK || i == WL_RV ? w->max_keys : max_tokens;
            int64_t n[1] = {(int64_t)(need[d][i] * rows)};
            if (tensor_init(w, &w->arenas[d].m[i], w->arenas[d].dev, u8, 1, n)) return -1;
        }
    if (rkey) { /* the step's ragged K/V, each request's context then new rows */
        w->krow0 = calloc(num_reqs + 1, sizeof *w->krow0);
        w->rkf = malloc(rkey * w->max_keys);
        w->rvf = malloc((rval ? rval : 1) * w->max_keys);
        DLDataType i32 = {kDLInt, 32, 1};
        int64_t s_cuk[1] = {num_reqs + 1};
        if (!w->krow0 || !w->rkf || !w->rvf) return wl_fail(w, "out of host memory");
        if (tensor_init(w, &w->cuk, w->meta_dev, i32, 1, s_cuk)) return -1;
    }
    for (uint32_t l = 0; l < w->num_layers; l++)
        if (w->layers[l].dev) layer_views(w, l, max_tokens);
    w->ref_cap = w->timing ? 0 : ref * max_tokens; /* the oracle's output */
    w->ref = malloc((w->ref_cap ? w->ref_cap : 1) * sizeof *w->ref);
    if (!w->ref) return wl_fail(w, "out of host memory");
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    w->threads = nc < 1 ? 1 : nc > 16 ? 16 : (uint32_t)nc;

    DLDataType i32 = {kDLInt, 32, 1}, i64 = {kDLInt, 64, 1};
    int64_t s_qsl[1] = {num_reqs + 1}, s_req[1] = {num_reqs}, s_tok[1] = {max_tokens};
    if (tensor_init(w, &w->qsl, w->meta_dev, i32, 1, s_qsl) ||
        tensor_init(w, &w->seqlens, w->meta_dev, i32, 1, s_req) ||
        tensor_init(w, &w->encl, w->meta_dev, i32, 1, s_req))
        return -1;
    for (uint32_t g = 0; g < w->n_groups; g++) {
        wl_group *G = &w->groups[g];
        int64_t s_tab[2] = {num_reqs, G->row};
        if (tensor_init(w, &G->table, w->meta_dev, i32, 2, s_tab) ||
            tensor_init(w, &G->slots, w->meta_dev, i64, 1, s_tok))
            return -1;
        memcpy(G->table.host, G->blocks, G->table.bytes);
        if (to_device(w, &G->table, G->table.bytes)) return -1;
    }
    return 0;
}

void wl_destroy(workload *w)
{
    for (uint32_t l = 0; w->layers && l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l]; /* q .. lse are views: the arenas own them */
        ah_mirror *all[] = {&L->kcache, &L->vcache, &L->sinks, &L->alibi,
                            &L->ksc,    &L->vsc,    &L->qsc,   &L->nosinks};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ah_mirror_free(all[i]);
    }
    for (uint32_t d = 0; d < w->n_arenas; d++)
        for (int i = 0; i < WL_BUFS; i++) ah_mirror_free(&w->arenas[d].m[i]);
    ah_mirror_free(&w->qsl);
    ah_mirror_free(&w->seqlens);
    ah_mirror_free(&w->encl);
    ah_mirror_free(&w->cuk);
    free(w->krow0);
    free(w->rkf);
    free(w->rvf);
    for (uint32_t g = 0; w->groups && g < w->n_groups; g++) {
        ah_mirror_free(&w->groups[g].table);
        ah_mirror_free(&w->groups[g].slots);
        free(w->groups[g].blocks);
    }
    free(w->groups);
    free(w->kvg);
    free(w->layers);
    free(w->context);
    free(w->enc_lens);
    free(w->req_cap);
    free(w->ref);
    ah_binding_destroy(w->b);
    memset(w, 0, sizeof *w);
}

/* Group G's table and slots for the planned step: the new tokens' slots;
 * with release, the blocks the window hides from each request's first
 * query (position ctx[r]) marked released. Uploads both. */
static int group_plan(workload *w, wl_group *G, const uint32_t *ctx, const int32_t *qsl,
                      int encoder_pass)
{
    const uint32_t bs = G->block_size, row = G->row;
    int32_t *tab = G->table.host;
    int64_t *slots = G->slots.host;
    for (uint32_t r = 0; r < w->num_reqs; r++) {
        uint32_t t0 = (uint32_t)qsl[r], q = (uint32_t)qsl[r + 1] - t0;
        for (uint32_t i = 0; i < q; i++) {
            uint32_t pos = ctx[r] + i;
            slots[t0 + i] = (int64_t)G->blocks[(size_t)r * row + pos / bs] * bs + pos % bs;
        }
        /* block k is hidden when its last position (k + 1) * bs - 1 is at
         * most ctx - window: no query of this step or a later one sees it */
        if (!G->release || encoder_pass || ctx[r] + 1 <= G->window) continue;
        uint32_t hidden = (ctx[r] + 1 - G->window) / bs;
        for (uint32_t k = 0; k < hidden && k < row; k++)
            if (tab[(size_t)r * row + k] >= 0) {
                tab[(size_t)r * row + k] = -1;
                G->released++;
            }
    }
    G->slots.shape[0] = qsl[w->num_reqs];
    return to_device(w, &G->slots, (size_t)qsl[w->num_reqs] * sizeof(int64_t)) ||
           to_device(w, &G->table, G->table.bytes);
}

/* The keys of a ragged step's pass into the batch: pass < 0, the new
 * tokens over their own keys (bottom-right); else context step `pass`,
 * keys [pass * chunk, (pass + 1) * chunk) of each request's context (none
 * for a request whose context is shorter). Uploads cu_seqlens_k. */
static int ragged_keys(workload *w, int64_t pass, uint32_t *first, uint32_t *count)
{
    const int32_t *qsl = w->qsl.host, *sl = w->seqlens.host;
    int32_t *cuk = w->cuk.host;
    cuk[0] = 0;
    for (uint32_t r = 0; r < w->num_reqs; r++) {
        const uint32_t q = (uint32_t)(qsl[r + 1] - qsl[r]), ctx = (uint32_t)sl[r] - q;
        const uint32_t cc = w->ctx_chunk ? w->ctx_chunk : ctx;
        uint32_t a = pass < 0 ? ctx : (uint32_t)pass * cc, b = pass < 0 ? ctx + q : a + cc;
        if (pass >= 0 && b > ctx) b = ctx;
        if (a > b) a = b;
        first[r] = a;
        count[r] = b - a;
        cuk[r + 1] = cuk[r] + (int32_t)(b - a);
    }
    w->batch.cu_seqlens_k = &w->cuk.t;
    w->batch.cu_seqlens_k_host = cuk;
    w->batch.num_k_tokens = (uint32_t)cuk[w->num_reqs];
    w->batch.ragged_keys = pass < 0 ? AH_RAGGED_KEYS_BOTTOM_RIGHT : AH_RAGGED_KEYS_CONTEXT;
    return to_device(w, &w->cuk, w->cuk.bytes);
}

/* A ragged step's layout: each request's rows in rkf / rvf, the number of
 * context steps, the new tokens' keys in the batch. */
static int ragged_plan(workload *w)
{
    if (!w->krow0) return wl_fail(w, "a ragged step, but no layer runs a ragged prefill form");
    const int32_t *qsl = w->qsl.host, *sl = w->seqlens.host;
    uint32_t max_ctx = 0;
    w->krow0[0] = 0;
    for (uint32_t r = 0; r < w->num_reqs; r++) {
        const uint32_t ctx = (uint32_t)(sl[r] - (qsl[r + 1] - qsl[r]));
        w->krow0[r + 1] = w->krow0[r] + (uint32_t)sl[r];
        if (ctx > max_ctx) max_ctx = ctx;
    }
    w->n_ctx = !max_ctx ? 0 : w->ctx_chunk ? (max_ctx + w->ctx_chunk - 1) / w->ctx_chunk : 1;
    uint32_t *a = calloc(2 * (size_t)w->num_reqs, sizeof *a);
    if (!a) return wl_fail(w, "out of host memory");
    int rc = ragged_keys(w, -1, a, a + w->num_reqs);
    free(a);
    return rc;
}

int wl_plan(workload *w, const uint32_t *query_lens, int encoder_pass)
{
    int32_t *qsl = w->qsl.host, *sl = w->seqlens.host, *el = w->encl.host;
    uint32_t T = 0, maxq = 0, maxs = 0;
    uint32_t *ctx = calloc(w->num_reqs, sizeof *ctx);
    if (!ctx) return wl_fail(w, "out of host memory");
    qsl[0] = 0;
    for (uint32_t r = 0; r < w->num_reqs; r++) {
        uint32_t q = query_lens[r], c = encoder_pass || !w->has_cache ? 0 : w->context[r];
        uint32_t s = c + q;
        if (!q || s > w->req_cap[r] || T + q > w->limits.max_num_tokens) {
            free(ctx);
            return wl_fail(w, "request %u: %u new tokens over %u do not fit the limits", r, q, c);
        }
        ctx[r] = c;
        T += q;
        qsl[r + 1] = (int32_t)T;
        sl[r] = (int32_t)s;
        el[r] = (int32_t)(encoder_pass ? q : w->enc_lens[r]);
        maxq = q > maxq ? q : maxq;
        maxs = s > maxs ? s : maxs;
        if (w->has_cross && (uint32_t)el[r] > maxs) maxs = (uint32_t)el[r];
    }
    for (uint32_t g = 0; w->has_cache && g < w->n_groups; g++)
        if (w->groups[g].block_size && group_plan(w, &w->groups[g], ctx, qsl, encoder_pass)) {
            free(ctx);
            return -1;
        }
    free(ctx);
    w->qsl.shape[0] = w->num_reqs + 1;
    if (to_device(w, &w->qsl, w->qsl.bytes) || to_device(w, &w->seqlens, w->seqlens.bytes) ||
        (w->has_cross && to_device(w, &w->encl, w->encl.bytes)))
        return -1;
    for (uint32_t l = 0; l < w->num_layers; l++) {
        wl_layer *L = &w->layers[l];
        if (!L->dev) continue; /* not attention */
        ah_mirror *rows[] = {&L->q,       &L->k,       &L->v,       &L->out,
                             &L->lse,     &L->rq,      &L->rout[0], &L->rout[1],
                             &L->rout[2], &L->rlse[0], &L->rlse[1], &L->rlse[2]};
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            if (rows[i]->t.data) rows[i]->shape[0] = T;
    }
    /* group 0 in the batch's own fields; with several groups, every group
     * in kv_groups (group 0 again: an entry may also stand for them) */
    const wl_group *g0 = &w->groups[0];
    const int pg = w->has_cache;
    for (uint32_t g = 0; g < w->n_groups; g++) {
        wl_group *G = &w->groups[g];
        w->kvg[g] = (ah_kv_group){sizeof(ah_kv_group), G->num_blocks, &G->table.t, &G->slots.t,
                                  G->table.host,       G->slots.host, G->row};
    }
    w->batch = (ah_batch){.struct_size = sizeof(ah_batch),
                          .num_reqs = w->num_reqs,
                          .num_tokens = T,
                          .max_query_len = maxq,
                          .max_seq_len = maxs,
                          .num_blocks = pg ? g0->num_blocks : 0,
                          .query_start_loc = &w->qsl.t,
                          .seq_lens = &w->seqlens.t,
                          .block_table = pg ? &g0->table.t : NULL,
                          .slot_mapping = pg ? &g0->slots.t : NULL,
                          .query_start_loc_host = qsl,
                          .seq_lens_host = sl,
                          .block_table_host = pg ? g0->table.host : NULL,
                          .slot_mapping_host = pg ? g0->slots.host : NULL,
                          .block_table_stride = pg ? g0->row : 0,
                          .encoder_seq_lens = w->has_cross ? &w->encl.t : NULL,
                          .encoder_seq_lens_host = w->has_cross ? el : NULL,
                          .num_kv_groups = w->n_groups > 1 ? w->n_groups : 0,
                          .kv_groups = w->n_groups > 1 ? w->kvg : NULL};
    w->enc_pass = encoder_pass;
    w->rgen++;
    w->rplanned = WL_NO_PASS;
    if (w->ragged_step && !encoder_pass && ragged_plan(w)) return -1;
    if (ah_binding_plan(w->b, &w->batch, AH_PLAN_EAGER, w->stream) != AH_OK)
        return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    if (w->ragged_step && !encoder_pass) w->rplanned = -1; /* ragged_plan's keys */
    return 0;
}

int wl_fill(workload *w, uint32_t l)
{
    wl_layer *L = &w->layers[l];
    if (!L->dev) return 0;
    const ah_layer_spec *s = &L->spec;
    uint32_t T = w->batch.num_tokens;
    const int ragged = wl_ragged_now(w, L);
    /* the encoder pass only stores K/V; a ragged step stores the paged
     * form's K/V (MLA's latent) but attends with the ragged form's q */
    ah_mirror *fresh[] = {&L->q, &L->k, &L->v, ragged ? &L->rq : NULL};
    for (int i = 0; i < 4; i++) {
        if (!fresh[i] || !fresh[i]->t.data) continue; /* MLA: no value */
        if (i == 0 && (w->enc_pass || ragged)) continue;
        size_t n = (size_t)T * fresh[i]->shape[1] * fresh[i]->shape[2];
        wl_fill_random(&w->rng, fresh[i]->host, n, s->q_dtype);
        if (to_device(w, fresh[i], n * ah_dtype_size(s->q_dtype))) return -1;
    }
    if (ragged) { /* the step's whole K/V, per request its context then new rows */
        const ah_layer_spec *r = &L->rspec;
        const size_t rows = w->krow0[w->num_reqs];
        w->rgen++; /* every layer's staged pass came from the data replaced here */
        wl_fill_random(&w->rng, w->rkf, rows * r->num_kv_heads * r->qk_head_size, r->q_dtype);
        wl_fill_random(&w->rng, w->rvf, rows * r->num_kv_heads * r->v_head_size, r->q_dtype);
    }
    return 0;
}

int wl_step(workload *w, const uint32_t *query_lens)
{
    if (wl_plan(w, query_lens, 0)) return -1;
    for (uint32_t l = 0; l < w->num_layers; l++)
        if (wl_fill(w, l)) return -1;
    return 0;
}

/* Plan pass `pass` of the ragged step (see ragged_keys) and put its keys
 * and values, gathered from rkf / rvf, into layer l's rk / rv. */
static int ragged_pass(workload *w, uint32_t l, int64_t pass)
{
    wl_layer *L = &w->layers[l];
    const ah_layer_spec *r = &L->rspec;
    /* The new tokens' pass again over the same data (a step forwarded more
     * than once, as bench does): its keys are staged and planned already,
     * and gathering them again on the host would be what bench times. */
    if (pass < 0 && L->rstaged == w->rgen && w->rplanned == -1) return 0;
    L->rstaged = 0;
    w->rplanned = WL_NO_PASS;
    uint32_t *a = calloc(2 * (size_t)w->num_reqs, sizeof *a);
    if (!a) return wl_fail(w, "out of host memory");
    uint32_t *n = a + w->num_reqs;
    if (ragged_keys(w, pass, a, n)) {
        free(a);
        return -1;
    }
    const size_t es = ah_dtype_size(r->q_dtype),
                 kb = (size_t)r->num_kv_heads * r->qk_head_size * es,
                 vb = (size_t)r->num_kv_heads * r->v_head_size * es;
    size_t dst = 0;
    for (uint32_t q = 0; q < w->num_reqs; q++) {
        const size_t src = (size_t)w->krow0[q] + a[q];
        memcpy((char *)L->rk.host + dst * kb, (const char *)w->rkf + src * kb, n[q] * kb);
        memcpy((char *)L->rv.host + dst * vb, (const char *)w->rvf + src * vb, n[q] * vb);
        dst += n[q];
    }
    free(a);
    L->rk.shape[0] = L->rv.shape[0] = (int64_t)dst;
    if (to_device(w, &L->rk, dst * kb) || to_device(w, &L->rv, dst * vb)) return -1;
    if (ah_binding_plan(w->b, &w->batch, AH_PLAN_EAGER, w->stream) == AH_OK) {
        L->rstaged = pass < 0 ? w->rgen : 0;
        w->rplanned = pass;
        return 0;
    }
    if (pass < 0)
        return wl_fail(w, "layer %u: the new tokens' ragged step: %s", l, ah_binding_errmsg(w->b));
    return wl_fail(w, "layer %u: context step %lld: %s", l, (long long)pass,
                   ah_binding_errmsg(w->b));
}

/* The planned ragged pass of layer l into rout[slot] and rlse[slot]. */
static int ragged_forward(workload *w, uint32_t l, uint32_t slot, const ah_mirror *sinks)
{
    wl_layer *L = &w->layers[l];
    ah_forward_args a = {.struct_size = sizeof a,
                         .q = &L->rq.t,
                         .key = &L->rk.t,
                         .value = &L->rv.t,
                         .out = &L->rout[slot].t,
                         .lse = &L->rlse[slot].t,
                         .sinks = L->rspec.use_sinks ? &sinks->t : NULL,
                         .alibi_slopes = L->rspec.use_alibi ? &L->alibi.t : NULL,
                         .stream = w->stream};
    if (ah_binding_forward(w->b, l, &a) != AH_OK) return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    return 0;
}

/* Layer l's ragged prefill (see the top of workload.h): plans each pass
 * again, since the step's buffers hold one layer's activations. */
static int forward_ragged(workload *w, uint32_t l, int store_kv)
{
    wl_layer *L = &w->layers[l];
    void *stream = w->stream;
    const ah_kv_write_args kw = kv_write_args(w, L);
    if (ragged_pass(w, l, -1)) return -1;
    if (store_kv && ah_binding_write_kv(w->b, l, &kw) != AH_OK)
        return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    if (ragged_forward(w, l, 0, &L->sinks)) return -1;
    /* context steps: partial results into rout[1], merged with the running
     * one; every part but the first attends without the sink */
    uint32_t cur = 0;
    for (uint32_t c = 0; c < w->n_ctx; c++) {
        const uint32_t next = 2 - cur;
        if (ragged_pass(w, l, c) || ragged_forward(w, l, 1, &L->nosinks)) return -1;
        ah_merge_args m = {sizeof m,      &L->rout[cur].t,  &L->rlse[cur].t,  &L->rout[1].t,
                           &L->rlse[1].t, &L->rout[next].t, &L->rlse[next].t, stream};
        if (ah_binding_merge_states(w->b, l, &m) != AH_OK)
            return wl_fail(w, "layer %u: %s", l, ah_binding_errmsg(w->b));
        cur = next;
    }
    L->rfinal = cur;
    return 0;
}

int wl_forward(workload *w, uint32_t l, int store_kv)
{
    wl_layer *L = &w->layers[l];
    if (!L->dev) return 0; /* not attention */
    if (wl_ragged_now(w, L)) return forward_ragged(w, l, store_kv);
    int mla = L->spec.use_mla, kv = L->role == WL_CACHELESS || (L->role == WL_SELF && store_kv);
    int cache = L->role != WL_CACHELESS;
    ah_forward_args a = {.struct_size = sizeof a,
                         .q = &L->q.t,
                         .key = kv ? &L->k.t : NULL,
                         .value = kv && !mla ? &L->v.t : NULL,
                         .key_cache = cache ? &L->kcache.t : NULL,
                         .value_cache = cache && !mla ? &L->vcache.t : NULL,
                         .out = &L->out.t,
                         .lse = NULL,
                         .sinks = L->spec.use_sinks ? &L->sinks.t : NULL,
                         .alibi_slopes = L->spec.use_alibi ? &L->alibi.t : NULL,
                         .stream = w->stream};
    if (ah_spec_kv_scales(&L->spec) == AH_KV_SCALES_HOST) {
        a.k_scale = L->k_scale;
        a.v_scale = L->v_scale;
        a.q_scale = L->q_scale;
    } else {
        a.k_scale_tensor = &L->ksc.t;
        a.v_scale_tensor = mla ? NULL : &L->vsc.t;
        a.q_scale_tensor = ah_spec_q_scale(&L->spec) ? &L->qsc.t : NULL;
    }
    if (ah_binding_forward(w->b, l, &a) != AH_OK) return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    return 0;
}

int wl_write_cross(workload *w, uint32_t l)
{
    wl_layer *L = &w->layers[l];
    const ah_kv_write_args a = kv_write_args(w, L);
    if (ah_binding_write_kv(w->b, l, &a) != AH_OK) return wl_fail(w, "%s", ah_binding_errmsg(w->b));
    ah_error err;
    if (!w->timing && wl_ref_write_kv(w, L, &err) != AH_OK)
        return wl_fail(w, "layer %u: reference KV write: %s", l, err.msg);
    return 0;
}

int wl_forward_all(workload *w, int store_kv) { return wl_enqueue_all(w, store_kv) || wl_sync(w); }

int wl_enqueue_all(workload *w, int store_kv)
{
    for (uint32_t l = 0; l < w->num_layers; l++)
        if (wl_forward(w, l, store_kv)) return -1;
    return 0;
}

int wl_sync(workload *w)
{
    for (uint32_t l = 0; l < w->num_layers; l++) {
        ah_device *d = w->layers[l].dev;
        if (!d) continue;
        int seen = 0; /* one wait per device */
        for (uint32_t k = 0; k < l && !seen; k++) seen = w->layers[k].dev == d;
        if (!seen && ah_device_sync(d) != AH_OK)
            return wl_fail(w, "layer %u: %s", l, ah_device_errmsg(d));
    }
    return 0;
}

void wl_advance(workload *w)
{
    const int32_t *qsl = w->qsl.host;
    for (uint32_t r = 0; r < w->num_reqs; r++) w->context[r] += (uint32_t)(qsl[r + 1] - qsl[r]);
}
