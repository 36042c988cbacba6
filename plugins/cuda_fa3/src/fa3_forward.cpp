/*
 * forward() and write_kv(): check the tensors against the layer spec and
 * the last plan, fill the kernel parameters and launch.
 * A bad tensor is refused with a message naming it, and nothing runs.
 */
#include <math.h>
#include <string.h>

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

/* A [T, H, D] activation: dtype, shape, unit channel stride, 16-byte rows. */
static ah_status fa3_check_act(ah_errbuf *e, const char *name, const DLTensor *t, int64_t T,
                               int64_t H, int64_t D, ah_dtype dt)
{
    if (!t) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    if (t->ndim != 3 || t->shape[0] != T || t->shape[1] != H || t->shape[2] != D)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s must be [%lld, %lld, %lld]", name,
                       (long long)T, (long long)H, (long long)D);
    if (!ah_dl_dtype_is(t, dt))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s must be %s", name, ah_dtype_name(dt));
    if (ah_dl_stride(t, 2) != 1 || ah_dl_stride(t, 1) % 8 || ah_dl_stride(t, 0) % 8 ||
        ((uintptr_t)ah_dl_data(t) & 15))
        return ah_fail(
            e, AH_ERR_INVALID_ARGUMENT,
            "%s needs unit channel stride, row strides of 8 elements and 16-byte alignment", name);
    if (t->device.device_type != kDLCUDA)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s is not CUDA device memory", name);
    return AH_OK;
}

/* A cache tensor in the spec's layout; strides out: block, slot, head. */
static ah_status fa3_check_cache(ah_errbuf *e, const char *name, const DLTensor *t,
                                 const ah_layer_spec *sp, int64_t strides[3])
{
    if (!t) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    const int hnd = sp->kv_layout == AH_KV_LAYOUT_HND;
    const int64_t a = hnd ? sp->num_kv_heads : sp->block_size,
                  b = hnd ? sp->block_size : sp->num_kv_heads;
    if (t->ndim != 4 || t->shape[1] != a || t->shape[2] != b || t->shape[3] != sp->qk_head_size)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s must be [blocks, %lld, %lld, %u] (%s)", name,
                       (long long)a, (long long)b, sp->qk_head_size, hnd ? "HND" : "NHD");
    if (!ah_dl_dtype_is(t, sp->kv_dtype))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s must be %s", name,
                       ah_dtype_name(sp->kv_dtype));
    if (ah_dl_stride(t, 3) != 1 || ((uintptr_t)ah_dl_data(t) & 15))
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s needs unit channel stride and 16-byte alignment", name);
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

