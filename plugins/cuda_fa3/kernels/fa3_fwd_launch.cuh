// Host-side launch of one forward-kernel instance: builds the three TMA
// descriptors (Q, K cache, V cache) and starts the persistent grid. The
// descriptors travel as __grid_constant__ parameters, so a captured CUDA
// graph carries them along with the tensor addresses it was captured with.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <type_traits>

#include "fa3_fwd_kernel.cuh"
#include "fa3_launch.h"

namespace fa3 {

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled lives in libcuda; the runtime hands out its address
// so the plugin never links the driver library.
encode_tiled_fn encode_tiled();

// SST: FP8 staging stages, as many as fit beside the 16-bit ring in the
// 227 KiB a block may use (d128 and d256 land at 224 KiB plus barriers).
template <int D> struct cfg;
template <> struct cfg<64> {
    static constexpr int BN = FA3_BLOCK_N(64), STAGES = 3, SST = 3;
};
template <> struct cfg<128> {
    static constexpr int BN = FA3_BLOCK_N(128), STAGES = 2, SST = 2;
};
template <> struct cfg<256> {
    static constexpr int BN = FA3_BLOCK_N(256), STAGES = 2, SST = 1;
};
// Ragged qk 192 / v 128 (16-bit only): Q 48 KiB and two stages of K 48 KiB
// and V 32 KiB.
template <> struct cfg<192> {
    static constexpr int BN = FA3_BLOCK_N(192), STAGES = 2, SST = 0;
};

template <typename T, typename KV> constexpr int sst_of(int sst)
{
    return std::is_same<T, KV>::value ? 0 : sst;
}

constexpr size_t kSmemOptin = 227 * 1024; // dynamic shared memory a Hopper block may opt into

template <int D, typename T, typename KV, bool OS, int DV = D> constexpr size_t smem_bytes_of()
{
    return sizeof(fwd_smem<D, cfg<D>::BN, cfg<D>::STAGES, T, sst_of<T, KV>(cfg<D>::SST), OS, DV>) +
           1024;
}
// The epilogue stages O in shared memory (out_stage) where it fits beside
// the rings: 16-bit KV at head size 64 and 128.
template <int D, typename T, typename KV, int DV = D> constexpr bool out_staged()
{
    return smem_bytes_of<D, T, KV, true, DV>() <= kSmemOptin;
}
template <int D, typename T, typename KV = T, int DV = D> constexpr size_t smem_bytes()
{
    return smem_bytes_of<D, T, KV, out_staged<D, T, KV, DV>(), DV>();
}

template <typename T> constexpr CUtensorMapDataType q_tensor_type()
{
    return std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// The three TMA descriptors of a forward launch: Q in 64-column 128-byte
// swizzled boxes of (group heads x tpt tokens); the K and V caches, as
// [blocks, slots, heads, D] (NHD) or [blocks, heads, slots, D] (HND) (V's
// rows DV wide), in boxes of kv_cols elements by box_rows slots of one
// head. Returns 0, or a CUDA error with err filled.
template <int D, typename T, int DV = D>
int encode_descs(const fa3_fwd_launch *L, CUtensorMapDataType kv_type, cuuint32_t kv_bytes,
                 cuuint32_t kv_cols, CUtensorMapSwizzle kv_swizzle, CUtensorMap *tq,
                 CUtensorMap *tk, CUtensorMap *tv, char *err, size_t errlen)
{
    const fa3_params &p = L->p;
    encode_tiled_fn enc = encode_tiled();
    if (!enc) {
        snprintf(err, errlen, "cuTensorMapEncodeTiled is not available from the driver");
        return (int)cudaErrorNotSupported;
    }
    const cuuint32_t es = sizeof(T);
    {
        cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)p.num_q_heads, (cuuint64_t)L->num_tokens};
        cuuint64_t strides[2] = {(cuuint64_t)L->q_head_stride * es,
                                 (cuuint64_t)L->q_tok_stride * es};
        cuuint32_t box[3] = {64, (cuuint32_t)p.group, (cuuint32_t)p.tpt};
        cuuint32_t estr[3] = {1, 1, 1};
        CUresult r = enc(tq, q_tensor_type<T>(), 3, const_cast<void *>(L->q), dims, strides, box,
                         estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "TMA descriptor for q failed (CUresult %d)", (int)r);
            return (int)cudaErrorInvalidValue;
        }
    }
    for (int kv = 0; kv < 2; kv++) {
        const int64_t *sd = kv ? L->v_strides : L->k_strides; // block, slot, head (elements)
        const void *base = kv ? L->v_cache : L->k_cache;
        const int64_t a_str = p.kv_hnd ? sd[1] : sd[2], b_str = p.kv_hnd ? sd[2] : sd[1];
        const cuuint64_t a_dim = p.kv_hnd ? p.block_size : p.num_kv_heads;
        const cuuint64_t b_dim = p.kv_hnd ? p.num_kv_heads : p.block_size;
        cuuint64_t dims[4] = {(cuuint64_t)(kv ? DV : D), a_dim, b_dim, (cuuint64_t)p.num_blocks};
        cuuint64_t strides[3] = {(cuuint64_t)a_str * kv_bytes, (cuuint64_t)b_str * kv_bytes,
                                 (cuuint64_t)sd[0] * kv_bytes};
        cuuint32_t box[4] = {kv_cols, p.kv_hnd ? (cuuint32_t)p.box_rows : 1u,
                             p.kv_hnd ? 1u : (cuuint32_t)p.box_rows, 1};
        cuuint32_t estr[4] = {1, 1, 1, 1};
        CUresult r = enc(kv ? tv : tk, kv_type, 4, const_cast<void *>(base), dims, strides, box,
                         estr, CU_TENSOR_MAP_INTERLEAVE_NONE, kv_swizzle,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "TMA descriptor for the %s cache failed (CUresult %d)",
                     kv ? "value" : "key", (int)r);
            return (int)cudaErrorInvalidValue;
        }
    }
    return 0;
}

