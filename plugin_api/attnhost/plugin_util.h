/*
 * Small, header-only helpers for plugin authors: a per-handle error buffer,
 * scalar conversions for the ABI's element types (the host's reference
 * oracle uses the same ones, so a plugin and the oracle agree bit for bit on
 * what an FP8 byte means), and DLTensor checks.
 *
 * Nothing here is required; everything is static inline.
 */
#ifndef ATTNHOST_PLUGIN_UTIL_H
#define ATTNHOST_PLUGIN_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error buffer ------------------------------------------------------- */

typedef struct ah_errbuf {
    char msg[512];
} ah_errbuf;

/* Format into e and return status, so a failure is one line:
 *   return ah_fail(&st->err, AH_ERR_INVALID_ARGUMENT, "q has %d dims", n); */
static inline ah_status ah_fail(ah_errbuf *e, ah_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline ah_status ah_fail(ah_errbuf *e, ah_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return status;
}

/* A whole decimal integer in [lo, hi] (a config value): 1 and *out set, or
 * 0 for anything else (empty, trailing characters, out of range). */
static inline int ah_parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* Copy a string into a fixed field, truncating and terminating. */
static inline void ah_strlcpy(char *dst, const char *src, size_t cap)
{
    if (!cap) return;
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- element types ------------------------------------------------------ */

static inline const char *ah_dtype_name(ah_dtype t)
{
    static const char *const names[AH_DTYPE_COUNT] = {
        "auto", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz"};
    return (unsigned)t < AH_DTYPE_COUNT ? names[t] : "?";
}

/* As the model key kv_layout spells it ("?" out of range). */
static inline const char *ah_kv_layout_name(ah_kv_layout l)
{
    static const char *const names[AH_KV_LAYOUT_COUNT] = {"auto", "nhd", "hnd", "nhd_interleaved",
                                                          "hnd_interleaved"};
    return (unsigned)l < AH_KV_LAYOUT_COUNT ? names[l] : "?";
}

static inline size_t ah_dtype_size(ah_dtype t)
{
    switch (t) {
    case AH_DTYPE_FP32: return 4;
    case AH_DTYPE_FP16:
    case AH_DTYPE_BF16: return 2;
    case AH_DTYPE_FP8_E4M3:
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E4M3_FNUZ:
    case AH_DTYPE_FP8_E5M2_FNUZ: return 1;
    default: return 0;
    }
}

/* The DLPack dtype a tensor of element type t carries (FP8 travels as uint8). */
static inline DLDataType ah_dtype_to_dl(ah_dtype t)
{
    DLDataType d = {kDLFloat, 32, 1};
    switch (t) {
    case AH_DTYPE_FP16: d.bits = 16; break;
    case AH_DTYPE_BF16:
        d.code = kDLBfloat;
        d.bits = 16;
        break;
    case AH_DTYPE_FP8_E4M3:
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E4M3_FNUZ:
    case AH_DTYPE_FP8_E5M2_FNUZ:
        d.code = kDLUInt;
        d.bits = 8;
        break;
    default: break;
    }
    return d;
}

static inline float ah_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t ah_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ah_bf16_to_f32(uint16_t h) { return ah_bits_to_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t ah_f32_to_bf16(float f)
{
    uint32_t u = ah_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ah_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    if (exp == 31) return ah_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return ah_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, saturating to infinity like IEEE. */
static inline uint16_t ah_f32_to_f16(float f)
{
    uint32_t u = ah_f32_to_bits(f), sign = (u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (a != a) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) { /* subnormal: quantum 2^-24 */
        return (uint16_t)(sign | (uint16_t)nearbyintf(a * 16777216.0f));
    }
    uint32_t au = u & 0x7fffffffu;
    uint32_t r = au + 0xfffu + ((au >> 13) & 1u);
    return (uint16_t)(sign | ((r - (112u << 23)) >> 13));
}

/* FP8 E4M3 (OCP "fn": no infinities, 0x7f/0xff are NaN, max 448). */
static inline float ah_fp8e4m3_to_f32(uint8_t b)
{
    uint32_t sign = b >> 7, exp = (b >> 3) & 0xfu, man = b & 7u;
    float v;
    if (exp == 15 && man == 7) return NAN;
    if (exp == 0) v = ldexpf((float)man, -9);
    else v = ldexpf((float)(8 + man), (int)exp - 10);
    return sign ? -v : v;
}

/* FP8 E5M2 (IEEE-like: infinities and NaNs, max 57344). */
static inline float ah_fp8e5m2_to_f32(uint8_t b) { return ah_f16_to_f32((uint16_t)(b << 8)); }

/* FP8 E4M3FNUZ (AMD MI300: bias 8, no infinities, no negative zero, 0x80
 * the only NaN, max 240). */
static inline float ah_fp8e4m3fnuz_to_f32(uint8_t b)
{
    uint32_t exp = (b >> 3) & 0xfu, man = b & 7u;
    float v;
    if (b == 0x80) return NAN;
    if (exp == 0) v = ldexpf((float)man, -10);
    else v = ldexpf((float)(8 + man), (int)exp - 11);
    return b & 0x80 ? -v : v;
}

/* FP8 E5M2FNUZ (AMD MI300: bias 16, no infinities, no negative zero, 0x80
 * the only NaN, max 57344). */
static inline float ah_fp8e5m2fnuz_to_f32(uint8_t b)
{
    uint32_t exp = (b >> 2) & 0x1fu, man = b & 3u;
    float v;
    if (b == 0x80) return NAN;
    if (exp == 0) v = ldexpf((float)man, -17);
    else v = ldexpf((float)(4 + man), (int)exp - 18);
    return b & 0x80 ? -v : v;
}

/* Encode a float into an FP8 format (any of the four) by nearest-even,
 * saturating to the largest finite value (what every FP8 KV-cache writer
 * does; infinities saturate too); NaN gives the format's NaN. Normal
 * results round on the exponent-and-mantissa bits as one integer, so a
 * carry moves into the exponent; below the smallest normal the quantum is
 * the subnormals' fixed one. A fnuz format has no negative zero (its 0x80
 * is the NaN), so a negative value that rounds to zero stores 0x00. */
static inline uint8_t ah_f32_to_fp8(float f, ah_dtype t)
{
    const int e4 = t == AH_DTYPE_FP8_E4M3 || t == AH_DTYPE_FP8_E4M3_FNUZ;
    const int fnuz = t == AH_DTYPE_FP8_E4M3_FNUZ || t == AH_DTYPE_FP8_E5M2_FNUZ;
    const uint32_t man_bits = e4 ? 3 : 2, bias = (e4 ? 7 : 15) + (uint32_t)fnuz;
    const uint32_t shift = 23 - man_bits;
    /* 448, 57344; fnuz: 240, 57344 (every exponent is finite there) */
    const uint32_t max_code = fnuz ? 0x7f : e4 ? 0x7e : 0x7b;
    const uint32_t u = ah_f32_to_bits(f), au = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (au > 0x7f800000u) return fnuz ? 0x80 : e4 ? 0x7f : 0x7e;
    if (au < (128u - bias) << 23) { /* below 2^(1 - bias): multiples of 2^(1 - bias - man_bits) */
        const uint8_t m =
            (uint8_t)nearbyintf(ldexpf(ah_bits_to_f32(au), (int)(bias - 1u + man_bits)));
        return fnuz && m == 0 ? 0 : (uint8_t)(sign | m);
    }
    uint32_t r = (au + (1u << (shift - 1)) - 1u + ((au >> shift) & 1u)) >> shift;
    r -= (127u - bias) << man_bits;
    return (uint8_t)(sign | (r > max_code ? max_code : r));
}

/* True for the 8-bit KV-cache formats. */
static inline int ah_dtype_is_fp8(ah_dtype t)
{
    return t == AH_DTYPE_FP8_E4M3 || t == AH_DTYPE_FP8_E5M2 || t == AH_DTYPE_FP8_E4M3_FNUZ ||
           t == AH_DTYPE_FP8_E5M2_FNUZ;
}

/* True for the fnuz FP8 formats (AMD MI300's). */
static inline int ah_dtype_is_fnuz(ah_dtype t)
{
    return t == AH_DTYPE_FP8_E4M3_FNUZ || t == AH_DTYPE_FP8_E5M2_FNUZ;
}

/* The largest finite value of an FP8 format (0 for any other type): what
 * a store saturates to. */
static inline float ah_fp8_max(ah_dtype t)
{
    switch (t) {
    case AH_DTYPE_FP8_E4M3: return 448.0f;
    case AH_DTYPE_FP8_E4M3_FNUZ: return 240.0f;
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E5M2_FNUZ: return 57344.0f;
    default: return 0.0f;
    }
}

/* The factor an FP8 cache's values are multiplied by (real = stored *
 * scale): the forward's k_scale or v_scale, where 0 means 1, and 1 for a
 * cache that is not FP8. The host has checked the scale is finite and
 * >= 0 (unless validation is off). */
static inline float ah_kv_scale(float scale, ah_dtype kv_dtype)
{
    return ah_dtype_is_fp8(kv_dtype) && scale != 0.0f ? scale : 1.0f;
}

/* The softmax scale of a layer: spec->scale, or 1/sqrt(qk_head_size) when
 * it is 0. The host resolves the spec with this before state_create, so a
 * bound plugin always sees the scale filled in; a plugin reads it through
 * here all the same, so that a driver that skips the host gets the same
 * value. */
static inline float ah_spec_scale(const ah_layer_spec *s)
{
    return s->scale != 0.0f ? s->scale : (float)(1.0 / sqrt((double)s->qk_head_size));
}

/* A spec against the plugin's own caps: the sets and ranges a host-selected
 * spec always meets, checked again at state_create because a plugin may
 * be driven without the host (its own test drivers, a validation-off
 * engine). Returns AH_OK, or AH_ERR_ABI / AH_ERR_UNSUPPORTED with the field
 * and value in e. Rules that span fields stay in the plugin. */
static inline ah_status ah_spec_check_caps(const ah_layer_spec *s, const ah_caps *c, ah_errbuf *e)
{
    if (!s || !AH_HAS_FIELD(s, ah_layer_spec, use_alibi))
        return ah_fail(e, AH_ERR_ABI, "layer spec is missing or too old");
    if ((unsigned)s->q_dtype >= AH_DTYPE_COUNT || !(c->q_dtypes & AH_BIT(s->q_dtype)))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "query dtype %s is not served",
                       ah_dtype_name(s->q_dtype));
    if ((unsigned)s->kv_dtype >= AH_DTYPE_COUNT || !(c->kv_dtypes & AH_BIT(s->kv_dtype)))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "KV dtype %s is not served",
                       ah_dtype_name(s->kv_dtype));
    if (!ah_int_set_contains(&c->qk_head_sizes, s->qk_head_size) ||
        !ah_int_set_contains(&c->v_head_sizes, s->v_head_size))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "head sizes qk %u / v %u are not served",
                       s->qk_head_size, s->v_head_size);
    if (!ah_int_set_contains(&c->block_sizes, s->block_size))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "block size %u is not served", s->block_size);
    if ((unsigned)s->kv_layout >= AH_KV_LAYOUT_COUNT || !(c->kv_layouts & AH_BIT(s->kv_layout)))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "KV layout %d is not served", (int)s->kv_layout);
    if ((unsigned)s->attn_type >= AH_ATTN_TYPE_COUNT || !(c->attn_types & AH_BIT(s->attn_type)))
        return ah_fail(e, AH_ERR_UNSUPPORTED, "attention type %d is not served", (int)s->attn_type);
    if (s->num_kv_heads == 0 || s->num_q_heads == 0 || s->num_q_heads % s->num_kv_heads)
        return ah_fail(e, AH_ERR_UNSUPPORTED, "%u query heads do not divide into %u KV heads",
                       s->num_q_heads, s->num_kv_heads);
    return AH_OK;
}

