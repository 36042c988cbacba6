/*
 * Tensor checks (see tensor_check.h for the rules). One routine checks one
 * tensor against an expected rank, shape, dtype, device and packing; the
 * two entry points list what forward and write_kv expect from the spec.
 */
#include "tensor_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>

#include "kv_layout.h"

static ah_status fail(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ah_status fail(char *err, size_t cap, const char *fmt, ...)
{
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return AH_ERR_INVALID_ARGUMENT;
}

typedef enum packing {
    LAST_DIM = 0, /* innermost stride 1; outer dims may be views */
    DENSE = 1     /* row-major, no gaps */
} packing;

/* What one tensor must look like. dim0_min: shape[0] >= shape[0] wanted
 * instead of ==. */
typedef struct want {
    const char *name;
    int ndim;
    int64_t shape[4];
    int dim0_min;
    ah_dtype dtype;
    packing pack;
} want;

static void fmt_dims(char *buf, size_t cap, const int64_t *d, int n, int dim0_min)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s%" PRId64, i ? ", " : "",
                                 i == 0 && dim0_min ? ">= " : "", d[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

static const char *dl_code_name(uint8_t code)
{
    switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    default: return "code";
    }
}

static const char *dl_device_name(int type)
{
    switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLROCM: return "rocm";
    case 14: return "oneapi"; /* kDLOneAPI, newer than DLPack 0.6 */
    default: return "device";
    }
}

static ah_status check_tensor(const DLTensor *t, const want *w, const DLDevice *dev, char *err,
                              size_t cap)
{
    char got[96], exp[96];
    if (!t) return fail(err, cap, "%s is NULL", w->name);
    if (t->ndim != w->ndim || !t->shape) {
        fmt_dims(exp, sizeof exp, w->shape, w->ndim, w->dim0_min);
        return fail(err, cap, "%s: %d dims, expected %d %s", w->name, t->ndim, w->ndim, exp);
    }
    int bad = 0;
    for (int i = 0; i < w->ndim; i++)
        if (i == 0 && w->dim0_min ? t->shape[0] < w->shape[0] : t->shape[i] != w->shape[i]) bad = 1;
    if (bad) {
        fmt_dims(got, sizeof got, t->shape, t->ndim, 0);
        fmt_dims(exp, sizeof exp, w->shape, w->ndim, w->dim0_min);
        return fail(err, cap, "%s: shape %s, expected %s", w->name, got, exp);
    }
    if (!ah_dl_dtype_is(t, w->dtype)) {
        DLDataType d = ah_dtype_to_dl(w->dtype);
        return fail(err, cap, "%s: dtype %s%u (lanes %u), expected %s%u for %s", w->name,
                    dl_code_name(t->dtype.code), t->dtype.bits, t->dtype.lanes,
                    dl_code_name(d.code), d.bits, ah_dtype_name(w->dtype));
    }
    if (dev && ((int)t->device.device_type != (int)dev->device_type ||
                t->device.device_id != dev->device_id))
        return fail(err, cap, "%s: on %s:%d, expected %s:%d (the plugin's device)", w->name,
                    dl_device_name((int)t->device.device_type), t->device.device_id,
                    dl_device_name((int)dev->device_type), dev->device_id);
    if (!t->data) return fail(err, cap, "%s: data is NULL", w->name);
    uintptr_t addr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    if (addr % 16)
        return fail(err, cap, "%s: data address %#" PRIxPTR " is not 16-byte aligned", w->name,
                    addr);
    if (w->pack == DENSE && !ah_dl_is_contiguous(t)) {
        fmt_dims(got, sizeof got, t->strides, t->ndim, 0);
        return fail(err, cap, "%s: strides %s, expected a densely packed tensor", w->name, got);
    }
    int last = t->ndim - 1;
    if (t->strides && t->shape[last] != 1 && t->strides[last] != 1)
        return fail(err, cap, "%s: last dimension has stride %" PRId64 ", expected 1", w->name,
                    t->strides[last]);
    return AH_OK;
}

static ah_status check_scales(float k, float v, char *err, size_t cap)
{
    if (!(k >= 0) || !isfinite(k))
        return fail(err, cap, "k_scale = %g must be finite and >= 0", (double)k);
    if (!(v >= 0) || !isfinite(v))
        return fail(err, cap, "v_scale = %g must be finite and >= 0", (double)v);
    return AH_OK;
}

