/*
 * Tensors, paged batches, workloads and comparison with the oracle (see
 * ath.h). Device memory is the plugin's own (ops->mem_alloc / mem_copy), so
 * nothing here links a GPU runtime: a driver builds and skips anywhere.
 */
#include "ath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const DLDataType ath_i32 = {kDLInt, 32, 1}, ath_i64 = {kDLInt, 64, 1}, ath_f32 = {kDLFloat, 32, 1};

/* ---- tensors ---------------------------------------------------------------- */

static void describe(ath_tensor *t, DLDataType dt, int ndim, const int64_t *shape)
{
    memset(t, 0, sizeof *t);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= (size_t)shape[i];
    }
    t->bytes = n * (dt.bits / 8u) * dt.lanes;
    t->t.ndim = ndim;
    t->t.shape = t->shape;
    t->t.dtype = dt;
}

int ath_tensor_alloc(ath_host *h, ath_tensor *t, DLDataType dt, int ndim, const int64_t *shape)
{
    /* tagged as the host tags its devices' memory (ah_device_dl): a CPU
     * plugin's is kDLCPU, a Level Zero plugin's kDLExtDev */
    static const DLDeviceType types[AH_DEVICE_KIND_COUNT] = {kDLCPU, kDLCUDA, kDLROCM, kDLExtDev};
    const ah_device_kind kind = h->desc ? h->desc->device_kind : AH_DEVICE_CUDA;
    describe(t, dt, ndim, shape);
    t->t.device.device_type = kind < AH_DEVICE_KIND_COUNT ? types[kind] : kDLCUDA;
    void *p = NULL;
    if (h->ops->mem_alloc(h->ctx, t->bytes ? t->bytes : 16, &p) != AH_OK) {
        fprintf(stderr, "mem_alloc(%zu): %s\n", t->bytes, h->ops->context_error(h->ctx));
        t->t.data = NULL;
        return 1;
    }
    t->t.data = p;
    t->owned = 1;
    return 0;
}

int ath_tensor_new(ath_host *h, ath_tensor *t, ah_dtype dt, int ndim, const int64_t *shape)
{
    return ath_tensor_alloc(h, t, ah_dtype_to_dl(dt), ndim, shape);
}

void ath_tensor_host(ath_tensor *t, void *data, DLDataType dt, int ndim, const int64_t *shape)
{
    describe(t, dt, ndim, shape);
    t->t.device.device_type = kDLCPU;
    t->t.data = data;
}

void ath_tensor_free(ath_host *h, ath_tensor *t)
{
    if (t->owned && t->t.data) h->ops->mem_free(h->ctx, t->t.data);
    memset(t, 0, sizeof *t);
}

int ath_upload(ath_host *h, ath_tensor *t, const void *host)
{
    if (!t->owned) return 0; /* a host view: nothing to copy */
    if (h->ops->mem_copy(h->ctx, t->t.data, host, t->bytes, AH_COPY_HOST_TO_DEVICE, h->stream) !=
        AH_OK) {
        fprintf(stderr, "upload: %s\n", h->ops->context_error(h->ctx));
        return 1;
    }
    return 0;
}

int ath_download(ath_host *h, void *host, const ath_tensor *t)
{
    if (!t->owned) {
        if (host != t->t.data) memcpy(host, t->t.data, t->bytes);
        return 0;
    }
    if (h->ops->mem_copy(h->ctx, host, t->t.data, t->bytes, AH_COPY_DEVICE_TO_HOST, h->stream) !=
        AH_OK) {
        fprintf(stderr, "download: %s\n", h->ops->context_error(h->ctx));
        return 1;
    }
    return 0;
}

