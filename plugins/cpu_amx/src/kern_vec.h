/*
 * Vector primitives for the fp32 kernel, one set per ISA. A translation unit
 * defines exactly one of AH_VEC_AVX512, AH_VEC_AVX2 or AH_VEC_SCALAR before
 * including this file and is compiled with the matching -m flags; the kernel
 * source (kern_fp32.inc) is then written once against these names:
 *
 *   VL lanes; vf vector type; v_zero, v_set1, v_load, v_store, v_fma(a,b,c)
 *   = a*b+c, v_mul, v_add, v_max, v_hsum, v_hmax, v_exp;
 *   cvt_row: n elements (n % 16 == 0) of a KV or query dtype to fp32 times
 *   a scale; dots16: 16 dot products of one query row with 16 key rows.
 *
 * All loads here are unaligned-safe; scratch buffers are 64-byte aligned
 * anyway so the loads never split cache lines.
 */
#ifndef AH_CPU_KERN_VEC_H
#define AH_CPU_KERN_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <attnhost/plugin_util.h>

#if defined(AH_VEC_AVX512) || defined(AH_VEC_AVX2)
#include <immintrin.h>
#endif

/* Largest finite input for which e^x is computed; below it the result is 0. */
#define AH_EXP_LO (-87.0f)

#if defined(AH_VEC_AVX512)
/* ------------------------------------------------------------------------ */
#define VL 16
typedef __m512 vf;
#define v_zero() _mm512_setzero_ps()
#define v_set1(x) _mm512_set1_ps(x)
#define v_load(p) _mm512_loadu_ps(p)
#define v_store(p, v) _mm512_storeu_ps((p), (v))
#define v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define v_mul(a, b) _mm512_mul_ps((a), (b))
#define v_add(a, b) _mm512_add_ps((a), (b))
#define v_max(a, b) _mm512_max_ps((a), (b))
#define v_hsum(a) _mm512_reduce_add_ps(a)
#define v_hmax(a) _mm512_reduce_max_ps(a)

static inline vf v_exp(vf x)
{
    /* e^x = 2^n * e^r, |r| <= ln2/2, degree-6 Taylor for e^r (rel. err ~1e-7). */
    __mmask16 zero = _mm512_cmp_ps_mask(x, v_set1(AH_EXP_LO), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, v_set1(AH_EXP_LO)), v_set1(88.0f));
    vf n = _mm512_roundscale_ps(v_mul(x, v_set1(1.44269504f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, v_set1(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, v_set1(1.42860677e-6f), r);
    vf p = v_set1(1.0f / 720);
    p = v_fma(p, r, v_set1(1.0f / 120));
    p = v_fma(p, r, v_set1(1.0f / 24));
    p = v_fma(p, r, v_set1(1.0f / 6));
    p = v_fma(p, r, v_set1(0.5f));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    return _mm512_maskz_mov_ps((__mmask16)~zero, _mm512_scalef_ps(p, n));
}

static inline void cvt_row(float *dst, const void *src, uint32_t n, ah_dtype t, float scale)
{
    uint32_t i;
    switch (t) {
    case AH_DTYPE_FP32:
        for (i = 0; i < n; i += 16)
            v_store(dst + i, v_mul(v_load((const float *)src + i), v_set1(scale)));
        break;
    case AH_DTYPE_BF16:
        if (scale == 1.0f) {
            for (i = 0; i < n; i += 16) {
                __m512i w = _mm512_cvtepu16_epi32(
                    _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i)));
                v_store(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
            }
            break;
        }
        for (i = 0; i < n; i += 16) {
            __m512i w = _mm512_cvtepu16_epi32(
                _mm256_loadu_si256((const __m256i *)((const uint16_t *)src + i)));
            v_store(dst + i, v_mul(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), v_set1(scale)));
        }
        break;
    case AH_DTYPE_FP16:
        for (i = 0; i < n; i += 16)
            v_store(dst + i, v_mul(_mm512_cvtph_ps(_mm256_loadu_si256(
                                       (const __m256i *)((const uint16_t *)src + i))),
                                   v_set1(scale)));
        break;
    case AH_DTYPE_FP8_E4M3:
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E4M3_FNUZ:
    case AH_DTYPE_FP8_E5M2_FNUZ: {
        /* Move sign and exponent+mantissa into fp32 position, then rebias by
         * a multiply (exact, and right for subnormals too); the codes with no
         * finite value (E4M3 0x7f, E5M2 exponent 31, fnuz 0x80) are patched
         * in. A fnuz format's bias is one larger, so its rebias is half. */
        const int e4 = t == AH_DTYPE_FP8_E4M3 || t == AH_DTYPE_FP8_E4M3_FNUZ;
        const int fnuz = ah_dtype_is_fnuz(t);
        const __m512i sh = _mm512_set1_epi32(e4 ? 20 : 21);
        const vf rebias = v_set1(scale * (e4 ? 0x1p120f : 0x1p112f) * (fnuz ? 0.5f : 1.0f));
        for (i = 0; i < n; i += 16) {
            __m512i b =
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)src + i)));
            __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
            __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
            vf f = v_mul(_mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_sllv_epi32(mag, sh))),
                         rebias);
            __mmask16 special;
            vf sv;
            if (fnuz) {
                special = _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0x80));
                sv = v_set1(NAN);
            } else if (e4) {
                special = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f));
                sv = v_set1(NAN);
            } else {
                special = _mm512_cmpge_epi32_mask(mag, _mm512_set1_epi32(0x7c));
                __m512i bits = _mm512_or_si512(
                    _mm512_or_si512(sign, _mm512_set1_epi32(0x7f800000)),
                    _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(3)), 21));
                sv = _mm512_castsi512_ps(bits);
            }
            v_store(dst + i, _mm512_mask_mov_ps(f, special, sv));
        }
        break;
    }
    default: break;
    }
}

