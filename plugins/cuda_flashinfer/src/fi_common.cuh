/*
 * Device-side building blocks shared by every kernel of the plugin: element
 * conversions (fp16, bf16, fp8 e4m3/e5m2 to float and back), 16-byte vector
 * loads, cp.async and the attention variant hooks (visibility mask, logits
 * soft-cap, ALiBi, sinks) that decode and prefill kernels apply identically.
 *
 * Scores are carried in the base-2 domain (multiplied by log2 e) so the
 * online softmax uses exp2f; LSE leaves the plugin in natural log.
 */
#ifndef FI_COMMON_CUH
#define FI_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <attnhost/cuda_sm90.cuh>

#include "fi_params.h"

#define FI_LOG2E 1.4426950408889634f
#define FI_LN2 0.6931471805599453f

namespace fi {

/* ---- element types ------------------------------------------------------ */

/* Storage types for FP8 caches: one byte, decoded by a tag type. */
struct e4m3 {
    uint8_t x;
};
struct e5m2 {
    uint8_t x;
};

template <typename T> struct elem;
template <> struct elem<half> {
    static constexpr bool fp8 = false;
};
template <> struct elem<__nv_bfloat16> {
    static constexpr bool fp8 = false;
};
template <> struct elem<e4m3> {
    static constexpr bool fp8 = true;
    static constexpr __nv_fp8_interpretation_t kind = __NV_E4M3;
};
template <> struct elem<e5m2> {
    static constexpr bool fp8 = true;
    static constexpr __nv_fp8_interpretation_t kind = __NV_E5M2;
};

__device__ __forceinline__ float to_f32(half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ half from_f32<half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* Two floats packed as one 32-bit register of T pairs (mma operands, stores). */
template <typename T> __device__ __forceinline__ uint32_t pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t pack2<half>(float a, float b)
{
    half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* Unpack 16 bytes of T into floats: 8 for 16-bit types, 16 for FP8. */
template <typename T> struct vec16 {
    static constexpr int N = 16 / (int)sizeof(T);
};

__device__ __forceinline__ float2 unpack2(uint32_t w, half *)
{
    return __half22float2(*reinterpret_cast<half2 *>(&w));
}
__device__ __forceinline__ float2 unpack2(uint32_t w, __nv_bfloat16 *)
{
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&w));
}

/* Two fp8 values (the low 16 bits of w) as an fp16 pair: exact, since fp16
 * holds every e4m3 and e5m2 value. */
template <typename KT> __device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t w)
{
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), elem<KT>::kind);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}

/* Four fp8 values (a word) as two fp16 pairs, bytes 0-1 and 2-3: from
 * sm_89 the word's halves go to the two conversions as they are, no shift
 * or mask. */
template <typename KT> __device__ __forceinline__ uint2 fp8x4_to_f16x2x2(uint32_t w)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint2 r;
    if constexpr (elem<KT>::kind == __NV_E4M3)
        asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
            "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
            : "=r"(r.x), "=r"(r.y)
            : "r"(w));
    else
        asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e5m2x2 %0, l;\n"
            "cvt.rn.f16x2.e5m2x2 %1, h;\n}\n"
            : "=r"(r.x), "=r"(r.y)
            : "r"(w));
    return r;
#else
    return make_uint2(fp8x2_to_f16x2<KT>(w), fp8x2_to_f16x2<KT>(w >> 16));
#endif
}

/* The power of two that scales values below amax into fp16's top binade
 * (amax < 2^e lands below 2^15), so an fp16 operand keeps a bf16 query's
 * precision at any range; 0 for amax 0. The caller scales the product back
 * by 2^-shift. */
__device__ __forceinline__ int f16_top_shift(float amax)
{
    int e = 0;
    frexpf(amax, &e);
    return amax > 0.f ? min(15 - e, 126) : 0;
}