size_t ath_tensor_elems(const ath_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->t.ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

/* A device tensor with h, else a view of host memory. */
static int place(ath_host *h, ath_tensor *t, void *host, DLDataType dt, int ndim,
                 const int64_t *shape)
{
    if (!h) {
        ath_tensor_host(t, host, dt, ndim, shape);
        return 0;
    }
    return ath_tensor_alloc(h, t, dt, ndim, shape);
}

/* ---- paged batches ---------------------------------------------------------- */

static uint32_t blocks_of(int32_t len, uint32_t bs)
{
    return len > 0 ? ((uint32_t)len + bs - 1) / bs : 0;
}

/* Lengths, table and slots on the host: blocks from a random permutation of
 * the pool (or in pool order), the shared prefix blocks first. */
static int layout(ath_batch *B, const ath_batch_spec *s, uint64_t *rng)
{
    const uint32_t R = s->num_reqs, bs = s->block_size, P = s->prefix_blocks;
    if (R > B->cap_reqs) {
        fprintf(stderr, "batch: %u requests, room for %u\n", R, B->cap_reqs);
        return 1;
    }
    uint32_t *perm = malloc(sizeof(uint32_t) * (B->num_blocks + 1));
    if (!perm) return 1;
    for (uint32_t i = 0; i < B->num_blocks; i++) perm[i] = i;
    for (uint32_t i = s->ordered ? 0 : B->num_blocks; i > 1; i--) {
        uint32_t j = (uint32_t)(ath_rand_u64(rng) % i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < (size_t)B->cap_reqs * B->width; i++) B->bt[i] = s->unused_entry;
    uint32_t next = P, T = 0, maxq = 0, maxs = 0;
    B->qsl[0] = 0;
    for (uint32_t r = 0; r < R; r++) {
        const int32_t ql = s->qlens[r], sl = s->seqlens[r];
        const uint32_t np = blocks_of(sl, bs);
        int32_t *row = B->bt + (size_t)r * B->width;
        if (np > B->width || next + (np > P ? np - P : 0) > B->num_blocks || P > B->num_blocks) {
            fprintf(stderr, "batch: request %u (%d tokens) does not fit the table or the pool\n", r,
                    sl);
            free(perm);
            return 1;
        }
        for (uint32_t i = 0; i < np; i++) row[i] = (int32_t)(i < P ? perm[i] : perm[next++]);
        B->qsl[r + 1] = B->qsl[r] + ql;
        B->seq[r] = sl;
        T += (uint32_t)ql;
        if (T > B->cap_tokens) {
            fprintf(stderr, "batch: more than %u tokens\n", B->cap_tokens);
            free(perm);
            return 1;
        }
        for (int32_t i = 0; i < ql; i++) {
            const int64_t pos = (int64_t)sl - ql + i;
            B->slots[B->qsl[r] + i] =
                s->no_slots || pos < 0 ? -1 : (int64_t)row[pos / bs] * bs + pos % bs;
        }
        if ((uint32_t)ql > maxq) maxq = (uint32_t)ql;
        if ((uint32_t)sl > maxs) maxs = (uint32_t)sl;
    }
    free(perm);
    B->num_reqs = R;
    B->num_tokens = T;
    B->max_q = maxq;
    B->max_seq = maxs;
    ah_batch *b = &B->b;
    memset(b, 0, sizeof *b);
    b->struct_size = sizeof *b;
    b->num_reqs = R;
    b->num_tokens = T;
    b->max_query_len = maxq;
    b->max_seq_len = maxs;
    b->num_blocks = B->num_blocks;
    b->query_start_loc = &B->d_qsl.t;
    b->seq_lens = &B->d_seq.t;
    b->block_table = &B->d_bt.t;
    b->slot_mapping = &B->d_slots.t;
    b->query_start_loc_host = B->qsl;
    b->seq_lens_host = B->seq;
    b->block_table_host = B->bt;
    b->slot_mapping_host = B->slots;
    b->block_table_stride = B->width;
    b->common_prefix_len = P * bs;
    return 0;
}

static int upload_batch(ath_host *h, ath_batch *B)
{
    return h && (ath_upload(h, &B->d_qsl, B->qsl) || ath_upload(h, &B->d_seq, B->seq) ||
                 ath_upload(h, &B->d_bt, B->bt) || ath_upload(h, &B->d_slots, B->slots));
}

int ath_batch_build(ath_host *h, ath_batch *B, const ath_batch_spec *s, uint64_t *rng)
{
    memset(B, 0, sizeof *B);
    const uint32_t R = s->num_reqs, bs = s->block_size, P = s->prefix_blocks;
    uint32_t used = P, widest = 1, T = 0;
    for (uint32_t r = 0; r < R; r++) {
        const uint32_t np = blocks_of(s->seqlens[r], bs);
        used += np - (np < P ? np : P);
        if (np > widest) widest = np;
        T += (uint32_t)s->qlens[r];
    }
    B->width = s->table_width ? s->table_width : widest + s->table_pad;
    B->num_blocks = s->num_blocks ? s->num_blocks : used + s->extra_blocks;
    if (B->num_blocks < s->min_blocks) B->num_blocks = s->min_blocks;
    B->cap_reqs = s->cap_reqs > R ? s->cap_reqs : R;
    B->cap_tokens = s->cap_tokens > T ? s->cap_tokens : T;
    const size_t cr = B->cap_reqs, ct = B->cap_tokens;
    B->qsl = calloc(cr + 1, 4);
    B->seq = calloc(cr + 1, 4);
    B->bt = calloc(cr * B->width + 1, 4);
    B->slots = calloc(ct + 1, 8);
    if (!B->qsl || !B->seq || !B->bt || !B->slots) {
        fprintf(stderr, "batch: out of memory\n");
        return 1;
    }
    const int64_t s_qsl = (int64_t)cr + 1, s_seq = (int64_t)cr, s_bt[2] = {(int64_t)cr, B->width},
                  s_slots = ct ? (int64_t)ct : 1;
    if (place(h, &B->d_qsl, B->qsl, ath_i32, 1, &s_qsl) ||
        place(h, &B->d_seq, B->seq, ath_i32, 1, &s_seq) ||
        place(h, &B->d_bt, B->bt, ath_i32, 2, s_bt) ||
        place(h, &B->d_slots, B->slots, ath_i64, 1, &s_slots))
        return 1;
    return layout(B, s, rng) || upload_batch(h, B);
}

int ath_batch_refill(ath_host *h, ath_batch *B, const ath_batch_spec *s, uint64_t *rng)
{
    return layout(B, s, rng) || upload_batch(h, B);
}

void ath_batch_free(ath_host *h, ath_batch *B)
{
    if (h) {
        ath_tensor_free(h, &B->d_qsl);
        ath_tensor_free(h, &B->d_seq);
        ath_tensor_free(h, &B->d_bt);
        ath_tensor_free(h, &B->d_slots);
    }
    free(B->qsl);
    free(B->seq);
    free(B->bt);
    free(B->slots);
    memset(B, 0, sizeof *B);
}

/* ---- workloads -------------------------------------------------------------- */

static float or1(float v) { return v ? v : 1.f; }

/* Values: q, key cache, value cache, new K, new V, sinks, slopes. */
static void fill_values(ath_work *w, uint64_t *rng)
{
    const ath_shape *s = &w->s;
    const uint32_t dv = w->spec.v_head_size;
    ath_fill_uniform(w->q, (size_t)w->rows * s->hq * s->d, s->q_dtype, or1(s->q_amp), 1.f, rng);
    ath_fill_uniform(w->kc, w->kc_elems, s->kv_dtype, or1(s->kv_amp), or1(s->k_scale), rng);
    if (w->vc)
        ath_fill_uniform(w->vc, w->vc_elems, s->kv_dtype, or1(s->kv_amp), or1(s->v_scale), rng);
    if (w->knew)
        ath_fill_uniform(w->knew, (size_t)w->rows * s->hk * s->d, s->q_dtype, or1(s->new_amp), 1.f,
                         rng);
    if (w->vnew)
        ath_fill_uniform(w->vnew, (size_t)w->rows * s->hk * dv, s->q_dtype, or1(s->new_amp), 1.f,
                         rng);
    for (uint32_t h = 0; h < s->hq; h++) {
        w->sinks[h] = (float)ath_rand_range(rng, -1.0, 3.0);
        w->slopes[h] = exp2f(-8.f * (float)(h + 1) / (float)s->hq);
    }
}

int ath_work_upload(ath_host *h, ath_work *w)
{
    if (!h) return 0;
    return ath_upload(h, &w->d_q, w->q) || ath_upload(h, &w->d_kc, w->kc) ||
           (w->vc && ath_upload(h, &w->d_vc, w->vc)) ||
           (w->knew && ath_upload(h, &w->d_k, w->knew)) ||
           (w->vnew && ath_upload(h, &w->d_v, w->vnew)) || ath_upload(h, &w->d_sinks, w->sinks) ||
           ath_upload(h, &w->d_slopes, w->slopes) || upload_batch(h, &w->B);
}

ah_layer_spec ath_spec(ah_attn_type attn, uint32_t hq, uint32_t hk, uint32_t d, ah_dtype dt,
                       uint32_t bs)
{
    ah_layer_spec sp = {.struct_size = sizeof sp, .attn_type = attn, .q_dtype = dt, .kv_dtype = dt};
    sp.num_q_heads = hq;
    sp.num_kv_heads = hk;
    sp.qk_head_size = sp.v_head_size = d;
    sp.block_size = bs;
    sp.kv_layout = AH_KV_LAYOUT_NHD;
    return sp;
}

int ath_work_build(ath_host *h, ath_work *w, const ath_shape *s, uint64_t *rng)
{
    memset(w, 0, sizeof *w);
    w->s = *s;
    const uint32_t d = s->d, dv = s->dv ? s->dv : s->d, bs = s->batch.block_size;
    if (ath_batch_build(h, &w->B, &s->batch, rng)) return 1;
    ah_layer_spec *sp = &w->spec;
    *sp = ath_spec(s->attn, s->hq, s->hk, d, s->q_dtype, bs);
    sp->causal = s->causal;
    sp->v_head_size = dv;
    sp->kv_dtype = s->kv_dtype;
    sp->kv_layout = s->layout;
    sp->sliding_window = s->window;
    sp->softcap = s->softcap;
    sp->scale = s->scale ? s->scale : 1.f / sqrtf((float)d) / or1(s->q_amp);
    sp->use_mla = s->mla;
    sp->use_sinks = s->sinks;
    sp->use_alibi = s->alibi;
    sp->fp8_attention = s->fp8_attention;
    const ath_batch *B = &w->B;
    w->lim = (ah_limits){sizeof(ah_limits), B->cap_reqs,   B->cap_tokens,
                         B->width,          B->width * bs, B->num_blocks};
    w->rows = B->cap_tokens > s->min_rows ? B->cap_tokens : s->min_rows;
    if (!w->rows) w->rows = 1;
    const size_t qe = ah_dtype_size(s->q_dtype), ke = ah_dtype_size(s->kv_dtype);
    const size_t kv_rows = (size_t)B->num_blocks * bs * s->hk, R = w->rows;
    w->kc_elems = kv_rows * d;
    w->vc_elems = s->mla ? 0 : kv_rows * dv;
    w->q = malloc(R * s->hq * d * qe + 16);
    w->kc = malloc(w->kc_elems * ke + 16);
    w->vc = s->mla ? NULL : malloc(w->vc_elems * ke + 16);
    w->knew = s->new_kv ? malloc(R * s->hk * d * qe + 16) : NULL;
    w->vnew = s->new_kv && !s->mla ? malloc(R * s->hk * dv * qe + 16) : NULL;
    w->sinks = malloc(4 * s->hq + 4);
    w->slopes = malloc(4 * s->hq + 4);
    if (!h) {
        w->out_host = malloc(R * s->hq * dv * qe + 16);
        w->lse_host = malloc(4 * R * s->hq + 4);
    }
    if (!w->q || !w->kc || (!s->mla && !w->vc) || (s->new_kv && !w->knew) ||
        (s->new_kv && !s->mla && !w->vnew) || !w->sinks || !w->slopes ||
        (!h && (!w->out_host || !w->lse_host))) {
        fprintf(stderr, "workload: out of memory\n");
        return 1;
    }
    fill_values(w, rng);
    const int hnd = s->layout == AH_KV_LAYOUT_HND;
    const int64_t sh_q[3] = {(int64_t)R, s->hq, d}, sh_out[3] = {(int64_t)R, s->hq, dv},
                  sh_lse[2] = {(int64_t)R, s->hq}, sh_h[1] = {s->hq},
                  sh_k[3] = {(int64_t)R, s->hk, d}, sh_v[3] = {(int64_t)R, s->hk, dv};
    const int64_t sh_kc[4] = {B->num_blocks, hnd ? s->hk : bs, hnd ? bs : s->hk, d};
    const int64_t sh_vc[4] = {B->num_blocks, hnd ? s->hk : bs, hnd ? bs : s->hk, dv};
    const DLDataType qt = ah_dtype_to_dl(s->q_dtype), kt = ah_dtype_to_dl(s->kv_dtype);
    if (place(h, &w->d_q, w->q, qt, 3, sh_q) || place(h, &w->d_kc, w->kc, kt, 4, sh_kc) ||
        (w->vc && place(h, &w->d_vc, w->vc, kt, 4, sh_vc)) ||
        (w->knew && place(h, &w->d_k, w->knew, qt, 3, sh_k)) ||
        (w->vnew && place(h, &w->d_v, w->vnew, qt, 3, sh_v)) ||
        place(h, &w->d_out, w->out_host, qt, 3, sh_out) ||
        place(h, &w->d_lse, w->lse_host, ath_f32, 2, sh_lse) ||
        place(h, &w->d_sinks, w->sinks, ath_f32, 1, sh_h) ||
        place(h, &w->d_slopes, w->slopes, ath_f32, 1, sh_h))
        return 1;
    return ath_work_upload(h, w);
}

int ath_work_refill(ath_host *h, ath_work *w, const ath_shape *s, uint64_t *rng)
{
    if (layout(&w->B, &s->batch, rng)) return 1;
    fill_values(w, rng);
    return ath_work_upload(h, w);
}

void ath_work_free(ath_host *h, ath_work *w)
{
    if (h) {
        ath_tensor *ts[] = {&w->d_q,   &w->d_kc,  &w->d_vc,    &w->d_k,     &w->d_v,
                            &w->d_out, &w->d_lse, &w->d_sinks, &w->d_slopes};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ath_tensor_free(h, ts[i]);
    }
    ath_batch_free(h, &w->B);
    void *p[] = {w->q,     w->kc,     w->vc,       w->knew,    w->vnew,
                 w->sinks, w->slopes, w->out_host, w->lse_host};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    memset(w, 0, sizeof *w);
}

ah_forward_args ath_forward_args(const DLTensor *q, const DLTensor *key_cache,
                                 const DLTensor *value_cache, DLTensor *out, DLTensor *lse,
                                 void *stream)
{
    ah_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.q = q;
    a.key_cache = key_cache;
    a.value_cache = value_cache;
    a.out = out;
    a.lse = lse;
    a.stream = stream;
    return a;
}

ah_forward_args ath_work_args(ath_work *w, void *stream, int want_lse)
{
    ah_forward_args a = ath_forward_args(&w->d_q.t, &w->d_kc.t, w->vc ? &w->d_vc.t : NULL,
                                         &w->d_out.t, want_lse ? &w->d_lse.t : NULL, stream);
    a.key = w->knew ? &w->d_k.t : NULL;
    a.value = w->vnew ? &w->d_v.t : NULL;
    a.sinks = w->s.sinks ? &w->d_sinks.t : NULL;
    a.alibi_slopes = w->s.alibi ? &w->d_slopes.t : NULL;
    a.k_scale = w->s.k_scale;
    a.v_scale = w->s.v_scale;
    return a;
}

ah_kv_write_args ath_work_write_args(ath_work *w, void *stream)
{
    ah_kv_write_args a = {.struct_size = sizeof a,
                          .key = &w->d_k.t,
                          .value = w->vnew ? &w->d_v.t : NULL,
                          .key_cache = &w->d_kc.t,
                          .value_cache = w->vc ? &w->d_vc.t : NULL,
                          .k_scale = w->s.k_scale,
                          .v_scale = w->s.v_scale,
                          .stream = stream};
    return a;
}

/* The batch without its requests of no query tokens (they add no rows; the
 * oracle, validating as the host does, takes a request of query_len 0 for
 * graph padding, which must carry seq_len 0). NULL when there are none. */
static ah_batch *without_empty(const ath_batch *B, ah_batch *out, int32_t **arrays)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < B->num_reqs; r++) n += B->qsl[r + 1] > B->qsl[r];
    if (n == B->num_reqs) return NULL;
    const ah_batch *b = &B->b;
    const int32_t *enc = b->encoder_seq_lens_host;
    int32_t *qsl = arrays[0] = calloc(n + 1, 4), *seq = arrays[1] = calloc(n + 1, 4),
            *bt = arrays[2] = calloc((size_t)n * B->width + 1, 4),
            *es = arrays[3] = enc ? calloc(n + 1, 4) : NULL;
    if (!qsl || !seq || !bt || (enc && !es)) return NULL;
    uint32_t k = 0;
    for (uint32_t r = 0; r < B->num_reqs; r++) {
        if (B->qsl[r + 1] == B->qsl[r]) continue;
        qsl[k] = B->qsl[r];
        qsl[k + 1] = B->qsl[r + 1];
        seq[k] = B->seq[r];
        if (es) es[k] = enc[r];
        memcpy(bt + (size_t)k * B->width, B->bt + (size_t)r * B->width, 4u * B->width);
        k++;
    }
    *out = *b;
    out->num_reqs = n;
    out->query_start_loc = out->seq_lens = out->block_table = NULL;
    out->query_start_loc_host = qsl;
    out->seq_lens_host = seq;
    out->block_table_host = bt;
    if (es) out->encoder_seq_lens_host = es;
    return out;
}