/* s[j] = sum of the lanes of a[j], j < 16: a transpose-and-add tree (15
 * adds) instead of sixteen horizontal reductions. */
static inline void fold16(const __m512 *a, float *s)
{
    __m512 x[8], y[4], z[2];
    for (int i = 0; i < 8; i++)
        x[i] = v_add(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                     _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++)
        y[i] = v_add(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                     _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xee));
    for (int i = 0; i < 2; i++)
        z[i] = v_add(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                     _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xdd));
    v_store(s,
            v_add(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd)));
}

/* s[j] = dot(q, k + j*ld) for j < 16; d % 16 == 0. Four rows at a time
 * share each query chunk (four independent chains, four pointers). */
static inline void dots16(const float *q, const float *k, uint32_t ld, uint32_t d, float *s)
{
    __m512 a[16];
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
        const float *k0 = k + (size_t)g * ld, *k1 = k0 + ld, *k2 = k1 + ld, *k3 = k2 + ld;
        vf a0 = v_zero(), a1 = a0, a2 = a0, a3 = a0;
        for (uint32_t c = 0; c < d; c += 16) {
            vf qv = v_load(q + c);
            a0 = v_fma(qv, v_load(k0 + c), a0);
            a1 = v_fma(qv, v_load(k1 + c), a1);
            a2 = v_fma(qv, v_load(k2 + c), a2);
            a3 = v_fma(qv, v_load(k3 + c), a3);
        }
        a[g] = a0;
        a[g + 1] = a1;
        a[g + 2] = a2;
        a[g + 3] = a3;
    }
    fold16(a, s);
}

#elif defined(AH_VEC_AVX2)
/* ------------------------------------------------------------------------ */
#define VL 8
typedef __m256 vf;
#define v_zero() _mm256_setzero_ps()
#define v_set1(x) _mm256_set1_ps(x)
#define v_load(p) _mm256_loadu_ps(p)
#define v_store(p, v) _mm256_storeu_ps((p), (v))
#define v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define v_mul(a, b) _mm256_mul_ps((a), (b))
#define v_add(a, b) _mm256_add_ps((a), (b))
#define v_max(a, b) _mm256_max_ps((a), (b))