/* A sink that keeps the first reason, as "field = value: want supported". */
typedef struct ah_first_reason {
    ah_reason_sink sink;
    ah_errbuf *e;
    int n;
} ah_first_reason;

static inline void ah_first_reason_add(ah_reason_sink *sink, ah_reason_code code, const char *field,
                                       const char *value, const char *supported)
{
    ah_first_reason *f = (ah_first_reason *)sink;
    (void)code;
    if (f->n++ == 0) ah_fail(f->e, AH_ERR_UNSUPPORTED, "%s = %s: want %s", field, value, supported);
}

/* The caps' check_combination (its rules across fields) on s, for
 * state_create, so a plugin states each such rule once. Returns AH_OK, or
 * AH_ERR_UNSUPPORTED with the first broken rule in e. */
static inline ah_status ah_spec_check_combination(const ah_layer_spec *s, const ah_caps *c,
                                                  ah_errbuf *e)
{
    ah_first_reason f = {{sizeof(ah_reason_sink), ah_first_reason_add, NULL}, e, 0};
    if (c->check_combination) c->check_combination(s, NULL, &f.sink);
    return f.n ? AH_ERR_UNSUPPORTED : AH_OK;
}

/* Load element i of a buffer of type t as float. */
static inline float ah_load_f32(const void *base, size_t i, ah_dtype t)
{
    switch (t) {
    case AH_DTYPE_FP32: return ((const float *)base)[i];
    case AH_DTYPE_FP16: return ah_f16_to_f32(((const uint16_t *)base)[i]);
    case AH_DTYPE_BF16: return ah_bf16_to_f32(((const uint16_t *)base)[i]);
    case AH_DTYPE_FP8_E4M3: return ah_fp8e4m3_to_f32(((const uint8_t *)base)[i]);
    case AH_DTYPE_FP8_E5M2: return ah_fp8e5m2_to_f32(((const uint8_t *)base)[i]);
    case AH_DTYPE_FP8_E4M3_FNUZ: return ah_fp8e4m3fnuz_to_f32(((const uint8_t *)base)[i]);
    case AH_DTYPE_FP8_E5M2_FNUZ: return ah_fp8e5m2fnuz_to_f32(((const uint8_t *)base)[i]);
    default: return NAN;
    }
}