int ath_work_reference(const ath_work *w, double *out, double *lse, char *why, size_t cap)
{
    ah_batch compact;
    int32_t *arrays[4] = {NULL, NULL, NULL, NULL};
    const ah_batch *b = without_empty(&w->B, &compact, arrays);
    ah_ref_inputs in = {.struct_size = sizeof in,
                        .spec = &w->spec,
                        .batch = b ? b : &w->B.b,
                        .q = w->q,
                        .key_cache = w->kc,
                        .value_cache = w->vc,
                        .sinks = w->s.sinks ? w->sinks : NULL,
                        .alibi_slopes = w->s.alibi ? w->slopes : NULL,
                        .k_scale = w->s.k_scale,
                        .v_scale = w->s.v_scale,
                        .key = w->knew,
                        .value = w->vnew};
    ah_error err;
    const ah_status st = ah_reference_attention(&in, out, lse, &err);
    for (int i = 0; i < 4; i++) free(arrays[i]);
    if (st != AH_OK) {
        snprintf(why, cap, "%s", err.msg);
        return -1;
    }
    return 0;
}

int ath_work_reference_write(ath_work *w, char *why, size_t cap)
{
    ah_error err;
    if (ah_reference_write_kv(&w->spec, &w->B.b, w->knew, w->vnew, w->kc, w->vc, w->s.k_scale,
                              w->s.v_scale, &err) != AH_OK) {
        snprintf(why, cap, "%s", err.msg);
        return -1;
    }
    return 0;
}