ah_status fa3_forward(ah_state *st, const ah_forward_args *a)
{
    ah_errbuf *e = &st->err;
    const ah_layer_spec *sp = &st->spec;
    if (!a) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "forward: args is NULL");
    if (!st->planned) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "forward: plan() has not run");
    AH_CUDA_TRY(e, fa3_use_device(st->ctx));
    const int64_t T = st->num_tokens, Hq = sp->num_q_heads, D = sp->qk_head_size;
    ah_status s;
    if (!a->q || a->q->ndim != 3 || a->q->shape[0] < T)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "q must be [>= %lld, %lld, %lld]", (long long)T,
                       (long long)Hq, (long long)D);
    const int64_t Tq = a->q->shape[0];
    if ((s = fa3_check_act(e, "q", a->q, Tq, Hq, D, sp->q_dtype)) != AH_OK) return s;
    if (!a->out || a->out->ndim != 3 || a->out->shape[0] < T)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "out must be [>= %lld, %lld, %lld]",
                       (long long)T, (long long)Hq, (long long)D);
    if ((s = fa3_check_act(e, "out", a->out, a->out->shape[0], Hq, D, sp->q_dtype)) != AH_OK)
        return s;
    fa3_fwd_launch L;
    memset(&L, 0, sizeof L);
    if ((s = fa3_check_cache(e, "key_cache", a->key_cache, sp, L.k_strides)) != AH_OK) return s;
    if ((s = fa3_check_cache(e, "value_cache", a->value_cache, sp, L.v_strides)) != AH_OK) return s;
    if (a->key_cache->shape[0] != a->value_cache->shape[0])
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "key_cache and value_cache hold different block counts");
    if (a->lse) {
        if (a->lse->ndim != 2 || a->lse->shape[0] < T || a->lse->shape[1] != Hq ||
            !ah_dl_dtype_is(a->lse, AH_DTYPE_FP32) || !ah_dl_is_contiguous(a->lse))
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "lse must be a contiguous float32 [>= %lld, %lld]", (long long)T,
                           (long long)Hq);
    }
    if (sp->use_sinks) {
        if (!a->sinks || a->sinks->ndim != 1 || a->sinks->shape[0] != Hq ||
            !ah_dl_dtype_is(a->sinks, AH_DTYPE_FP32))
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "sinks must be float32 [%lld]",
                           (long long)Hq);
    }
    const int kv8 = sp->kv_dtype == AH_DTYPE_FP8_E4M3;
    if (kv8 && ((s = fa3_check_fp8_strides(e, L.k_strides, L.v_strides)) != AH_OK)) return s;
    /* FP8 KV: real = stored * scale. k_scale folds into the softmax scale,
     * v_scale into the output normalisation; 16-bit caches ignore both. */
    const float k_scale = ah_kv_scale(a->k_scale, sp->kv_dtype);
    const float v_scale = ah_kv_scale(a->v_scale, sp->kv_dtype);
    const float scale = (sp->scale != 0.f ? sp->scale : 1.f / sqrtf((float)D)) * k_scale;

    L.head_dim = (int)D;
    L.dtype = fa3_dt(sp->q_dtype);
    L.kv_dtype = fa3_dt(sp->kv_dtype);
    L.fp8_compute = st->fp8_compute;
    L.q = ah_dl_data(a->q);
    L.q_tok_stride = ah_dl_stride(a->q, 0);
    L.q_head_stride = ah_dl_stride(a->q, 1);
    L.num_tokens = Tq;
    L.k_cache = ah_dl_data(a->key_cache);
    L.v_cache = ah_dl_data(a->value_cache);
    L.grid = st->grid;
    L.stream = a->stream;
    fa3_params *p = &L.p;
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
    p->block_size = (int)sp->block_size;
    const int BN = D == 256 ? 64 : 128;
    int R = 16;
    for (int c = BN; c >= 16; c /= 2)
        if ((int)sp->block_size % c == 0 && BN % c == 0) {
            R = c;
            break;
        }
    p->box_rows = R;
    p->kv_hnd = sp->kv_layout == AH_KV_LAYOUT_HND;
    p->num_blocks = (int)a->key_cache->shape[0];
    p->causal = ah_spec_causal(sp);
    p->cross = sp->attn_type == AH_ATTN_ENCODER_DECODER;
    p->window = (int)sp->sliding_window;
    p->scale = scale;
    p->scale_log2 = scale * 1.4426950408889634f;
    p->softcap = sp->softcap;
    p->v_scale = v_scale;
    p->sinks = sp->use_sinks ? (const float *)ah_dl_data(a->sinks) : NULL;
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
    rc = fa3_launch_combine(p, (int)D, L.dtype, st->grid * 2, a->stream);
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
    if (!a) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "write_kv: args is NULL");
    AH_CUDA_TRY(e, fa3_use_device(st->ctx));
    if (!st->planned) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "write_kv: plan() has not run");
    if (!a->key || !a->value || a->key->ndim != 3 || a->value->ndim != 3)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "write_kv: key and value must be [T, Hk, D]");
    const int64_t T = a->key->shape[0], Hk = sp->num_kv_heads, D = sp->qk_head_size;
    ah_status s;
    if ((s = fa3_check_act(e, "key", a->key, T, Hk, D, sp->q_dtype)) != AH_OK) return s;
    if ((s = fa3_check_act(e, "value", a->value, T, Hk, D, sp->q_dtype)) != AH_OK) return s;
    fa3_kv_write w;
    memset(&w, 0, sizeof w);
    if ((s = fa3_check_cache(e, "key_cache", a->key_cache, sp, w.k_strides)) != AH_OK) return s;
    if ((s = fa3_check_cache(e, "value_cache", a->value_cache, sp, w.v_strides)) != AH_OK) return s;
    if (!st->slot_mapping)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "write_kv: the planned batch has no slot_mapping");
    if (T < (int64_t)st->num_tokens)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "write_kv: key has %lld rows, the batch %u tokens", (long long)T,
                       st->num_tokens);
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
    w.stream = a->stream;
    int rc = fa3_launch_write_kv(&w);
    if (rc) {
        (void)cudaGetLastError();
        return ah_fail(e, AH_ERR_DEVICE, "write_kv kernel launch: %s",
                       cudaGetErrorString((cudaError_t)rc));
    }
    return AH_OK;
}