/* Store v as element i of a buffer of type t. */
static inline void ah_store_f32(void *base, size_t i, ah_dtype t, float v)
{
    switch (t) {
    case AH_DTYPE_FP32: ((float *)base)[i] = v; break;
    case AH_DTYPE_FP16: ((uint16_t *)base)[i] = ah_f32_to_f16(v); break;
    case AH_DTYPE_BF16: ((uint16_t *)base)[i] = ah_f32_to_bf16(v); break;
    case AH_DTYPE_FP8_E4M3:
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E4M3_FNUZ:
    case AH_DTYPE_FP8_E5M2_FNUZ: ((uint8_t *)base)[i] = ah_f32_to_fp8(v, t); break;
    default: break;
    }
}

/* ---- DLTensor checks ------------------------------------------------------ */

static inline int ah_dl_dtype_is(const DLTensor *t, ah_dtype d)
{
    DLDataType w = ah_dtype_to_dl(d);
    return t->dtype.code == w.code && t->dtype.bits == w.bits && t->dtype.lanes == 1;
}

/* Element count. */
static inline int64_t ah_dl_numel(const DLTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* True when t is densely packed in row-major order (NULL strides included). */
static inline int ah_dl_is_contiguous(const DLTensor *t)
{
    if (!t->strides) return 1;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expect) return 0;
        expect *= t->shape[i];
    }
    return 1;
}