/* ---- comparison ------------------------------------------------------------- */

ath_cmp ath_compare(const void *got, ah_dtype dt, const double *ref, size_t n, double atol,
                    double rtol)
{
    ath_cmp c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.first_over = n;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = ah_load_f32(got, i, dt), r = ref[i];
        const int empty = isinf(r) && r < 0; /* an empty row's LSE: only -inf matches */
        if (empty ? !(isinf(g) && g < 0) : !isfinite(g)) {
            c.nonfinite++;
            c.max_abs = c.max_rel1 = INFINITY;
            c.worst_at = i;
            if (c.over++ == 0) c.first_over = i;
            continue;
        }
        if (empty) continue;
        const double e = fabs(g - r), rel1 = e / (1.0 + fabs(r));
        num += e * e;
        den += r * r;
        if (e > c.max_abs) c.max_abs = e;
        if (rel1 > c.max_rel1) {
            c.max_rel1 = rel1;
            c.worst_at = i;
        }
        if (fabs(r) > c.max_ref) c.max_ref = fabs(r);
        if (!(e <= atol + rtol * fabs(r)) && c.over++ == 0) c.first_over = i;
    }
    c.rel_l2 = sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
    return c;
}

size_t ath_bytes_differ(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    return d;
}

/* ---- merge_states ----------------------------------------------------------- */

