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
 * device and the alignment. */
static ah_status check_tensor(const DLTensor *t, const ah_dl_want *w, const DLDevice *dev,
                              char *err, size_t cap)
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
    if (addr % 16)
        return fail(err, cap, "%s: data address %#" PRIxPTR " is not 16-byte aligned", name, addr);
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

/* The cache tensors' expectations for a spec. */
static void cache_wants(const ah_layer_spec *s, const ah_batch *b, ah_dl_want *k, ah_dl_want *v)
{
    *k = ah_dl_cache_want("key_cache", s, b->num_blocks, s->qk_head_size);
    *v = ah_dl_cache_want("value_cache", s, b->num_blocks, s->v_head_size);
}

static ah_status check_new_kv(const ah_layer_spec *s, const ah_batch *b, const DLTensor *key,
                              const DLTensor *value, const DLDevice *dev, char *err, size_t cap)
{
    const ah_dl_want wk = {"key", 3,          {b->num_tokens, s->num_kv_heads, s->qk_head_size},
                           0,     s->q_dtype, 0};
    const ah_dl_want wv = {"value", 3,          {b->num_tokens, s->num_kv_heads, s->v_head_size},
                           0,       s->q_dtype, 0};
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
    const ah_dl_want wq = {"q", 3, {T, hq, spec->qk_head_size}, 0, spec->q_dtype, 0};
    ah_status st = check_tensor(a->q, &wq, dev, err, cap);
    if (st != AH_OK) return st;
    const int cacheless = ah_spec_cacheless(spec);
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
        const ah_dl_want wo = {"out", 3, {T, hq, spec->v_head_size}, 0, spec->q_dtype, 0};
        st = check_tensor(a->out, &wo, dev, err, cap);
        if (st != AH_OK) return st;
    }
    if (a->lse) {
        const ah_dl_want wl = {"lse", 2, {T, hq}, 0, AH_DTYPE_FP32, 1};
        st = check_tensor(a->lse, &wl, dev, err, cap);
        if (st != AH_OK) return st;
    }
    const ah_dl_want wh = {"sinks", 1, {hq}, 0, AH_DTYPE_FP32, 1};
    if (spec->use_sinks && (st = check_tensor(a->sinks, &wh, dev, err, cap)) != AH_OK) return st;
    const ah_dl_want wa = {"alibi_slopes", 1, {hq}, 0, AH_DTYPE_FP32, 1};
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
    ah_status st = check_new_kv(spec, batch, a->key, a->value, dev, err, cap);
    if (st == AH_OK) st = check_caches(spec, batch, a->key_cache, a->value_cache, dev, err, cap);
    if (st == AH_OK) st = check_scales(a->k_scale, a->v_scale, err, cap);
    return st;
}