/* The cache tensors' expectations for a spec: dense ones are checked as
 * such; the views of an interleaved layout (ABI 2.3) by their strides. */
static void cache_wants(const ah_layer_spec *s, const ah_batch *b, want *k, want *v)
{
    ah__kv_geom g;
    const packing pack = ah_kv_layout_is_interleaved(s->kv_layout) ? LAST_DIM : DENSE;
    ah__kv_geom_of(s, b->num_blocks, s->qk_head_size, 0, &g);
    *k = (want){"key_cache", 4,           {g.shape[0], g.shape[1], g.shape[2], g.shape[3]},
                1,           s->kv_dtype, pack};
    ah__kv_geom_of(s, b->num_blocks, s->v_head_size, 1, &g);
    *v = (want){"value_cache", 4,   {g.shape[0], g.shape[1], g.shape[2], g.shape[3]}, 1,
                s->kv_dtype,   pack};
}

/* The two views of an interleaved cache: the strides of views of one
 * [nb, 2, ...] tensor, one block count, and the value view where its
 * layout puts it in the key view's allocation. */
static ah_status check_interleaved(const ah_layer_spec *s, const DLTensor *kc, const DLTensor *vc,
                                   char *err, size_t cap)
{
    ah__kv_geom g;
    ah__kv_geom_of(s, kc->shape[0], s->qk_head_size, 1, &g);
    const char *layout = ah_kv_layout_str(s->kv_layout);
    char got[96], exp[96], whole[96];
    fmt_dims(exp, sizeof exp, g.strides, 4, 0);
    fmt_dims(whole, sizeof whole, g.alloc_shape, g.alloc_ndim, 0);
    const DLTensor *t[2] = {kc, vc};
    const char *name[2] = {"key_cache", "value_cache"};
    for (int i = 0; i < 2; i++) {
        int bad = !t[i]->strides;
        for (int d = 0; d < 4 && !bad; d++)
            bad = t[i]->shape[d] != 1 && t[i]->strides[d] != g.strides[d];
        if (bad) {
            if (t[i]->strides) fmt_dims(got, sizeof got, t[i]->strides, 4, 0);
            else snprintf(got, sizeof got, "NULL (dense)");
            return fail(err, cap,
                        "%s: strides %s, expected %s: layout %s hands over K = cache[:, 0] and "
                        "V = cache[:, 1] of one %s tensor",
                        name[i], got, exp, layout, whole);
        }
    }
    if (vc->shape[0] != kc->shape[0])
        return fail(err, cap,
                    "value_cache: %" PRId64 " blocks, key_cache %" PRId64
                    ": layout %s keeps both in one %s tensor",
                    vc->shape[0], kc->shape[0], layout, whole);
    const size_t esz = ah_dtype_size(s->kv_dtype);
    const uintptr_t ka = (uintptr_t)kc->data + (uintptr_t)kc->byte_offset,
                    va = (uintptr_t)vc->data + (uintptr_t)vc->byte_offset,
                    want_va = ka + (uintptr_t)g.offset * esz;
    if (va != want_va)
        return fail(err, cap,
                    "value_cache: address %#" PRIxPTR " (data + byte_offset), expected %#" PRIxPTR
                    ", key_cache's + %" PRId64 " bytes: layout %s puts V = cache[:, 1] in the "
                    "key's %s tensor",
                    va, want_va, g.offset * (int64_t)esz, layout, whole);
    return AH_OK;
}

static ah_status check_new_kv(const ah_layer_spec *s, const ah_batch *b, const DLTensor *key,
                              const DLTensor *value, const DLDevice *dev, char *err, size_t cap)
{
    const want wk = {"key", 3,          {b->num_tokens, s->num_kv_heads, s->qk_head_size},
                     0,     s->q_dtype, LAST_DIM};
    const want wv = {"value", 3,          {b->num_tokens, s->num_kv_heads, s->v_head_size},
                     0,       s->q_dtype, LAST_DIM};
    ah_status st = check_tensor(key, &wk, dev, err, cap);
    if (st == AH_OK && !s->use_mla) st = check_tensor(value, &wv, dev, err, cap);
    return st;
}

