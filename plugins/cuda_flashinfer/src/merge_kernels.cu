/*
 * Combining split-KV states and storing KV (the ABI's merge_states is the
 * shared attnhost/cuda_merge.cuh):
 *  - merge_partials: the split-KV / cascade reduction. S partial states
 *    (fp32 values each normalised by its own denominator, base-2 LSE) of one
 *    (token, head) become the final output in the query dtype and the
 *    natural-log LSE; attention sinks enter here, once.
 *  - write_kv: new tokens' K or V into the paged cache at slot_mapping,
 *    converted (and divided by the scale for FP8).
 */
#include "fi_common.cuh"
#include "fi_dispatch.cuh"

namespace fi {

/* Block-wide reductions of merge_partials (blockDim.x = kMergeThreads). */
constexpr int kMergeThreads = 128;

template <bool MAX> __device__ __forceinline__ float block_reduce(float v, float *scratch)
{
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    __syncthreads(); /* scratch is reused by the next call */
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < kMergeThreads / 32; w++) v = MAX ? fmaxf(v, scratch[w]) : v + scratch[w];
    return v;
}

/* One CTA per (token, head). A single long request splits its keys into
 * up to 128 partitions, so the parts are read in parallel: the LSE maxima
 * and the denominator by one thread per part, the values by channel groups
 * of float4 lanes that each sum every G-th part (G = 128 / (dv / 4)),
 * reduced through shared memory. v head sizes are multiples of 64. */
template <typename QT>
__global__ void __launch_bounds__(kMergeThreads) merge_partials_kernel(const merge_params m)
{
    grid_dependency_wait(); /* launched early (schedule_merge_pdl): the partials' writer must finish
                             */
    __shared__ float scratch[kMergeThreads / 32];
    __shared__ float4 sums[kMergeThreads];
    const int t = blockIdx.x, h = blockIdx.y;
    const int64_t stride_part = (int64_t)m.num_tokens * m.num_heads;
    const int64_t row = (int64_t)t * m.num_heads + h;
    const float *lse = m.part_lse + row;
    const bool has_sink = m.sinks != nullptr;
    const float sink2 = has_sink ? m.sinks[h] * FI_LOG2E : -INFINITY;
    float M = sink2;
    for (int s = threadIdx.x; s < m.num_parts; s += kMergeThreads)
        M = fmaxf(M, lse[s * stride_part]);
    M = block_reduce<true>(M, scratch);
    float den = 0.f;
    if (M != -INFINITY) {
        for (int s = threadIdx.x; s < m.num_parts; s += kMergeThreads)
            den += exp2f(lse[s * stride_part] - M);
        den = block_reduce<false>(den, scratch);
        if (has_sink) den += exp2f(sink2 - M);
    }
    const int lanes = m.dv / 4, groups = kMergeThreads / lanes;
    const int lane = threadIdx.x % lanes, g = threadIdx.x / lanes;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (den > 0.f && g < groups) {
        const float inv = 1.f / den;
#pragma unroll 4
        for (int s = g; s < m.num_parts; s += groups) {
            const float w = exp2f(lse[s * stride_part] - M) * inv;
            const float4 v =
                reinterpret_cast<const float4 *>(m.part_o + (s * stride_part + row) * m.dv)[lane];
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
    }
    sums[threadIdx.x] = acc;
    __syncthreads();
    QT *o = static_cast<QT *>(m.out) + (int64_t)t * m.out_stride_t + (int64_t)h * m.out_stride_h;
    for (int c = threadIdx.x; c < m.dv; c += kMergeThreads) {
        float v = 0.f;
        for (int k = 0; k < groups; k++) {
            const float4 a = sums[k * lanes + c / 4];
            v += (&a.x)[c % 4];
        }
        o[c] = from_f32<QT>(v);
    }
    if (threadIdx.x == 0 && m.lse)
        m.lse[(int64_t)t * m.lse_stride_t + h] = den > 0.f ? (M + log2f(den)) * FI_LN2 : -INFINITY;
}

cudaError_t launch_merge_partials(int q_dtype, const merge_params &m, bool pdl, cudaStream_t st)
{
    if (m.num_tokens == 0) return cudaSuccess;
    FI_DISPATCH_QTYPE(q_dtype, QT, {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        cfg.gridDim = dim3(m.num_tokens, m.num_heads);
        cfg.blockDim = dim3(kMergeThreads);
        cfg.stream = st;
        if (pdl) {
            /* Programmatic dependent launch: the merge grid is scheduled while
             * the kernel before it drains, and waits for it in the kernel. */
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = attr;
            cfg.numAttrs = 1;
        }
        return cudaLaunchKernelEx(&cfg, merge_partials_kernel<QT>, m);
    })
    return cudaPeekAtLastError();
}

/* FP8: stored = real / scale (plugin.h), an IEEE float32 division rounded
 * to nearest; a multiply by the reciprocal rounds some values a step apart
 * after the FP8 rounding (a tie for the quotient is not one for the
 * product). */
template <typename QT, typename KT>
__global__ void write_kv_kernel(const QT *src, int64_t sst, int64_t ssh, KT *cache, kv_geom g,
                                int d, const int64_t *slots, float scale, const float *scales,
                                int scale_hs)
{
    const int t = blockIdx.x, h = blockIdx.y;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    const int64_t blk = slot >> g.page_shift;
    const int64_t off = blk * g.stride_page + (slot & ((1 << g.page_shift) - 1)) * g.stride_slot +
                        (int64_t)h * g.stride_head;
    const QT *s = src + (int64_t)t * sst + (int64_t)h * ssh;
    if constexpr (elem<KT>::fp8) {
        const float sc = scales ? scales[h * scale_hs] : scale;
        for (int c = threadIdx.x; c < d; c += blockDim.x)
            reinterpret_cast<uint8_t *>(cache)[off + c] = to_fp8<KT>(__fdiv_rn(to_f32(s[c]), sc));
    } else {
        for (int c = threadIdx.x; c < d; c += blockDim.x)
            cache[off + c] = from_f32<QT>(to_f32(s[c]));
    }
}

cudaError_t launch_write_kv(int q_dtype, int kv_dtype, const void *src, int64_t src_stride_t,
                            int64_t src_stride_h, void *cache, const kv_geom &g, int d,
                            const int64_t *slot_mapping, int num_tokens, int num_kv_heads,
                            float scale, const float *scales, int scale_hs, cudaStream_t st)
{
    if (num_tokens == 0) return cudaSuccess;
    FI_DISPATCH_QTYPE(q_dtype, QT, {FI_DISPATCH_KVTYPE(kv_dtype, QT, KT, {
                          write_kv_kernel<QT, KT><<<dim3(num_tokens, num_kv_heads), 128, 0, st>>>(
                              static_cast<const QT *>(src), src_stride_t, src_stride_h,
                              static_cast<KT *>(cache), g, d, slot_mapping, scale, scales,
                              scale_hs);
                      })})
    return cudaPeekAtLastError();
}

} // namespace fi
