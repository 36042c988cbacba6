/*
 * forward() and write_kv(): check what protects memory and the copy
 * engine (the host checks the rest), fill the kernel parameters and
 * launch. A bad tensor is refused with a message naming it, and nothing
 * runs.
 */
#include <math.h>
#include <string.h>

#include "fa3_order.h"
#include "fa3_state.h"

static int fa3_dt(ah_dtype t)
{
    switch (t) {
    case AH_DTYPE_BF16: return FA3_T_BF16;
    case AH_DTYPE_FP16: return FA3_T_FP16;
    case AH_DTYPE_FP8_E4M3: return FA3_T_FP8_E4M3;
    case AH_DTYPE_FP8_E5M2: return FA3_T_FP8_E5M2;
    default: return -1;
    }
}

/* The host checks forward's and write_kv's tensors against the spec unless
 * validation is off (plugin_util.h). What stays here protects memory and
 * the copy engine's demands: each tensor holds what the kernels address
 * (ah_dl_check), and its strides and base suit TMA (16-byte aligned base,
 * 16-byte row strides). */

/* A [>= T, H, D] activation: 16-byte base, row strides of 8 elements. */
static ah_status fa3_check_act(ah_errbuf *e, const char *name, const DLTensor *t, int64_t T,
                               int64_t H, int64_t D, ah_dtype dt)
{
    const ah_dl_want w = {name, 3, {T, H, D}, 1, dt, 0, AH_KV_LAYOUT_AUTO};
    ah_status s = ah_dl_check(t, &w, e);
    if (s != AH_OK) return s;
    if (ah_dl_stride(t, 1) % 8 || ah_dl_stride(t, 0) % 8 || ((uintptr_t)ah_dl_data(t) & 15))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s needs row strides of 8 elements and 16-byte alignment", name);
    return AH_OK;
}

/* A cache tensor in the spec's layout (any block count: TMA zero-fills a
 * box past the last block); strides out: block, slot, head. The kernels
 * address pages through these strides only (the TMA descriptors and
 * write_kv), so an interleaved layout's view, whose block stride is twice
 * a dense one's and whose value view starts a block's K later, is served
 * by the same code as a dense cache. */
static ah_status fa3_check_cache(ah_errbuf *e, const char *name, const DLTensor *t,
                                 const ah_layer_spec *sp, int64_t strides[3])
{
    const ah_dl_want w = ah_dl_cache_want(name, sp, 0, sp->qk_head_size);
    ah_status s = ah_dl_check(t, &w, e);
    if (s != AH_OK) return s;
    const int hnd = ah_kv_layout_is_hnd(sp->kv_layout);
    if ((uintptr_t)ah_dl_data(t) & 15)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s needs 16-byte alignment", name);
    strides[0] = ah_dl_stride(t, 0);
    strides[1] = ah_dl_stride(t, hnd ? 2 : 1);
    strides[2] = ah_dl_stride(t, hnd ? 1 : 2);
    for (int i = 0; i < 3; i++)
        if (strides[i] % 8)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s strides must be multiples of 8 elements",
                           name);
    return AH_OK;
}

/* The copy engine needs 16-byte global strides: 16 FP8 elements. */
static ah_status fa3_check_fp8_strides(ah_errbuf *e, const int64_t ks[3], const int64_t vs[3])
{
    for (int i = 0; i < 3; i++)
        if (ks[i] % 16 || vs[i] % 16)
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "FP8 key_cache/value_cache strides must be multiples of 16 elements");
    return AH_OK;
}

/* An FP8 scale tensor (plugin.h, "FP8 scales"): n float32 values on the
 * device, dense and 4-byte aligned; its address into *out. */
