/*
 * rocm_aiter's index logic, shared by the HIP kernels (kernels/attn.hip) and
 * the host: the MFMA fragment layouts, paged-cache addressing (NHD and
 * HND), masks (causal or not, sliding windows), logits (soft-cap, ALiBi),
 * FP8 decoding and encoding, the online softmax and the LSE merge of key
 * partitions. Plain C
 * (C11 or C++/HIP); the CPU tests run the kernels' tile loops through an
 * instruction model with exactly these functions.
 *
 * MFMA fragments (wave64, AMD CDNA2/CDNA3 ISA, "Matrix fused multiply-add
 * instructions"; the layouts the AMD Matrix Instruction Calculator prints).
 * A lane holds 4 consecutive K elements of one A row and of one B column;
 * "item" is the element's index inside the lane's register(s).
 *
 *   v_mfma_f32_32x32x8{bf16_1k,f16}   A 32x8, B 8x32, C 32x32 (16 floats a lane)
 *     A[i][k]: lane i + 32*(k/4), item k%4     B[k][j]: lane j + 32*(k/4), item k%4
 *     C[i][j]: lane j + 32*((i/4)%2), item (i%4) + 4*(i/8)
 *   v_mfma_f32_16x16x16{bf16_1k,f16}  A 16x16, B 16x16, C 16x16 (4 floats a lane)
 *     A[i][k]: lane i + 16*(k/4), item k%4     B[k][j]: lane j + 16*(k/4), item k%4
 *     C[i][j]: lane j + 16*(i/4), item i%4
 *
 * The kernels compute S^T = K Q^T (A = keys, B = queries), so a lane's C
 * registers hold one query's logits for several keys, and those registers
 * are, unchanged, the B operand of O^T = V^T P^T: the probabilities never
 * leave registers (the layout identity ra_m32_c_row(l, 4m + r) ==
 * 8m + ra_m32_ab_k(l, r) for the 32x32 shape, ra_m16_c_row == ra_m16_ab_k
 * for the 16x16 shape; test_mfma_model checks both).
 */
#ifndef RA_LAYOUT_H
#define RA_LAYOUT_H

#if defined(__HIP__) || defined(__HIPCC__)
#define RA_HD __attribute__((device)) __attribute__((host)) static inline
#else
#include <math.h>
#include <stdint.h>
#define RA_HD static inline
#endif

#define RA_WAVE 64
#define RA_PARTITION 256  /* keys per decode partition (one workgroup) */
#define RA_DEC_KEYS 16    /* keys per decode MFMA step (16x16x16) */
#define RA_DEC_GROUP 16   /* query heads of one KV head a decode wave serves */
#define RA_PRE_KEYS 32    /* keys per prefill step (32x32x8) */
#define RA_PRE_QUERIES 32 /* query rows per prefill wave */

/* ---- MFMA 32x32x8 fragments: (lane, item) -> matrix element -------------- */

/* A row (M) or B column (N) a lane holds. */
RA_HD int ra_m32_ab_mn(int lane) { return lane & 31; }
/* K index of a lane's item (0..3) in A and B. */
RA_HD int ra_m32_ab_k(int lane, int item) { return 4 * (lane >> 5) + item; }
/* C column (N) a lane holds, and the C row (M) of its item (0..15). */
RA_HD int ra_m32_c_n(int lane) { return lane & 31; }
RA_HD int ra_m32_c_m(int lane, int item) { return 8 * (item >> 2) + 4 * (lane >> 5) + (item & 3); }

/* ---- MFMA 16x16x16 fragments --------------------------------------------- */

RA_HD int ra_m16_ab_mn(int lane) { return lane & 15; }
RA_HD int ra_m16_ab_k(int lane, int item) { return 4 * (lane >> 4) + item; }
RA_HD int ra_m16_c_n(int lane) { return lane & 15; }
RA_HD int ra_m16_c_m(int lane, int item) { return 4 * (lane >> 4) + item; }

/* ---- paged KV cache ----------------------------------------------------------
 *   NHD: [num_blocks, block_size, num_kv_heads, head]
 *   HND: [num_blocks, num_kv_heads, block_size, head]
 * Both keep a key's head_size channels contiguous, so the kernels read
 * them alike; only the offsets differ. */

/* Element offset of channel d of KV head h in cache slot `slot` (block *
 * block_size + offset in the block; never negative here). */
