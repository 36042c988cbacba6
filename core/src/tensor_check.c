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
#include <string.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>

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
 * instead of ==. align: bytes the data address must be a multiple of; 0
 * means 16 (what vector loads of token rows need). */
typedef struct want {
    const char *name;
    int ndim;
    int64_t shape[4];
    int dim0_min;
    ah_dtype dtype;
    packing pack;
    unsigned align;
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
    const unsigned align = w->align ? w->align : 16;
    if (addr % align)
        return fail(err, cap, "%s: data address %#" PRIxPTR " is not %u-byte aligned", w->name,
                    addr, align);
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

/* ---- FP8 scales (plugin.h, "FP8 scales") -------------------------------- */

/* 1 when the host may read t's values: plain or pinned host memory. */
static int host_readable(const DLTensor *t)
{
    return t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost;
}

/* One scale tensor of n float32 values: its form, then (where the host can
 * read them) every value finite and > 0. */
static ah_status check_scale_tensor(const DLTensor *t, const char *name, int64_t n,
                                    const DLDevice *dev, char *err, size_t cap)
{
    const want w = {name, 1, {n}, 0, AH_DTYPE_FP32, DENSE, 4};
    ah_status st = check_tensor(t, &w, dev, err, cap);
    if (st != AH_OK || !host_readable(t)) return st;
    const float *x = (const float *)((const char *)t->data + t->byte_offset);
    for (int64_t i = 0; i < n; i++)
        if (!(x[i] > 0) || !isfinite(x[i]))
            return fail(err, cap, "%s[%" PRId64 "] = %g: a scale must be finite and > 0", name, i,
                        (double)x[i]);
    return AH_OK;
}

/* One of K and V (or the query): the float and the tensor against the form
 * the spec declares. tensor_n: the tensor's length when the form takes a
 * tensor, 0 when it takes the float; optional: a tensor form whose tensor
 * may be NULL (MLA's V). */
static ah_status check_scale(const char *what, float x, const DLTensor *t, int64_t tensor_n,
                             int optional, const char *form, const DLDevice *dev, char *err,
                             size_t cap)
{
    if (!(x >= 0) || !isfinite(x))
        return fail(err, cap, "%s_scale = %g must be finite and >= 0", what, (double)x);
    char tname[32];
    snprintf(tname, sizeof tname, "%s_scale_tensor", what);
    if (!tensor_n) {
        if (t)
            return fail(err, cap,
                        "%s is set, but the layer's kv_scales is %s: pass %s_scale as a float (or "
                        "declare kv_scales = tensor or per_head in the model)",
                        tname, form, what);
        return AH_OK;
    }
    if (x != 0)
        return fail(err, cap,
                    "%s_scale = %g is set%s, but the layer's kv_scales = %s takes %s only (a "
                    "float32 [%" PRId64 "] tensor): pass %s_scale = 0",
                    what, (double)x, t ? " and so is the tensor" : "", form, tname, tensor_n, what);
    if (!t)
        return optional ? AH_OK
                        : fail(err, cap,
                               "%s is NULL: the layer's kv_scales = %s takes the scale as a "
                               "float32 [%" PRId64 "] tensor on the plugin's device",
                               tname, form, tensor_n);
    return check_scale_tensor(t, tname, tensor_n, dev, err, cap);
}

ah_status ah__check_scales(const ah_layer_spec *spec, const ah__scales *sc, const DLDevice *dev,
                           char *err, size_t cap)
{
    const ah_kv_scales form = ah_spec_kv_scales(spec);
    const char *fname = ah_kv_scales_str(form);
    const int64_t n = form == AH_KV_SCALES_PER_HEAD ? (int64_t)spec->num_kv_heads
                      : form == AH_KV_SCALES_TENSOR ? 1
                                                    : 0;
    ah_status st = check_scale("k", sc->k, sc->kt, n, 0, fname, dev, err, cap);
    if (st == AH_OK) st = check_scale("v", sc->v, sc->vt, n, spec->use_mla, fname, dev, err, cap);
    if (st != AH_OK || !sc->has_q) return st;
    if (!ah_spec_q_scale(spec)) {
        if (sc->q != 0 || sc->qt)
            return fail(err, cap,
                        "%s is set, but the layer takes no query scale (q_scale = false in the "
                        "model): pass 0 / NULL, or declare q_scale = true",
                        sc->qt ? "q_scale_tensor" : "q_scale");
        return AH_OK;
    }
    if (!n && !(sc->q > 0))
        return fail(err, cap,
                    "q_scale = %g: the layer has q_scale = true and kv_scales = host, so the query "
                    "scale is a finite float > 0",
                    (double)sc->q);
    return check_scale("q", sc->q, sc->qt, n ? 1 : 0, 0, fname, dev, err, cap);
}

/* The cache tensors' expectations for a spec. */
static void cache_wants(const ah_layer_spec *s, const ah_batch *b, want *k, want *v)
{
    const int hnd = s->kv_layout == AH_KV_LAYOUT_HND;
    const int64_t d1 = hnd ? s->num_kv_heads : s->block_size,
                  d2 = hnd ? s->block_size : s->num_kv_heads;
    *k = (want){"key_cache", 4, {b->num_blocks, d1, d2, s->qk_head_size}, 1, s->kv_dtype, DENSE, 0};
    *v =
        (want){"value_cache", 4, {b->num_blocks, d1, d2, s->v_head_size}, 1, s->kv_dtype, DENSE, 0};
}

static ah_status check_new_kv(const ah_layer_spec *s, const ah_batch *b, const DLTensor *key,
                              const DLTensor *value, const DLDevice *dev, char *err, size_t cap)
{
    /* a ragged layer's keys are cu_seqlens_k's rows, not the queries' */
    const int64_t rows = ah_spec_ragged(s) ? b->num_k_tokens : b->num_tokens;
    const want wk = {"key",    3, {rows, s->num_kv_heads, s->qk_head_size}, 0, s->q_dtype,
                     LAST_DIM, 0};
    const want wv = {"value",  3, {rows, s->num_kv_heads, s->v_head_size}, 0, s->q_dtype,
                     LAST_DIM, 0};
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
    const want wq = {"q", 3, {T, hq, spec->qk_head_size}, 0, spec->q_dtype, LAST_DIM, 0};
    ah_status st = check_tensor(a->q, &wq, dev, err, cap);
    if (st != AH_OK) return st;
    const int ragged = ah_spec_ragged(spec), cacheless = ah_spec_cacheless(spec) || ragged;
    if (spec->attn_type == AH_ATTN_ENCODER_DECODER && (a->key || a->value))
        return fail(err, cap,
                    "%s is set, but a cross-attention (encoder_decoder) layer's cache "
                    "holds the encoder's K/V, written by ah_binding_write_kv on the "
                    "encoder pass; forward never writes it (pass NULL)",
                    a->key ? "key" : "value");
    if (ragged && (!a->key || !a->value))
        return fail(err, cap,
                    "%s is NULL: a ragged step attends over the keys and values given in "
                    "forward, packed by the batch's cu_seqlens_k ([num_k_tokens = %" PRIu32
                    ", %" PRIu32 ", head size])",
                    a->key ? "value" : "key", batch->num_k_tokens, spec->num_kv_heads);
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
        const want wo = {"out", 3, {T, hq, spec->v_head_size}, 0, spec->q_dtype, LAST_DIM, 0};
        st = check_tensor(a->out, &wo, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (a->lse) {
        const want wl = {"lse", 2, {T, hq}, 0, AH_DTYPE_FP32, DENSE, 0};
        st = check_tensor(a->lse, &wl, dev, err, cap);
        if (st != AH_OK) return st;
    }
    const want wh = {"sinks", 1, {hq}, 0, AH_DTYPE_FP32, DENSE, 0};
    if (spec->use_sinks && (st = check_tensor(a->sinks, &wh, dev, err, cap)) != AH_OK) return st;
    const want wa = {"alibi_slopes", 1, {hq}, 0, AH_DTYPE_FP32, DENSE, 0};
    if (spec->use_alibi && (st = check_tensor(a->alibi_slopes, &wa, dev, err, cap)) != AH_OK)
        return st;
    const ah__scales sc = {a->k_scale,        a->v_scale,        a->q_scale, a->k_scale_tensor,
                           a->v_scale_tensor, a->q_scale_tensor, 1};
    return ah__check_scales(spec, &sc, dev, err, cap);
}

ah_status ah__check_kv_write_args(const ah_layer_spec *spec, const ah_batch *batch,
                                  const ah_kv_write_args *a, const DLDevice *dev, char *err,
                                  size_t cap)
{
    if (!a) return fail(err, cap, "write_kv args are NULL");
    if (a->struct_size < sizeof(ah_kv_write_args))
        return fail(err, cap, "write_kv args: struct_size %" PRIu32 " < %zu", a->struct_size,
                    sizeof(ah_kv_write_args));
    if (ah_spec_cacheless(spec) || ah_spec_ragged(spec))
        return fail(err, cap, "write_kv on a %s layer: it has no KV cache",
                    ah_spec_ragged(spec) ? "ragged" : ah_attn_type_str(spec->attn_type));
    ah_status st = check_new_kv(spec, batch, a->key, a->value, dev, err, cap);
    if (st == AH_OK) st = check_caches(spec, batch, a->key_cache, a->value_cache, dev, err, cap);
    const ah__scales sc = {a->k_scale,        a->v_scale, 0, a->k_scale_tensor,
                           a->v_scale_tensor, NULL,       0};
    if (st == AH_OK) st = ah__check_scales(spec, &sc, dev, err, cap);
    return st;
}

/* src (src_size bytes of a struct whose current size is full) into dst,
 * zero-extended, with struct_size the current size. */
static void zero_extend(void *dst, size_t full, const void *src, uint32_t src_size)
{
    memset(dst, 0, full);
    memcpy(dst, src, src_size < full ? src_size : full);
    *(uint32_t *)dst = (uint32_t)full;
}

int ah__forward_args_full(const ah_forward_args *a, ah_forward_args *full)
{
    if (!a || a->struct_size < AH__FORWARD_ARGS_MIN) return 0;
    zero_extend(full, sizeof *full, a, a->struct_size);
    return 1;
}

int ah__kv_write_args_full(const ah_kv_write_args *a, ah_kv_write_args *full)
{
    if (!a || a->struct_size < AH__KV_WRITE_ARGS_MIN) return 0;
    zero_extend(full, sizeof *full, a, a->struct_size);
    return 1;
}