static ah_status fa3_scale_tensor(ah_errbuf *e, const char *name, const DLTensor *t, int64_t n,
                                  const float **out)
{
    const ah_dl_want w = {name, 1, {n}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
    ah_status s = ah_dl_check(t, &w, e);
    if (s != AH_OK) return s;
    if ((uintptr_t)ah_dl_data(t) & 3)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s needs 4-byte alignment", name);
    *out = (const float *)ah_dl_data(t);
    return AH_OK;
}

/* The K and V scale tensors of an FP8 layer whose spec hands them over
 * (kv_scales TENSOR: [1]; PER_HEAD: [Hk], head stride 1), which the kernels
 * read when they run; NULL for the host's floats (and 16-bit caches). */
static ah_status fa3_kv_scale_tensors(ah_errbuf *e, const ah_layer_spec *sp, const DLTensor *kt,
                                      const DLTensor *vt, const float **k, const float **v,
                                      int32_t *head_stride)
{
    *k = *v = NULL;
    *head_stride = 0;
    const ah_kv_scales form = ah_spec_kv_scales(sp);
    if (sp->kv_dtype != AH_DTYPE_FP8_E4M3 || form == AH_KV_SCALES_HOST) return AH_OK;
    const int per_head = form == AH_KV_SCALES_PER_HEAD;
    const int64_t n = per_head ? sp->num_kv_heads : 1;
    ah_status s = fa3_scale_tensor(e, "k_scale_tensor", kt, n, k);
    if (s == AH_OK) s = fa3_scale_tensor(e, "v_scale_tensor", vt, n, v);
    *head_stride = per_head;
    return s;
}

/* A ragged layer's packed key [Tk, Hk, qk] and value [Tk, Hk, v], which
 * the TMA maps see as one page of all the step's keys (fa3_params.k_start):
 * strides (block, slot, head) into L, the page's rows into p->block_size.
 * With no keys nothing is read, but the maps still need memory: q's. */
static ah_status fa3_ragged_kv(ah_state *st, const ah_forward_args *a, fa3_fwd_launch *L)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *sp = &st->spec;
    const int64_t Tk = st->num_k_tokens, Hk = sp->num_kv_heads;
    ah_status s;
    if ((s = fa3_check_act(e, "key", a->key, Tk, Hk, sp->qk_head_size, sp->q_dtype)) != AH_OK ||
        (s = fa3_check_act(e, "value", a->value, Tk, Hk, sp->v_head_size, sp->q_dtype)) != AH_OK)
        return s;
    const DLTensor *k = Tk ? a->key : a->q, *v = Tk ? a->value : a->q;
    const int64_t rows = Tk ? Tk : 1;
    L->k_cache = ah_dl_data(k);
    L->v_cache = ah_dl_data(v);
    const int64_t ks[3] = {rows * ah_dl_stride(k, 0), ah_dl_stride(k, 0), ah_dl_stride(k, 1)};
    const int64_t vs[3] = {rows * ah_dl_stride(v, 0), ah_dl_stride(v, 0), ah_dl_stride(v, 1)};
    memcpy(L->k_strides, ks, sizeof ks);
    memcpy(L->v_strides, vs, sizeof vs);
    fa3_params *p = &L->p;
    p->k_start = st->d_kstart;
    p->block_size = (int)rows;
    p->num_blocks = 1; /* page 1: past the tensors, zero fill */
    p->box_rows = FA3_BLOCK_N(sp->qk_head_size);
    p->kv_hnd = 0;
    return AH_OK;
}

/* The paged caches' geometry: one TMA box of rows per page. */
static ah_status fa3_paged_kv(ah_state *st, const ah_forward_args *a, fa3_fwd_launch *L)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *sp = &st->spec;
    ah_status s;
    if ((s = fa3_check_cache(e, "key_cache", a->key_cache, sp, L->k_strides)) != AH_OK ||
        (s = fa3_check_cache(e, "value_cache", a->value_cache, sp, L->v_strides)) != AH_OK)
        return s;
    if (a->key_cache->shape[0] != a->value_cache->shape[0])
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "key_cache and value_cache hold different block counts");
    L->k_cache = ah_dl_data(a->key_cache);
    L->v_cache = ah_dl_data(a->value_cache);
    fa3_params *p = &L->p;
    p->block_size = (int)sp->block_size;
    p->num_blocks = (int)a->key_cache->shape[0];
    p->box_rows = fa3_box_rows((int)sp->block_size, FA3_BLOCK_N(sp->qk_head_size));
    p->kv_hnd = ah_kv_layout_is_hnd(sp->kv_layout);
    return AH_OK;
}