/* Stride of dimension i in elements (row-major when strides is NULL). */
static inline int64_t ah_dl_stride(const DLTensor *t, int i)
{
    if (t->strides) return t->strides[i];
    int64_t s = 1;
    for (int j = t->ndim - 1; j > i; j--) s *= t->shape[j];
    return s;
}

/* Base address, byte_offset applied. */
static inline void *ah_dl_data(const DLTensor *t) { return (char *)t->data + t->byte_offset; }

/* ---- the tensors of forward and write_kv ----------------------------------
 *
 * What the host guarantees. With validation on (the default), the host
 * checks every tensor of ah_binding_forward and ah_binding_write_kv once,
 * before any plugin runs, against the layer spec and the planned batch:
 * rank, exact shape (caches: at least the batch's num_blocks), dtype,
 * device type and index, a 16-byte aligned base, innermost stride 1,
 * densely packed caches (an interleaved layout's two views: the strides of
 * one [blocks, 2, ...] tensor, one block count, and the value view where
 * the layout puts it in the key's allocation), lse, sinks and ALiBi
 * slopes, and finite k_scale / v_scale >= 0; and it validates the batch
 * (offsets, lengths, block ids and slots inside num_blocks, table width,
 * limits). Always, validation on or off: args are non-NULL with a
 * struct_size that covers the ABI's fields; forward and write_kv come only
 * after a plan of this state that succeeded; write_kv is never called on a
 * cacheless layer; forward of a cross-attention layer never carries key or
 * value.
 *
 * What a plugin keeps. With validation off the engine is trusted, and a
 * plugin repeats none of the host's semantic checks. It keeps only what
 * protects memory from a tensor that does not hold what its kernels
 * address: the rank, the extents, the element size and the innermost
 * stride of each tensor it reads or writes (ah_dl_check below), the block
 * and slot bounds its plan can see, and its kernels' own layout demands
 * (wider stride multiples, int32 strides) that the host does not know. */