RA_HD int64_t ra_slot_offset(int64_t slot, int block_size, int num_kv_heads, int head_size, int h,
                             int d, int hnd)
{
    if (hnd) {
        const int64_t blk = slot / block_size, off = slot % block_size;
        return ((blk * num_kv_heads + h) * block_size + off) * head_size + d;
    }
    return (slot * num_kv_heads + h) * head_size + d;
}

/* The same at position pos of a request whose block-table row is table. */
RA_HD int64_t ra_kv_offset(const int32_t *table, int pos, int block_size, int num_kv_heads,
                           int head_size, int h, int d, int hnd)
{
    const int64_t slot = (int64_t)table[pos / block_size] * block_size + pos % block_size;
    return ra_slot_offset(slot, block_size, num_kv_heads, head_size, h, d, hnd);
}

/* ---- masks ---------------------------------------------------------------- */

/* Key position kp is visible to the query at position qp: kp < seq_len,
 * and causal: kp <= qp, within a sliding window kp > qp - window; not
 * causal (a decoder layer with causal = OFF): |kp - qp| < window when
 * there is a window (0 = none). */
RA_HD int ra_visible(int kp, int qp, int seq_len, int window, int causal)
{
    if (kp >= seq_len || (causal && kp > qp)) return 0;
    return window <= 0 || (kp > qp - window && kp < qp + window);
}

/* The first key any query at position >= qp_lo can see. */
RA_HD int ra_first_key(int qp_lo, int window)
{
    const int f = window > 0 ? qp_lo - window + 1 : 0;
    return f > 0 ? f : 0;
}

/* ---- the keys a wave walks ---------------------------------------------------- */

/* Decode-style waves (one query token, up to 16 of its heads): the keys
 * the query at position qp of a request of seq_len keys sees, [*kstart,
 * *kend), from the first one rounded down to an MFMA step; with part >= 0
 * only those of 256-key partition `part`. A decode query is the request's
 * last position (qp = seq_len - 1), so it sees the same keys causal or
 * not. Empty for a partition past the request's end (the grid covers the
 * batch's longest request) and for a request with seq_len 0
 * (AH_FEAT_EMPTY_KV: a context-parallel rank holding none of its keys),
 * whose block-table row is then never read; such a wave writes the
 * partial (m -inf, l 0), or out 0 and LSE -inf. */
RA_HD void ra_row_keys(int part, int qp, int seq_len, int window, int causal, int *kstart,
                       int *kend)
{
    int lo = (ra_first_key(qp, window) / RA_DEC_KEYS) * RA_DEC_KEYS;
    int hi = causal ? qp + 1 : window > 0 && qp + window < seq_len ? qp + window : seq_len;
    if (hi > seq_len) hi = seq_len;
    if (part >= 0) {
        const int k0 = part * RA_PARTITION;
        lo = lo > k0 ? lo : k0;
        hi = hi < k0 + RA_PARTITION ? hi : k0 + RA_PARTITION;
    }
    *kstart = lo;
    *kend = hi;
}

/* The request of query token t: the r with qsl[r] <= t < qsl[r + 1]
 * (requests without tokens are skipped), by bisection over the
 * num_reqs + 1 offsets. */