ah_status fa3_forward(ah_state *st, const ah_forward_args *a)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *sp = &st->spec;
    AH_CUDA_TRY(e, fa3_use_device(st->ctx));
    const int64_t T = st->num_tokens, Hq = sp->num_q_heads, D = sp->qk_head_size,
                  DV = sp->v_head_size;
    ah_status s;
    if ((s = fa3_check_act(e, "q", a->q, T, Hq, D, sp->q_dtype)) != AH_OK ||
        (s = fa3_check_act(e, "out", a->out, T, Hq, DV, sp->q_dtype)) != AH_OK)
        return s;
    const int64_t Tq = a->q->shape[0];
    fa3_fwd_launch L;
    memset(&L, 0, sizeof L);
    if ((s = st->ragged ? fa3_ragged_kv(st, a, &L) : fa3_paged_kv(st, a, &L)) != AH_OK) return s;
    /* lse dense: the kernels index it as t * Hq + h */
    const ah_dl_want wl = {"lse", 2, {T, Hq}, 1, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO},
                     ws = {"sinks", 1, {Hq}, 0, AH_DTYPE_FP32, 0, AH_KV_LAYOUT_AUTO},
                     wa = {"alibi_slopes", 1, {Hq}, 0, AH_DTYPE_FP32, 0, AH_KV_LAYOUT_AUTO};
    if (a->lse && (s = ah_dl_check(a->lse, &wl, e)) != AH_OK) return s;
    if (sp->use_sinks && (s = ah_dl_check(a->sinks, &ws, e)) != AH_OK) return s;
    if (sp->use_alibi && (s = ah_dl_check(a->alibi_slopes, &wa, e)) != AH_OK) return s;
    const int kv8 = sp->kv_dtype == AH_DTYPE_FP8_E4M3;
    if (kv8 && ((s = fa3_check_fp8_strides(e, L.k_strides, L.v_strides)) != AH_OK)) return s;
    /* FP8 KV: real = stored * scale. k_scale folds into the softmax scale,
     * v_scale into the output normalisation; 16-bit caches ignore both.
     * Scale tensors (the floats are 0, so 1 here) are read by the kernels
     * per item, and the FP8-compute kernel takes the query scale. */
    fa3_params *p = &L.p;
    const int scales23 = AH_HAS_FIELD(a, ah_forward_args, q_scale_tensor);
    if ((s = fa3_kv_scale_tensors(e, sp, scales23 ? a->k_scale_tensor : NULL,
                                  scales23 ? a->v_scale_tensor : NULL, &p->k_scales, &p->v_scales,
                                  &p->scale_head_stride)) != AH_OK)
        return s;
    if (st->fp8_compute && ah_spec_q_scale(sp) && scales23) {
        if (ah_spec_kv_scales(sp) == AH_KV_SCALES_HOST) p->q_scale = a->q_scale;
        else if ((s = fa3_scale_tensor(e, "q_scale_tensor", a->q_scale_tensor, 1, &p->q_scale_t)) !=
                 AH_OK)
            return s;
    }
    const float k_scale = ah_kv_scale(a->k_scale, sp->kv_dtype);
    const float v_scale = ah_kv_scale(a->v_scale, sp->kv_dtype);
    const float scale = ah_spec_scale(sp) * k_scale;

    L.head_dim = (int)D;
    L.v_head_dim = (int)DV;
    L.ragged = st->ragged;
    L.dtype = fa3_dt(sp->q_dtype);
    L.kv_dtype = fa3_dt(sp->kv_dtype);
    L.fp8_compute = st->fp8_compute;
    L.q = ah_dl_data(a->q);
    L.q_tok_stride = ah_dl_stride(a->q, 0);
    L.q_head_stride = ah_dl_stride(a->q, 1);
    L.num_tokens = Tq;
    L.grid = st->grid;
    L.stream = a->stream;
    p->out = ah_dl_data(a->out);
    p->lse = a->lse ? (float *)ah_dl_data(a->lse) : NULL;
    p->out_tok_stride = ah_dl_stride(a->out, 0);
    p->out_head_stride = ah_dl_stride(a->out, 1);
    p->part_o = st->d_part_o;
    p->part_lse = st->d_part_lse;
    p->work = st->d_work;
    p->combine = st->d_combine;
    p->counts = st->d_counts;
    p->block_table = st->block_table;
    p->bt_stride = st->bt_stride;
    p->num_q_heads = (int)Hq;
    p->num_kv_heads = (int)sp->num_kv_heads;
    p->group = st->group;
    p->tpt = st->tpt;
    p->causal = ah_spec_causal(sp);
    p->cross = sp->attn_type == AH_ATTN_ENCODER_DECODER;
    p->window = (int)sp->sliding_window;
    p->scale = scale;
    p->scale_log2 = scale * 1.4426950408889634f;
    p->softcap = sp->softcap;
    p->v_scale = v_scale;
    p->sinks = sp->use_sinks ? (const float *)ah_dl_data(a->sinks) : NULL;
    p->alibi = sp->use_alibi ? (const float *)ah_dl_data(a->alibi_slopes) : NULL;
    /* Without the scratch every item's V is transposed in the kernel; graphs
     * never use it. */
    const int capturing = fa3_capturing(a->stream);
    if (st->vt_tiles && !capturing && fa3_vt_usable(st->ctx, a->stream)) {
        /* Flags of an older forward never equal this one's epoch; when the
         * counter wraps they are cleared (on this stream, before the launch). */
        ah_context *c = st->ctx;
        if (++c->vt_epoch == 0) {
            AH_CUDA_TRY(e, cudaMemsetAsync(c->vt_flags, 0, fa3_vt_flag_bytes(c->vt_bytes),
                                           (cudaStream_t)a->stream));
            c->vt_epoch = 1;
        }
        p->vt = c->vt_scratch;
        p->vt_flags = c->vt_flags;
        p->vt_epoch = c->vt_epoch;
    }
    L.stage_out = st->stage_out;

    char msg[256];
    int rc = fa3_launch_forward(&L, msg, sizeof msg);
    if (rc) {
        (void)cudaGetLastError();
        return ah_fail(e, AH_ERR_DEVICE, "%s", msg);
    }
    /* An eager plan without splits needs no combine: skip its launch (a few
     * microseconds of device time). Graphs always carry it, since a replay
     * may bring splits. */
    if (!st->n_combine && st->eager && !capturing) return AH_OK;
    rc = fa3_launch_combine(p, (int)DV, L.dtype, st->grid * 2, a->stream);
    if (rc) {
        (void)cudaGetLastError();
        return ah_fail(e, AH_ERR_DEVICE, "combine kernel launch: %s",
                       cudaGetErrorString((cudaError_t)rc));
    }
    return AH_OK;
}