/* What a kernel addresses through one tensor. dim0_min: shape[0] may be
 * larger than wanted (a caller's larger buffer, a cache with more blocks;
 * 0 with dim0_min accepts any count). dense: row-major without gaps (a
 * kernel that indexes it as one array); else only the innermost stride
 * must be 1. kv_layout (ABI 2.3): a cache view's layout (ah_dl_cache_want
 * sets it); an interleaved one makes the tensor one of the two views of a
 * [blocks, 2, ...] allocation, whose strides must be those
 * ah_kv_view_geometry gives (dense is 0 then). AH_KV_LAYOUT_AUTO for every
 * other tensor. */
typedef struct ah_dl_want {
    const char *name;
    int ndim;
    int64_t shape[4];
    int dim0_min;
    ah_dtype dtype;
    int dense;
    ah_kv_layout kv_layout;
} ah_dl_want;

/* ABI 2.3: KV-cache layout. The strides (elements) of a cache view of
 * shape [blocks, d1, d2, head] in layout l, and in alloc the dense
 * allocation it lies in, whose rank it returns: 4, the view itself, for a
 * dense layout; 5, [blocks, 2, d1, d2, head], for an interleaved one,
 * whose key and value views (index 0 and 1 of dim 1) alternate block by
 * block, so their block stride is twice a dense one's. */
static inline int ah_kv_view_geometry(ah_kv_layout l, const int64_t shape[4], int64_t strides[4],
                                      int64_t alloc[5])
{
    const int inter = ah_kv_layout_is_interleaved(l);
    strides[3] = 1;
    for (int i = 2; i >= 0; i--) strides[i] = strides[i + 1] * shape[i + 1];
    if (inter) strides[0] *= 2;
    alloc[0] = shape[0];
    alloc[1] = 2;
    for (int i = 1; i < 4; i++) alloc[i + inter] = shape[i];
    return 4 + inter;
}

/* "[a, b, c]" (">= a" first with dim0_min) of n dims into buf (cap bytes). */
static inline void ah_dl_fmt_dims(char *buf, size_t cap, const int64_t *d, int n, int dim0_min)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s%lld", i ? ", " : "",
                                 i == 0 && dim0_min ? ">= " : "", (long long)d[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* The name of a DLPack dtype code, for messages. */
static inline const char *ah_dl_code_name(uint8_t code)
{
    switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    default: return "code";
    }
}

/* Check t against w: present, w->ndim dims, each extent as wanted, dtype
 * w->dtype, data set, densely packed or innermost stride 1, and an
 * interleaved cache view's strides (w->kv_layout). Returns AH_OK, or
 * AH_ERR_INVALID_ARGUMENT with the tensor, what it has and what is wanted
 * in e ("q: shape [5, 32, 128], expected [5, 32, 64]"). The host's own
 * tensor checks begin with this one, so a plugin's message reads like the
 * host's. */