// DV: the value head size; RG: ragged K/V (fwd_kernel).
template <int D, typename T, typename KV = T, int DV = D, bool RG = false>
int launch_fwd(const fa3_fwd_launch *L, char *err, size_t errlen)
{
    constexpr int BN = cfg<D>::BN, STAGES = cfg<D>::STAGES, SST = sst_of<T, KV>(cfg<D>::SST);
    constexpr bool F8 = SST > 0;
    constexpr size_t smem = smem_bytes<D, T, KV, DV>();
    static_assert(smem <= kSmemOptin, "shared memory over the 227 KiB a block may use");
    const fa3_params &p = L->p;
    // 16-bit KV: 64-column swizzled boxes; FP8: one unswizzled box of all D
    // bytes per row (the converter warps apply the swizzle).
    CUtensorMap tq, tk, tv;
    const int de = encode_descs<D, T, DV>(
        L, F8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : q_tensor_type<T>(), sizeof(KV), F8 ? D : 64,
        F8 ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B, &tq, &tk, &tv, err, errlen);
    if (de) return de;
    constexpr bool OS = out_staged<D, T, KV, DV>();
    auto kern = fwd_kernel<D, BN, STAGES, T, KV, SST, OS, false, DV, RG>;
    // ALiBi without soft-cap: its own instance (fwd_kernel's AR); ragged
    // layers take the pre-pass instead
    if constexpr (!F8 && D != 64 && !RG)
        if (p.alibi && !(p.softcap > 0.f) && p.scale_log2 > 0.f)
            kern = fwd_kernel<D, BN, STAGES, T, KV, SST, OS, true>;
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess) {
        kern<<<L->grid, fwd_threads<D>, smem, (cudaStream_t)L->stream>>>(tq, tk, tv, p);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) snprintf(err, errlen, "forward kernel launch: %s", cudaGetErrorString(e));
    return (int)e;
}

} // namespace fa3

#define FA3_FWD_INSTANCE(D, T, NAME) \
    extern "C" int NAME(const fa3_fwd_launch *L, char *err, size_t errlen) \
    { \
        return fa3::launch_fwd<D, T>(L, err, errlen); \
    }
#define FA3_FWD_INSTANCE_RAGGED(D, DV, T, NAME) \
    extern "C" int NAME(const fa3_fwd_launch *L, char *err, size_t errlen) \
    { \
        return fa3::launch_fwd<D, T, T, DV, true>(L, err, errlen); \
    }
#define FA3_FWD_INSTANCE_KV8(D, T, NAME) \
    extern "C" int NAME(const fa3_fwd_launch *L, char *err, size_t errlen) \
    { \
        return fa3::launch_fwd<D, T, __nv_fp8_e4m3>(L, err, errlen); \
    }