int ath_merge_run(ath_host *h, const ath_merge_spec *m, uint64_t *rng, ath_cmp *out, ath_cmp *lse,
                  char *why, size_t cap)
{
    const size_t n = (size_t)m->T * m->H * m->D, nl = (size_t)m->T * m->H, e = ah_dtype_size(m->dt);
    void *va = malloc(n * e + 1), *vb = malloc(n * e + 1), *vo = malloc(n * e + 1);
    float *la = malloc(4 * nl + 4), *lb = malloc(4 * nl + 4), *lo = malloc(4 * nl + 4);
    double *da = malloc(8 * n + 8), *db = malloc(8 * n + 8), *dla = malloc(8 * nl + 8),
           *dlb = malloc(8 * nl + 8), *ro = malloc(8 * n + 8), *rl = malloc(8 * nl + 8);
    ath_tensor t[6];
    memset(t, 0, sizeof t);
    int rc = -1;
    snprintf(why, cap, "out of memory");
    if (!va || !vb || !vo || !la || !lb || !lo || !da || !db || !dla || !dlb || !ro || !rl)
        goto done;
    ath_fill_uniform(va, n, m->dt, m->amp, 1, rng);
    ath_fill_uniform(vb, n, m->dt, m->amp, 1, rng);
    for (size_t i = 0; i < nl; i++) {
        la[i] = (float)ath_rand_range(rng, -5, 5);
        lb[i] = (float)ath_rand_range(rng, -5, 5);
        if (m->empty_a && i % m->empty_a == m->empty_a_at) la[i] = -INFINITY; /* an empty part */
        if (m->empty_b && i % m->empty_b == m->empty_b_at) lb[i] = -INFINITY;
        dla[i] = la[i];
        dlb[i] = lb[i];
    }
    for (size_t i = 0; i < n; i++)
        da[i] = ah_load_f32(va, i, m->dt), db[i] = ah_load_f32(vb, i, m->dt);
    ah_reference_merge_states(m->T, m->H, m->D, da, dla, db, dlb, ro, rl);
    for (size_t i = 0; m->nan_empty && i < n; i++) {
        if (la[i / m->D] == -INFINITY) ah_store_f32(va, i, m->dt, NAN);
        if (lb[i / m->D] == -INFINITY) ah_store_f32(vb, i, m->dt, NAN);
    }
    const int64_t sv[3] = {m->T, m->H, m->D}, sl[2] = {m->T, m->H};
    snprintf(why, cap, "device memory");
    if (ath_tensor_new(h, &t[0], m->dt, 3, sv) || ath_tensor_new(h, &t[1], m->dt, 3, sv) ||
        (!m->out_in_a && ath_tensor_new(h, &t[2], m->dt, 3, sv)) ||
        ath_tensor_alloc(h, &t[3], ath_f32, 2, sl) || ath_tensor_alloc(h, &t[4], ath_f32, 2, sl) ||
        ath_tensor_alloc(h, &t[5], ath_f32, 2, sl) || ath_upload(h, &t[0], va) ||
        ath_upload(h, &t[1], vb) || ath_upload(h, &t[3], la) || ath_upload(h, &t[4], lb))
        goto done;
    ath_tensor *to = m->out_in_a ? &t[0] : &t[2]; /* out may alias v_a (the ABI allows it) */
    ah_merge_args a = {sizeof a, &t[0].t, &t[3].t, &t[1].t, &t[4].t, &to->t, &t[5].t, h->stream};
    if (h->ops->merge_states(h->ctx, &a) != AH_OK ||
        h->ops->synchronize(h->ctx, h->stream) != AH_OK) {
        snprintf(why, cap, "%s", h->ops->context_error(h->ctx));
        goto done;
    }
    if (ath_download(h, vo, to) || ath_download(h, lo, &t[5])) goto done;
    *out = ath_compare(vo, m->dt, ro, n, 0, 0);
    *lse = ath_compare(lo, AH_DTYPE_FP32, rl, nl, 0, 0);
    rc = 0;
done:
    for (int i = 0; i < 6; i++) ath_tensor_free(h, &t[i]);
    void *p[] = {va, vb, vo, la, lb, lo, da, db, dla, dlb, ro, rl};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    return rc;
}