template <typename T> __device__ __forceinline__ void cvt16(const uint4 &raw, float *f)
{
    if constexpr (elem<T>::fp8) {
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int k = 0; k < 2; k++) {
                __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                    (__nv_fp8x2_storage_t)((w[i] >> (16 * k)) & 0xffffu), elem<T>::kind);
                float2 v = __half22float2(*reinterpret_cast<half2 *>(&h));
                f[i * 4 + k * 2] = v.x;
                f[i * 4 + k * 2 + 1] = v.y;
            }
        }
    } else {
        const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 v = unpack2(w[i], (T *)nullptr);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
}

/* 8 FP8 bytes (one uint2) to 8 values of the 16-bit type Q, packed in a uint4:
 * how the tensor-core kernel stages an FP8 cache tile in shared memory. */
template <typename KV, typename Q> __device__ __forceinline__ uint4 fp8x8_to(uint2 raw)
{
    const uint32_t w[2] = {raw.x, raw.y};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                (__nv_fp8x2_storage_t)((w[i] >> (16 * k)) & 0xffffu), elem<KV>::kind);
            float2 v = __half22float2(*reinterpret_cast<half2 *>(&h));
            o[i * 2 + k] = pack2<Q>(v.x, v.y);
        }
    return make_uint4(o[0], o[1], o[2], o[3]);
}

/* Encode a float into an FP8 byte, nearest-even, saturating to the largest
 * finite value (the reference's rule). */
template <typename T> __device__ __forceinline__ uint8_t to_fp8(float v)
{
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, elem<T>::kind);
}

/* ---- memory ---------------------------------------------------------------- */