static inline float v_hsum(vf a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float v_hmax(vf a)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline vf v_exp(vf x)
{
    vf keep = _mm256_cmp_ps(x, v_set1(AH_EXP_LO), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, v_set1(AH_EXP_LO)), v_set1(88.0f));
    vf n = _mm256_round_ps(v_mul(x, v_set1(1.44269504f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(n, v_set1(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, v_set1(1.42860677e-6f), r);
    vf p = v_set1(1.0f / 720);
    p = v_fma(p, r, v_set1(1.0f / 120));
    p = v_fma(p, r, v_set1(1.0f / 24));
    p = v_fma(p, r, v_set1(1.0f / 6));
    p = v_fma(p, r, v_set1(0.5f));
    p = v_fma(p, r, v_set1(1.0f));
    p = v_fma(p, r, v_set1(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(v_mul(p, _mm256_castsi256_ps(e)), keep);
}

static inline void cvt_row(float *dst, const void *src, uint32_t n, ah_dtype t, float scale)
{
    uint32_t i;
    const vf sc = v_set1(scale);
    switch (t) {
    case AH_DTYPE_FP32:
        for (i = 0; i < n; i += 8) v_store(dst + i, v_mul(v_load((const float *)src + i), sc));
        break;
    case AH_DTYPE_BF16:
        for (i = 0; i < n; i += 8) {
            __m256i w = _mm256_cvtepu16_epi32(
                _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i)));
            v_store(dst + i, v_mul(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), sc));
        }
        break;
    case AH_DTYPE_FP16:
        for (i = 0; i < n; i += 8)
            v_store(dst + i, v_mul(_mm256_cvtph_ps(_mm_loadu_si128(
                                       (const __m128i *)((const uint16_t *)src + i))),
                                   sc));
        break;
    case AH_DTYPE_FP8_E4M3:
    case AH_DTYPE_FP8_E5M2:
    case AH_DTYPE_FP8_E4M3_FNUZ:
    case AH_DTYPE_FP8_E5M2_FNUZ: { /* as the AVX-512 path */
        const int e4 = t == AH_DTYPE_FP8_E4M3 || t == AH_DTYPE_FP8_E4M3_FNUZ;
        const int fnuz = ah_dtype_is_fnuz(t);
        const __m256i sh = _mm256_set1_epi32(e4 ? 20 : 21);
        const vf rebias = v_set1(scale * (e4 ? 0x1p120f : 0x1p112f) * (fnuz ? 0.5f : 1.0f));
        for (i = 0; i < n; i += 8) {
            __m256i b =
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)src + i)));
            __m256i mag = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
            __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
            vf f = v_mul(_mm256_castsi256_ps(_mm256_or_si256(sign, _mm256_sllv_epi32(mag, sh))),
                         rebias);
            __m256i special;
            vf sv;
            if (fnuz) {
                special = _mm256_cmpeq_epi32(b, _mm256_set1_epi32(0x80));
                sv = v_set1(NAN);
            } else if (e4) {
                special = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f));
                sv = v_set1(NAN);
            } else {
                special = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7b));
                sv = _mm256_castsi256_ps(_mm256_or_si256(
                    _mm256_or_si256(sign, _mm256_set1_epi32(0x7f800000)),
                    _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(3)), 21)));
            }
            v_store(dst + i, _mm256_blendv_ps(f, sv, _mm256_castsi256_ps(special)));
        }
        break;
    }
    default: break;
    }
}

/* Eight dots folded with hadd, twice for sixteen keys. */
static inline void dots16(const float *q, const float *k, uint32_t ld, uint32_t d, float *s)
{
    for (int h = 0; h < 2; h++) {
        const float *kk = k + (size_t)h * 8 * ld;
        vf a[8];
        for (int j = 0; j < 8; j++) a[j] = v_zero();
        for (uint32_t c = 0; c < d; c += 8) {
            vf qv = v_load(q + c);
            for (int j = 0; j < 8; j++) a[j] = v_fma(qv, v_load(kk + (size_t)j * ld + c), a[j]);
        }
        vf h1 = _mm256_hadd_ps(a[0], a[1]), h2 = _mm256_hadd_ps(a[2], a[3]);
        vf h3 = _mm256_hadd_ps(a[4], a[5]), h4 = _mm256_hadd_ps(a[6], a[7]);
        vf g1 = _mm256_hadd_ps(h1, h2), g2 = _mm256_hadd_ps(h3, h4);
        v_store(s + 8 * h,
                v_add(_mm256_permute2f128_ps(g1, g2, 0x20), _mm256_permute2f128_ps(g1, g2, 0x31)));
    }
}

#else /* AH_VEC_SCALAR */
/* ------------------------------------------------------------------------ */
#define VL 1
typedef float vf;
#define v_zero() 0.0f
#define v_set1(x) (x)
#define v_load(p) (*(p))
#define v_store(p, v) (*(p) = (v))
#define v_fma(a, b, c) ((a) * (b) + (c))
#define v_mul(a, b) ((a) * (b))
#define v_add(a, b) ((a) + (b))
#define v_max(a, b) ((a) > (b) ? (a) : (b))
#define v_hsum(a) (a)
#define v_hmax(a) (a)
static inline float v_exp(float x) { return x < AH_EXP_LO ? 0.0f : expf(x); }

static inline void cvt_row(float *dst, const void *src, uint32_t n, ah_dtype t, float scale)
{
    for (uint32_t i = 0; i < n; i++) dst[i] = ah_load_f32(src, i, t) * scale;
}

static inline void dots16(const float *q, const float *k, uint32_t ld, uint32_t d, float *s)
{
    for (int j = 0; j < 16; j++) {
        float a = 0;
        for (uint32_t c = 0; c < d; c++) a += q[c] * k[(size_t)j * ld + c];
        s[j] = a;
    }
}
#endif

#endif
