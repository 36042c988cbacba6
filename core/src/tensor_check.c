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

/* What a kernel addresses (ah_dl_check, the plugins' own check), then the
 * device and the alignment: align bytes (0: 16, what vector loads of token
 * rows need). */
static ah_status check_aligned(const DLTensor *t, const ah_dl_want *w, unsigned align,
                               const DLDevice *dev, char *err, size_t cap)
{
    ah_errbuf e;
    if (ah_dl_check(t, w, &e) != AH_OK) return fail(err, cap, "%s", e.msg);
    const char *name = w->name;
    if (dev && ((int)t->device.device_type != (int)dev->device_type ||
                t->device.device_id != dev->device_id))
        return fail(err, cap, "%s: on %s:%d, expected %s:%d (the plugin's device)", name,
                    dl_device_name((int)t->device.device_type), t->device.device_id,
                    dl_device_name((int)dev->device_type), dev->device_id);
    uintptr_t addr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    if (!align) align = 16;
    if (addr % align)
        return fail(err, cap, "%s: data address %#" PRIxPTR " is not %u-byte aligned", name, addr,
                    align);
    return AH_OK;
}

static ah_status check_tensor(const DLTensor *t, const ah_dl_want *w, const DLDevice *dev,
                              char *err, size_t cap)
{
    return check_aligned(t, w, 16, dev, err, cap);
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
    const ah_dl_want w = {name, 1, {n}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
    ah_status st = check_aligned(t, &w, 4, dev, err, cap);
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

/* The cache tensors' expectations for a spec: dense ones, or the views of
 * an interleaved layout (ABI 2.3), strides and all (ah_dl_cache_want). */
static void cache_wants(const ah_layer_spec *s, const ah_batch *b, ah_dl_want *k, ah_dl_want *v)
{
    *k = ah_dl_cache_want("key_cache", s, b->num_blocks, s->qk_head_size);
    *v = ah_dl_cache_want("value_cache", s, b->num_blocks, s->v_head_size);
}

/* The two views of an interleaved cache, beyond what each view's own check
 * covers: one block count, and the value view where its layout puts it in
 * the key view's allocation. */
static ah_status check_interleaved(const ah_layer_spec *s, const DLTensor *kc, const DLTensor *vc,
                                   char *err, size_t cap)
{
    ah__kv_geom g;
    ah__kv_geom_of(s, kc->shape[0], s->qk_head_size, 1, &g);
    const char *layout = ah_kv_layout_str(s->kv_layout);
    char whole[96];
    ah_dl_fmt_dims(whole, sizeof whole, g.alloc_shape, g.alloc_ndim, 0);
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
    /* a ragged layer's keys are cu_seqlens_k's rows, not the queries' */
    const int64_t rows = ah_spec_ragged(s) ? b->num_k_tokens : b->num_tokens;
    const ah_dl_want wk = {
        "key", 3, {rows, s->num_kv_heads, s->qk_head_size}, 0, s->q_dtype, 0, AH_KV_LAYOUT_AUTO};
    const ah_dl_want wv = {
        "value", 3, {rows, s->num_kv_heads, s->v_head_size}, 0, s->q_dtype, 0, AH_KV_LAYOUT_AUTO};
    ah_status st = check_tensor(key, &wk, dev, err, cap);
    if (st == AH_OK && !s->use_mla) st = check_tensor(value, &wv, dev, err, cap);
    return st;
}

static ah_status check_caches(const ah_layer_spec *s, const ah_batch *b, const DLTensor *kc,
                              const DLTensor *vc, const DLDevice *dev, char *err, size_t cap)
{
    ah_dl_want wk, wv;
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
    const ah_dl_want wq = {
        "q", 3, {T, hq, spec->qk_head_size}, 0, spec->q_dtype, 0, AH_KV_LAYOUT_AUTO};
    ah_status st = check_tensor(a->q, &wq, dev, err, cap);
    if (st != AH_OK) return st;
    const int ragged = ah_spec_ragged(spec), cacheless = ah_spec_cacheless(spec) || ragged;
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
        const ah_dl_want wo = {"out",         3, {T, hq, spec->v_head_size}, 0,
                               spec->q_dtype, 0, AH_KV_LAYOUT_AUTO};
        st = check_tensor(a->out, &wo, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (a->lse) {
        const ah_dl_want wl = {"lse", 2, {T, hq}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
        st = check_tensor(a->lse, &wl, dev, err, cap);
        if (st != AH_OK) return st;
    }
    const ah_dl_want wh = {"sinks", 1, {hq}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
    if (spec->use_sinks && (st = check_tensor(a->sinks, &wh, dev, err, cap)) != AH_OK) return st;
    const ah_dl_want wa = {"alibi_slopes", 1, {hq}, 0, AH_DTYPE_FP32, 1, AH_KV_LAYOUT_AUTO};
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