RA_HD int ra_request_of(const int *qsl, int num_reqs, int t)
{
    int lo = 0, hi = num_reqs;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (qsl[mid] <= t) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Decode waves per KV head: its G query heads in groups of 16 (the
 * 16x16x16 MFMA's N), each group re-reading the KV head's keys. */
RA_HD int ra_head_groups(int G) { return (G + RA_DEC_GROUP - 1) / RA_DEC_GROUP; }

/* Prefill/extend: the keys the wave of queries q0 .. q0 + 31 of a request
 * (ql new tokens, seq_len keys) walks, [*kstart, *kend): causal, up to
 * its last query's position; not causal, up to the request's end, or the
 * last key its last query's window reaches; from the first key its first
 * query sees, rounded down to a 32-key step. Empty for a request with
 * seq_len 0 (one query at position -1), whose row then ends as out 0,
 * LSE -inf. */
RA_HD void ra_prefill_keys(int q0, int ql, int seq_len, int window, int causal, int *kstart,
                           int *kend)
{
    const int qlast = q0 + RA_PRE_QUERIES < ql ? q0 + RA_PRE_QUERIES - 1 : ql - 1;
    const int plast = seq_len - ql + qlast;
    *kend = causal ? plast + 1 : window > 0 && plast + window < seq_len ? plast + window : seq_len;
    *kstart = (ra_first_key(seq_len - ql + q0, window) / RA_PRE_KEYS) * RA_PRE_KEYS;
}

/* ---- logits and the online softmax ----------------------------------------- */

/* scale * dot, soft-capped when softcap > 0 (c * tanh(s / c)), written with
 * exp so host and device use the same expression, plus the ALiBi bias
 * slope * (kp - qp) (slope 0 without ALiBi). */
RA_HD float ra_logit(float dot, float scale, float softcap, float slope, int kp, int qp)
{
    float s = dot * scale;
    if (softcap > 0.0f) {
        const float e = expf(-2.0f * fabsf(s) / softcap);
        const float t = (1.0f - e) / (1.0f + e);
        s = softcap * (s < 0.0f ? -t : t);
    }
    return s + slope * (float)(kp - qp);
}

/* exp(s - m) that is 0 for a masked logit and never NaN when every logit so
 * far was masked (m == -inf). */
RA_HD float ra_exp_shift(float s, float m) { return (s == -INFINITY) ? 0.0f : expf(s - m); }

/* The factor that rescales an accumulator from running max m_old to m_new. */
RA_HD float ra_rescale(float m_old, float m_new)
{
    return (m_old == -INFINITY) ? 0.0f : expf(m_old - m_new);
}

/* ---- decode partitions and the LSE merge ----------------------------------- */

RA_HD int ra_num_partitions(int seq_len) { return (seq_len + RA_PARTITION - 1) / RA_PARTITION; }

/* Partials (m, l) of partitions (or of two states) combine as
 *   M = max m_i,  L = sum l_i e^{m_i - M},  O = sum o_i l_i e^{m_i - M} / L
 * where o_i is partition i's normalised output. A sink logit joins as one
 * more partition with l = 1 and no value. lse = M + log L; with nothing
 * visible L = 0: out 0, lse -inf. */
typedef struct ra_lse_acc {
    float m, l;
} ra_lse_acc;

RA_HD ra_lse_acc ra_lse_init(void)
{
    ra_lse_acc a;
    a.m = -INFINITY;
    a.l = 0.0f;
    return a;
}

/* Add partial (m, l); returns the weight the partial's normalised output
 * gets, *old_scale the factor for what was accumulated before. */
RA_HD float ra_lse_add(ra_lse_acc *a, float m, float l, float *old_scale)
{
    if (l <= 0.0f || m == -INFINITY) {
        *old_scale = 1.0f;
        return 0.0f;
    }
    const float mn = a->m > m ? a->m : m;
    *old_scale = ra_rescale(a->m, mn);
    const float w = l * expf(m - mn);
    a->l = a->l * *old_scale + w;
    a->m = mn;
    return w;
}

RA_HD float ra_lse_value(ra_lse_acc a) { return a.l > 0.0f ? a.m + logf(a.l) : -INFINITY; }

/* Two normalised partial results by their LSEs (merge_states). Writes the
 * weights of a and b; returns the merged LSE. A part of LSE -inf (no key:
 * an empty context-parallel shard) gets weight exactly 0, and the kernel
 * does not read a part of weight 0 (RA_MERGE_VALUE), so the other passes
 * through whatever the empty part's rows hold; both empty: 0, -inf. */
RA_HD float ra_merge2(float lse_a, float lse_b, float *wa, float *wb)
{
    if (lse_a == -INFINITY && lse_b == -INFINITY) {
        *wa = 0.0f;
        *wb = 0.0f;
        return -INFINITY;
    }
    const float m = lse_a > lse_b ? lse_a : lse_b;
    const float ea = ra_exp_shift(lse_a, m), eb = ra_exp_shift(lse_b, m);
    *wa = ea / (ea + eb);
    *wb = eb / (ea + eb);
    return m + logf(ea + eb);
}

/* One merged element from the parts' values, each read (load(p, i)) only
 * when its weight is not 0, so a NaN or garbage row of an empty part never
 * enters the sum. */
#define RA_MERGE_VALUE(wa, load_a, wb, load_b) \
    (((wa) != 0.0f ? (wa) * (load_a) : 0.0f) + ((wb) != 0.0f ? (wb) * (load_b) : 0.0f))

/* ---- FP8 KV caches ---------------------------------------------------------- */

/* KV-cache element types of the kernels: the query's 16-bit type, or one
 * of the host's FP8 formats: OCP's (AH_DTYPE_FP8_E4M3 is e4m3fn: bias 7,
 * no infinities, 0x7f/0xff NaN; AH_DTYPE_FP8_E5M2 is IEEE-like: bias 15)
 * or the fnuz ones MI300 engines keep their caches in (bias 8 / 16, no
 * infinities, no -0, 0x80 the only NaN). gfx942's FP8 conversions and
 * MFMAs read only the fnuz formats and gfx90a has no FP8 instruction at
 * all, so every target decodes all four here, in integer and float
 * arithmetic that is exact, into the query's 16-bit type, which holds every
 * FP8 value exactly, and runs the 16-bit MFMAs: the cache is read at the
 * query's precision, by one code path that the CPU model test checks. */
#define RA_KV_16 0
#define RA_KV_E4M3 1
#define RA_KV_E5M2 2
#define RA_KV_E4M3_FNUZ 3
#define RA_KV_E5M2_FNUZ 4

RA_HD int ra_kv_e5m2(int kv) { return kv == RA_KV_E5M2 || kv == RA_KV_E5M2_FNUZ; }
RA_HD int ra_kv_fnuz(int kv) { return kv == RA_KV_E4M3_FNUZ || kv == RA_KV_E5M2_FNUZ; }

/* 2^k as a float, for -126 <= k <= 127. */
RA_HD float ra_pow2(int k)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = (uint32_t)(k + 127) << 23;
    return c.f;
}

/* The value of an FP8 byte of cache type kv (RA_KV_E4M3 .. _E5M2_FNUZ):
 * the significand as an integer times a power of two, so no denormal
 * float and no FP8 instruction takes part. */
RA_HD float ra_fp8_to_f32(uint32_t b, int kv)
{
    const int e5m2 = ra_kv_e5m2(kv), fnuz = ra_kv_fnuz(kv);
    const int mb = e5m2 ? 2 : 3, bias = (e5m2 ? 15 : 7) + fnuz;
    const uint32_t mag = b & 0x7fu, e = mag >> mb, m = mag & ((1u << mb) - 1u);
    float v;
    if (fnuz ? b == 0x80u : e5m2 ? e == 31u : mag == 0x7fu)
        v = !fnuz && e5m2 && m == 0 ? INFINITY : NAN;
    else v = (float)(e ? m | (1u << mb) : m) * ra_pow2((e ? (int)e : 1) - bias - mb);
    return (b & 0x80u) ? -v : v;
}

/* Encode f into an FP8 byte of cache type kv by nearest-even, saturating
 * to the largest finite value; NaN gives the format's NaN, and a fnuz
 * format, which has no -0, stores a negative value that rounds to zero as
 * 0x00 (plugin_util.h's ah_f32_to_fp8, bit for bit, which the oracle's
 * write_kv uses). */
RA_HD uint32_t ra_f32_to_fp8(float f, int kv)
{
    const int e5m2 = ra_kv_e5m2(kv), fnuz = ra_kv_fnuz(kv);
    const uint32_t man_bits = e5m2 ? 2u : 3u, bias = (e5m2 ? 15u : 7u) + (uint32_t)fnuz;
    const uint32_t shift = 23u - man_bits;
    /* 57344, 448; fnuz 57344, 240 */
    const uint32_t max_code = fnuz ? 0x7fu : e5m2 ? 0x7bu : 0x7eu;
    union {
        uint32_t u;
        float f;
    } c;
    c.f = f;
    const uint32_t au = c.u & 0x7fffffffu, sign = (c.u >> 24) & 0x80u;
    if (au > 0x7f800000u) return fnuz ? 0x80u : e5m2 ? 0x7eu : 0x7fu;
    if (au < (128u - bias) << 23) { /* below the smallest normal: the subnormals' quantum */
        c.u = au;
        const uint32_t m = (uint32_t)__builtin_rintf(c.f * ra_pow2((int)(bias - 1u + man_bits)));
        return fnuz && m == 0 ? 0u : sign | m;
    }
    uint32_t r = (au + (1u << (shift - 1)) - 1u + ((au >> shift) & 1u)) >> shift;
    r -= (127u - bias) << man_bits;
    return sign | (r > max_code ? max_code : r);
}

/* ---- bf16 and fp16 bits ----------------------------------------------------- */

RA_HD float ra_bf16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = (uint32_t)h << 16;
    return c.f;
}

/* Round to nearest even; NaN stays NaN. */
RA_HD uint16_t ra_f32_to_bf16(float f)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.f = f;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((c.u >> 16) | 0x40);
    c.u += 0x7fffu + ((c.u >> 16) & 1u);
    return (uint16_t)(c.u >> 16);
}

#endif