__device__ __forceinline__ uint4 ldg16(const void *p)
{
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

using ah_sm90::smem_addr;

/* 16-byte asynchronous copy; src_bytes 0 writes zeros without reading. */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* Programmatic dependent launch (sm_90): a kernel launched early behind
 * another waits here until that one has finished and its writes are
 * visible; the one before lets its dependents launch with
 * allow_dependent_launch. Both are no-ops without the launch attribute and
 * before sm_90. */
__device__ __forceinline__ void grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
/* The same for a count known only at run time (a uniform branch). */
__device__ __forceinline__ void cp_async_wait_n(int n)
{
    if (n <= 0) cp_async_wait<0>();
    else if (n == 1) cp_async_wait<1>();
    else cp_async_wait<2>();
}

/* ---- the paged cache ------------------------------------------------------- */

/* Element offset of key position j's row (kv head hk) in page `page`, the
 * block that holds it; kv_row looks the page up in pages (a request's
 * slice of kv_indices). */
__device__ __forceinline__ int64_t kv_row_in(const kv_geom &g, int64_t page, int j, int hk)
{
    const int slot = j & ((1 << g.page_shift) - 1);
    return page * g.stride_page + (int64_t)slot * g.stride_slot + (int64_t)hk * g.stride_head;
}
__device__ __forceinline__ int64_t kv_row(const kv_geom &g, const int32_t *pages, int j, int hk)
{
    return kv_row_in(g, pages[j >> g.page_shift], j, hk);
}

/* ---- variant hooks ------------------------------------------------------- */

/* Key positions a query at position p may see: [lo, hi) intersected with
 * [kv_begin, seq_len). Masks in this plugin are ranges per query row. */
__device__ __forceinline__ void visible_range(const variant &v, int p, int seq_len, int kv_begin,
                                              int *lo, int *hi)
{
    int a = kv_begin, b = seq_len;
    if (v.attn == FI_ATTN_CAUSAL) {
        b = min(b, p + 1);
        if (v.window) a = max(a, p - v.window + 1);
    } else if (v.attn == FI_ATTN_BIDIR && v.window) {
        a = max(a, p - v.window + 1);
        b = min(b, p + v.window);
    }
    *lo = a;
    *hi = b;
}

/* The keys [a, b) that split `split` of a decode row at position pos sees,
 * in `ntiles` stages of bn keys. Partitions are whole stages long, so only a
 * partition's last stage is partial. */
struct split_keys {
    int a, b, ntiles;
    __device__ __forceinline__ split_keys(const attn_params &p, int pos, int seq_len, int split,
                                          int bn)
    {
        int lo, hi;
        visible_range(p.var, pos, seq_len, p.kv_begin, &lo, &hi);
        const int n = max(hi - lo, 0);
        const int per = ((n + p.num_splits - 1) / p.num_splits + bn - 1) / bn * bn;
        a = lo + split * per;
        b = min(hi, a + per);
        ntiles = b > a ? (b - a + bn - 1) / bn : 0;
    }
};

/* A decode CTA's place in the grid its launcher builds: (tokens, head
 * blocks, splits), or with head_fastest (head blocks, tokens, splits), so
 * the CTAs running together read the same pages' slots, whose heads lie
 * side by side in an NHD cache. Token t, KV partition split, KV head hk,
 * h0, the first of the GB query heads the CTA serves, and nh, how many of
 * them are real (GB but in a KV head's last block when GB does not divide
 * the group: decode_heads.h). */
struct decode_cta {
    int t, split, hk, h0, nh;
    /* Head block sub of the hpc a CTA serves (the launcher's grid has
     * hpc-sized runs of head blocks). */
    __device__ __forceinline__ decode_cta(const attn_params &p, int gb, int hpc = 1, int sub = 0)
    {
        t = p.head_fastest ? blockIdx.y : blockIdx.x;
        split = blockIdx.z;
        const head_block b(p.group, gb, (p.head_fastest ? blockIdx.x : blockIdx.y) * hpc + sub);
        hk = b.hk, h0 = b.h0, nh = b.nh;
    }
};

/* A CTA's cp.async pipeline over ntiles stages in ns buffers: issue(it)
 * starts stage it's copies (every thread its share), tile(it) consumes it.
 * ns - 1 stages are in flight while one is consumed; a stage's buffer is
 * refilled once every thread has left it (the barrier after the wait). */
template <typename Issue, typename Tile>
__device__ __forceinline__ void stage_pipeline(int ns, int ntiles, Issue &&issue, Tile &&tile)
{
    for (int s = 0; s < ns - 1; s++) {
        if (s < ntiles) issue(s);
        cp_async_commit();
    }
    for (int it = 0; it < ntiles; it++) {
        cp_async_wait_n(ns - 2);
        __syncthreads(); /* stage it landed; everyone left stage it-1's buffer */
        if (it + ns - 1 < ntiles) issue(it + ns - 1);
        cp_async_commit();
        tile(it);
    }
    cp_async_wait<0>();
}

/* KV head hk's FP8 dequantisation factors from the scale tensors, which a
 * kernel folds into its score scale (k) and output normalisation (v) once,
 * where it knows its KV head; 1 and 1 without tensors (the host floats are
 * in qk_scale and v_scale then), and for 16-bit caches, whose kernels
 * never read the tensors. */
struct kv_dequant {
    float k, v;
};
template <typename KT> __device__ __forceinline__ kv_dequant tensor_scales(const variant &v, int hk)
{
    kv_dequant s = {1.f, 1.f};
    if constexpr (elem<KT>::fp8)
        if (v.k_scales) {
            s.k = v.k_scales[hk * v.scale_hs];
            s.v = v.v_scales[hk * v.scale_hs];
        }
    return s;
}

/* A raw dot product q.k (stored units) to the base-2 logit under the score
 * scale qk_scale (softmax scale times the key dequantisation scale):
 * soft-cap, ALiBi. */
__device__ __forceinline__ float logit2_at(const variant &v, float qk_scale, float dot, float slope,
                                           int j, int p)
{
    float s = dot * qk_scale;
    if (v.softcap > 0.f) s = v.softcap * tanhf(s * v.inv_softcap);
    if (v.alibi) s += slope * (float)(j - p);
    return s * FI_LOG2E;
}

/* The same under the variant's own score scale. */
__device__ __forceinline__ float logit2(const variant &v, float dot, float slope, int j, int p)
{
    return logit2_at(v, v.qk_scale, dot, slope, j, p);
}

/* A finished row's base-2 state (running max M, sum L) and head h's sink
 * logit, if the variant has sinks, to the factor that normalises the row's
 * O and the row's base-2 LSE. A row that saw nothing (and has no sink) gets
 * factor 0 and LSE -inf. */
__device__ __forceinline__ void finish_state(const variant &v, int h, float L, float M,
                                             float *o_factor, float *lse2)
{
    const bool has_sink = v.sinks != nullptr;
    const float sink2 = has_sink ? v.sinks[h] * FI_LOG2E : -INFINITY;
    const float Mx = has_sink ? fmaxf(M, sink2) : M;
    if (Mx == -INFINITY) {
        *o_factor = 0.f;
        *lse2 = -INFINITY;
        return;
    }
    const float a = M == -INFINITY ? 0.f : exp2f(M - Mx);
    const float den = L * a + (has_sink ? exp2f(sink2 - Mx) : 0.f);
    *o_factor = den > 0.f ? a / den : 0.f;
    *lse2 = Mx + log2f(den);
}

/* One channel d (of dv) of head h, token t, from a merged (O, L, M) state:
 * normalised into the output (and LSE) when the launch is final, else the
 * partial state of split `split` for the merge kernel; v_scale: the value
 * dequantisation of the head's KV head. */
template <typename QT>
__device__ __forceinline__ void store_state(const attn_params &p, bool final_out, int t, int h,
                                            int split, int d, int dv, float O, float L, float M,
                                            float v_scale)
{
    if (final_out) {
        float f, lse2;
        finish_state(p.var, h, L, M, &f, &lse2);
        QT *o = static_cast<QT *>(p.o.out) + (int64_t)t * p.o.out_stride_t +
                (int64_t)h * p.o.out_stride_h;
        o[d] = from_f32<QT>(O * f * v_scale);
        if (d == 0 && p.o.lse) p.o.lse[(int64_t)t * p.o.lse_stride_t + h] = lse2 * FI_LN2;
    } else {
        const int64_t slot = (int64_t)(p.o.part_slot + split) * p.num_tokens + t;
        const float f = L > 0.f ? 1.f / L : 0.f;
        p.o.part_o[(slot * p.num_qo_heads + h) * dv + d] = O * f * v_scale;
        if (d == 0) p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
    }
}

/* A CTA's NR partial states of each of its GB heads (h0..), accumulators
 * [NR][GB][DV] and their maxima and sums [NR][GB] in shared memory, merged
 * and stored (store_state, with the value dequantisation v_scale) for the
 * block's real heads (padding heads past the group, decode_heads.h, are
 * neither read nor stored); each thread takes channels of its own. */
template <typename QT, int NR, int GB, int DV, int THREADS>
__device__ __forceinline__ void merge_cta_states(const attn_params &p, const float *sm_acc,
                                                 const float (*sm_m)[GB], const float (*sm_l)[GB],
                                                 int t, int h0, int split, float v_scale)
{
    const bool final_out = p.num_splits == 1 && !p.partial;
    const int nh = head_block_real(p.group, GB, h0);
    for (int e = threadIdx.x; e < nh * DV; e += THREADS) {
        const int g = e / DV, d = e % DV;
        float M = -INFINITY;
#pragma unroll
        for (int r = 0; r < NR; r++) M = fmaxf(M, sm_m[r][g]);
        float L = 0.f, O = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const float f = exp2f(sm_m[r][g] - M);
                L += sm_l[r][g] * f;
                O += sm_acc[(r * GB + g) * DV + d] * f;
            }
        }
        store_state<QT>(p, final_out, t, h0 + g, split, d, DV, O, L, M, v_scale);
    }
}

} // namespace fi

#endif