static ah_status check_caches(const ah_layer_spec *s, const ah_batch *b, const DLTensor *kc,
                              const DLTensor *vc, const DLDevice *dev, char *err, size_t cap)
{
    want wk, wv;
    cache_wants(s, b, &wk, &wv);
    ah_status st = check_tensor(kc, &wk, dev, err, cap);
    if (st == AH_OK && !s->use_mla) st = check_tensor(vc, &wv, dev, err, cap);
    if (st == AH_OK && ah_kv_layout_is_interleaved(s->kv_layout))
        st = check_interleaved(s, kc, vc, err, cap);
    return st;
}

ah_status ah__check_forward_args(const ah_layer_spec *spec, const ah_batch *batch,
                                 const ah_forward_args *a, const DLDevice *dev, char *err,
                                 size_t cap)
{
    if (!a) return fail(err, cap, "forward args are NULL");
    if (a->struct_size < sizeof(ah_forward_args))
        return fail(err, cap, "forward args: struct_size %" PRIu32 " < %zu", a->struct_size,
                    sizeof(ah_forward_args));
    const uint32_t T = batch->num_tokens, hq = spec->num_q_heads;
    const want wq = {"q", 3, {T, hq, spec->qk_head_size}, 0, spec->q_dtype, LAST_DIM};
    ah_status st = check_tensor(a->q, &wq, dev, err, cap);
    if (st != AH_OK) return st;
    const int cacheless = ah_spec_cacheless(spec);
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER && (a->key || a->value))
        return fail(err, cap,
                    "%s is set, but a cross-attention (encoder_decoder) layer's cache "
                    "holds the encoder's K/V, written by ah_binding_write_kv on the "
                    "encoder pass; forward never writes it (pass NULL)",
                    a->key ? "key" : "value");
    if (cacheless && !a->key)
        return fail(err, cap,
                    "key is NULL: a cacheless (%s) layer attends over the new keys "
                    "and values, packed like q",
                    ah_attn_type_str(spec->attn_type));
    if (a->key || a->value) {
        st = check_new_kv(spec, batch, a->key, a->value, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (!cacheless) {
        st = check_caches(spec, batch, a->key_cache, a->value_cache, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (!a->out)
        return fail(err, cap,
                    "out is NULL (pass a descriptor; a plugin that does not take "
                    "the caller's buffer fills it)");
    if (a->out->data) {
        const want wo = {"out", 3, {T, hq, spec->v_head_size}, 0, spec->q_dtype, LAST_DIM};
        st = check_tensor(a->out, &wo, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (a->lse) {
        const want wl = {"lse", 2, {T, hq}, 0, AH_DTYPE_FP32, DENSE};
        st = check_tensor(a->lse, &wl, dev, err, cap);
        if (st != AH_OK) return st;
    }
    const want wh = {"sinks", 1, {hq}, 0, AH_DTYPE_FP32, DENSE};
    if (spec->use_sinks && (st = check_tensor(a->sinks, &wh, dev, err, cap)) != AH_OK) return st;
    const want wa = {"alibi_slopes", 1, {hq}, 0, AH_DTYPE_FP32, DENSE};
    if (spec->use_alibi && (st = check_tensor(a->alibi_slopes, &wa, dev, err, cap)) != AH_OK)
        return st;
    return check_scales(a->k_scale, a->v_scale, err, cap);
}

ah_status ah__check_kv_write_args(const ah_layer_spec *spec, const ah_batch *batch,
                                  const ah_kv_write_args *a, const DLDevice *dev, char *err,
                                  size_t cap)
{
    if (!a) return fail(err, cap, "write_kv args are NULL");
    if (a->struct_size < sizeof(ah_kv_write_args))
        return fail(err, cap, "write_kv args: struct_size %" PRIu32 " < %zu", a->struct_size,
                    sizeof(ah_kv_write_args));
    if (ah_spec_cacheless(spec))
        return fail(err, cap, "write_kv on a cacheless (%s) layer: it has no KV cache",
                    ah_attn_type_str(spec->attn_type));
    ah_status st = check_new_kv(spec, batch, a->key, a->value, dev, err, cap);
    if (st == AH_OK) st = check_caches(spec, batch, a->key_cache, a->value_cache, dev, err, cap);
    if (st == AH_OK) st = check_scales(a->k_scale, a->v_scale, err, cap);
    return st;
}