static inline ah_status ah_dl_check(const DLTensor *t, const ah_dl_want *w, ah_errbuf *e)
{
    char got[96], exp[96];
    if (!t) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s is NULL", w->name);
    if (t->ndim != w->ndim || !t->shape) {
        ah_dl_fmt_dims(exp, sizeof exp, w->shape, w->ndim, w->dim0_min);
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: %d dims, expected %d %s", w->name, t->ndim,
                       w->ndim, exp);
    }
    for (int i = 0; i < w->ndim; i++) {
        if (i == 0 && w->dim0_min ? t->shape[0] >= w->shape[0] : t->shape[i] == w->shape[i])
            continue;
        ah_dl_fmt_dims(got, sizeof got, t->shape, t->ndim, 0);
        ah_dl_fmt_dims(exp, sizeof exp, w->shape, w->ndim, w->dim0_min);
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: shape %s, expected %s", w->name, got, exp);
    }
    if (!ah_dl_dtype_is(t, w->dtype)) {
        const DLDataType d = ah_dtype_to_dl(w->dtype);
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s: dtype %s%u (lanes %u), expected %s%u for %s", w->name,
                       ah_dl_code_name(t->dtype.code), t->dtype.bits, t->dtype.lanes,
                       ah_dl_code_name(d.code), d.bits, ah_dtype_name(w->dtype));
    }
    if (!t->data) return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: data is NULL", w->name);
    if (w->dense && !ah_dl_is_contiguous(t)) {
        ah_dl_fmt_dims(got, sizeof got, t->strides, t->ndim, 0);
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                       "%s: strides %s, expected a densely packed tensor", w->name, got);
    }
    const int last = t->ndim - 1;
    if (last >= 0 && t->strides && t->shape[last] != 1 && t->strides[last] != 1)
        return ah_fail(e, AH_ERR_INVALID_ARGUMENT, "%s: last dimension has stride %lld, expected 1",
                       w->name, (long long)t->strides[last]);
    if (w->ndim == 4 && ah_kv_layout_is_interleaved(w->kv_layout)) {
        int64_t strides[4], alloc[5];
        const int64_t view[4] = {t->shape[0], w->shape[1], w->shape[2], w->shape[3]};
        const int alloc_ndim = ah_kv_view_geometry(w->kv_layout, view, strides, alloc);
        int bad = 0;
        for (int i = 0; i < 4; i++) bad |= t->shape[i] != 1 && ah_dl_stride(t, i) != strides[i];
        if (bad) {
            char whole[96];
            if (t->strides) ah_dl_fmt_dims(got, sizeof got, t->strides, 4, 0);
            else snprintf(got, sizeof got, "NULL (dense)");
            ah_dl_fmt_dims(exp, sizeof exp, strides, 4, 0);
            ah_dl_fmt_dims(whole, sizeof whole, alloc, alloc_ndim, 0);
            return ah_fail(e, AH_ERR_INVALID_ARGUMENT,
                           "%s: strides %s, expected %s: layout %s hands over K = cache[:, 0] and "
                           "V = cache[:, 1] of one %s tensor",
                           w->name, got, exp, ah_kv_layout_name(w->kv_layout), whole);
        }
    }
    return AH_OK;
}

/* The want of a [blocks, ., ., head_size] cache in the spec's layout,
 * holding at least min_blocks blocks: densely packed (ah_kv_offset's
 * addressing), or for an interleaved layout (ABI 2.3) a view with the
 * strides ah_kv_view_geometry gives. */
static inline ah_dl_want ah_dl_cache_want(const char *name, const ah_layer_spec *s,
                                          int64_t min_blocks, uint32_t head_size)
{
    const int hnd = ah_kv_layout_is_hnd(s->kv_layout);
    const ah_dl_want w = {name,
                          4,
                          {min_blocks, hnd ? s->num_kv_heads : s->block_size,
                           hnd ? s->block_size : s->num_kv_heads, head_size},
                          1,
                          s->kv_dtype,
                          !ah_kv_layout_is_interleaved(s->kv_layout),
                          s->kv_layout};
    return w;
}

#ifdef __cplusplus
}
#endif

#endif /* ATTNHOST_PLUGIN_UTIL_H */
