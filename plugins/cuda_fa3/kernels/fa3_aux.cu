// The small kernels around the forward pass: the split-KV combine (FA3's
// "combine" step), the KV-cache write (with FP8 quantization), and the one
// host helper every forward instance shares: the driver's tensor-map
// encoder, fetched through the runtime. (merge_states is the shared
// attnhost/cuda_merge.cuh, in src/fa3_merge.cu.)
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>

#include "fa3_fwd_launch.cuh"
#include "fa3_launch.h"

namespace fa3 {

encode_tiled_fn encode_tiled()
{
    static encode_tiled_fn fn = nullptr;
    static bool tried = false;
    if (!tried) {
        tried = true;
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<encode_tiled_fn>(p);
    }
    return fn;
}

__device__ __forceinline__ float load_el(const void *b, size_t i, int t)
{
    switch (t) {
    case FA3_T_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(b)[i]);
    case FA3_T_FP16: return __half2float(reinterpret_cast<const __half *>(b)[i]);
    default: return 0.f;
    }
}

__device__ __forceinline__ void store_el(void *b, size_t i, int t, float v)
{
    switch (t) {
    case FA3_T_BF16: reinterpret_cast<__nv_bfloat16 *>(b)[i] = __float2bfloat16_rn(v); break;
    case FA3_T_FP16: reinterpret_cast<__half *>(b)[i] = __float2half_rn(v); break;
    case FA3_T_FP8_E4M3:
        reinterpret_cast<uint8_t *>(b)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
        break;
    case FA3_T_FP8_E5M2:
        reinterpret_cast<uint8_t *>(b)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
        break;
    }
}

// One warp per output row: combine the row's split partials by their LSE,
// adding the sink's mass once. Rows whose every split saw no key stay 0.
template <int D> __global__ void combine_kernel(const fa3_params p, int dtype)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, nwarps = blockDim.x / 32;
    const int n_jobs = p.counts->n_combine;
    const float log2e = 1.4426950408889634f, ln2 = 0.6931471805599453f;
    for (int j = blockIdx.x; j < n_jobs; j += gridDim.x) {
        const fa3_combine_job job = p.combine[j];
        for (int r = warp; r < job.rows; r += nwarps) {
            const int t = r / p.group, g = r - t * p.group;
            const int tok = job.q_tok0 + t, head = job.kvh * p.group + g;
            float mx = -INFINITY;
            for (int s = 0; s < job.nsplit; s++)
                mx = fmaxf(mx, p.part_lse[job.part_row + s * job.rows + r]);
            const float sink = p.sinks ? p.sinks[head] : -INFINITY;
            mx = fmaxf(mx, sink);
            const float mu = mx == -INFINITY ? 0.f : mx;
            float acc[D / 32];
#pragma unroll
            for (int i = 0; i < D / 32; i++) acc[i] = 0.f;
            float total = p.sinks ? exp2f((sink - mu) * log2e) : 0.f;
            for (int s = 0; s < job.nsplit; s++) {
                const size_t row = (size_t)job.part_row + (size_t)s * job.rows + r;
                const float w = exp2f((p.part_lse[row] - mu) * log2e);
                total += w;
                if (w == 0.f) continue;
#pragma unroll
                for (int i = 0; i < D / 32; i++) acc[i] += w * p.part_o[row * D + i * 32 + lane];
            }
            const float vs = p.v_scales ? p.v_scales[job.kvh * p.scale_head_stride] : p.v_scale;
            const float inv = total > 0.f ? vs / total : 0.f;
            const size_t o = (size_t)tok * p.out_tok_stride + (size_t)head * p.out_head_stride;
#pragma unroll
            for (int i = 0; i < D / 32; i++)
                store_el(p.out, o + i * 32 + lane, dtype, acc[i] * inv);
            if (p.lse && lane == 0)
                p.lse[(size_t)tok * p.num_q_heads + head] =
                    total > 0.f ? mu + log2f(total) * ln2 : -INFINITY;
        }
    }
}

__global__ void write_kv_kernel(const fa3_kv_write w)
{
    const int64_t per_tok = (int64_t)w.num_kv_heads * w.head_dim;
    const int64_t n = (int64_t)w.num_tokens * per_tok;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / per_tok, rem = i - t * per_tok;
        const int h = (int)(rem / w.head_dim), c = (int)(rem - (int64_t)h * w.head_dim);
        const int64_t slot = w.slot_mapping[t];
        if (slot < 0) continue;
        const int64_t blk = slot / w.block_size, off = slot % w.block_size;
        const float k = load_el(w.key, t * w.k_tok_stride + h * w.k_head_stride + c, w.src_dtype);
        const float v = load_el(w.value, t * w.v_tok_stride + h * w.v_head_stride + c, w.src_dtype);
        const bool q8 = w.cache_dtype >= FA3_T_FP8_E4M3;
        const float ks = w.k_scales ? w.k_scales[h * w.scale_head_stride] : w.k_scale;
        const float vs = w.v_scales ? w.v_scales[h * w.scale_head_stride] : w.v_scale;
        // IEEE float division (the build uses fast math, so '/' would not be),
        // as the reference writer divides; the store rounds to nearest even
        // and saturates at the format's largest finite value.
        store_el(w.k_cache, blk * w.k_strides[0] + off * w.k_strides[1] + h * w.k_strides[2] + c,
                 w.cache_dtype, q8 ? __fdiv_rn(k, ks) : k);
        store_el(w.v_cache, blk * w.v_strides[0] + off * w.v_strides[1] + h * w.v_strides[2] + c,
                 w.cache_dtype, q8 ? __fdiv_rn(v, vs) : v);
    }
}

} // namespace fa3

template <int D> static size_t smem_max()
{
    const size_t a = fa3::smem_bytes<D, __nv_bfloat16>(),
                 b = fa3::smem_bytes<D, __nv_bfloat16, __nv_fp8_e4m3>();
    return a > b ? a : b;
}

extern "C" size_t fa3_fwd_smem_bytes(int head_dim)
{
    switch (head_dim) {
    case 64: return smem_max<64>();
    case 128: return smem_max<128>();
    case 192: return fa3::smem_bytes<192, __nv_bfloat16, __nv_bfloat16, 128>();
    default: return smem_max<256>();
    }
}

extern "C" int fa3_launch_combine(const fa3_params *p, int head_dim, int dtype, int grid,
                                  void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    switch (head_dim) {
    case 64: fa3::combine_kernel<64><<<grid, 256, 0, s>>>(*p, dtype); break;
    case 128: fa3::combine_kernel<128><<<grid, 256, 0, s>>>(*p, dtype); break;
    case 256: fa3::combine_kernel<256><<<grid, 256, 0, s>>>(*p, dtype); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int fa3_launch_write_kv(const fa3_kv_write *w)
{
    const int64_t n = (int64_t)w->num_tokens * w->num_kv_heads * w->head_dim;
    if (n == 0) return 0;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    fa3::write_kv_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)w->stream>>>(*w);
    return (int)cudaGetLastError();
}