ah_status fa3_write_kv(ah_state *st, const ah_kv_write_args *a)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *sp = &st->spec;
    AH_CUDA_TRY(e, fa3_use_device(st->ctx));
    if (st->ragged)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "write_kv on a ragged layer, which has no cache (its paged form's state "
                       "writes the cache)");
    const int64_t T = st->num_tokens, Hk = sp->num_kv_heads, D = sp->qk_head_size;
    ah_status s;
    if ((s = fa3_check_act(e, "key", a->key, T, Hk, D, sp->q_dtype)) != AH_OK ||
        (s = fa3_check_act(e, "value", a->value, T, Hk, D, sp->q_dtype)) != AH_OK)
        return s;
    fa3_kv_write w;
    memset(&w, 0, sizeof w);
    if ((s = fa3_check_cache(e, "key_cache", a->key_cache, sp, w.k_strides)) != AH_OK) return s;
    if ((s = fa3_check_cache(e, "value_cache", a->value_cache, sp, w.v_strides)) != AH_OK) return s;
    if (!st->slot_mapping)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "write_kv: the planned batch has no slot_mapping");
    w.key = ah_dl_data(a->key);
    w.value = ah_dl_data(a->value);
    w.k_tok_stride = ah_dl_stride(a->key, 0);
    w.k_head_stride = ah_dl_stride(a->key, 1);
    w.v_tok_stride = ah_dl_stride(a->value, 0);
    w.v_head_stride = ah_dl_stride(a->value, 1);
    w.k_cache = ah_dl_data(a->key_cache);
    w.v_cache = ah_dl_data(a->value_cache);
    w.slot_mapping = st->slot_mapping;
    w.num_tokens = (int)st->num_tokens;
    w.num_kv_heads = (int)Hk;
    w.head_dim = (int)D;
    w.block_size = (int)sp->block_size;
    w.src_dtype = fa3_dt(sp->q_dtype);
    w.cache_dtype = fa3_dt(sp->kv_dtype);
    w.k_scale = ah_kv_scale(a->k_scale, sp->kv_dtype);
    w.v_scale = ah_kv_scale(a->v_scale, sp->kv_dtype);
    const int scales23 = AH_HAS_FIELD(a, ah_kv_write_args, v_scale_tensor);
    int32_t head_stride;
    if ((s = fa3_kv_scale_tensors(e, sp, scales23 ? a->k_scale_tensor : NULL,
                                  scales23 ? a->v_scale_tensor : NULL, &w.k_scales, &w.v_scales,
                                  &head_stride)) != AH_OK)
        return s;
    w.scale_head_stride = head_stride;
    w.stream = a->stream;
    int rc = fa3_launch_write_kv(&w);
    if (rc) {
        (void)cudaGetLastError();
        return ah_fail(e, AH_ERR_DEVICE, "write_kv kernel launch: %s",
                       cudaGetErrorString((cudaError_t)rc));
    }
    return AH_OK;
}
