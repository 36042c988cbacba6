// Host-side launch of the FP8-compute kernel (fa3_fwd_fp8c.cuh): Q keeps
// its 16-bit descriptor; K and V get UINT8 descriptors with one 128-byte
// swizzled box per row block, so K lands in the layout QK^T reads and V in
// the staging layout the transposing warps read.
#pragma once
#include "fa3_fwd_fp8c.cuh"
#include "fa3_fwd_launch.cuh"

namespace fa3 {

// 4 K / V^T stages (16 and 17 KiB per tile) and 3 V staging stages: 32
// KiB of Q + 64 + 68 + 48 KiB = 212 KiB; up to 4 K and 3 V tiles in flight
// per SM, which decode needs to keep HBM busy. Prefill (fa3_fwd_launch's
// stage_out) gives up a K / V^T stage for the epilogue's output staging
// (34 KiB, out_stage): compute-bound, it loses 1-2% to the shallower ring
// and gains 1-6% from the staged stores. STAGES_OS: its ring.
// EMU: column groups (of 16) whose exp2 runs on the FMA pipe (exp2_fma;
// 4 measured best of 0-8 with V transposed in every item).
// EMU_SHARED: the same for a prefill whose V^T is shared (vt_source): with
// the transposers mostly idle, the MIO queue has room for more MUFU work,
// and under the 700 W cap that sustained prefill hits, the seven FMA-pipe
// instructions of exp2_fma cost more than they save (2 measured level with
// 0 and 1 and 2-6% faster than 4).
struct cfg8 {
    static constexpr int STAGES = 4, STAGES_OS = 3, SST = 3, EMU = 4, EMU_SHARED = 2;
};

template <typename T, int STAGES = cfg8::STAGES, int SST = cfg8::SST, bool OS = false>
constexpr size_t smem_bytes_fp8c()
{
    return sizeof(fp8c_smem<128, STAGES, SST, T, OS>) + 1024;
}

template <typename T> int launch_fwd_fp8c(const fa3_fwd_launch *L, char *err, size_t errlen)
{
    constexpr int D = 128, STAGES = cfg8::STAGES, STAGES_OS = cfg8::STAGES_OS, SST = cfg8::SST;
    // state_create checks the device against the widening d128 instance's
    // figure (fa3_fwd_smem_bytes), which must cover this kernel too.
    static_assert(smem_bytes_fp8c<T>() <= smem_bytes<128, T, __nv_fp8_e4m3>(),
                  "FP8 compute needs more shared memory");
    static_assert(smem_bytes_fp8c<T, STAGES_OS, SST, true>() <= smem_bytes<128, T, __nv_fp8_e4m3>(),
                  "FP8 compute with output staging needs more shared memory");
    if (L->head_dim != D) {
        snprintf(err, errlen, "forward: the FP8-compute kernel has head size 128 only, not %d",
                 L->head_dim);
        return (int)cudaErrorInvalidValue;
    }
    // Q as for every instance; K and V as stored bytes, one 128-byte
    // swizzled box of all D bytes per row.
    CUtensorMap tq, tk, tv;
    const int de = encode_descs<D, T>(L, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, D,
                                      CU_TENSOR_MAP_SWIZZLE_128B, &tq, &tk, &tv, err, errlen);
    if (de) return de;
    // Decode: the streaming instance. Prefill: output staging, and the
    // exp2 split that suits whether its V^T is shared (p.vt) or not.
    auto kern = fwd_fp8c_kernel<D, STAGES, SST, T, cfg8::EMU>;
    size_t smem = smem_bytes_fp8c<T>();
    if (L->stage_out) {
        kern = L->p.vt ? fwd_fp8c_kernel<D, STAGES_OS, SST, T, cfg8::EMU_SHARED, true>
                       : fwd_fp8c_kernel<D, STAGES_OS, SST, T, cfg8::EMU, true>;
        smem = smem_bytes_fp8c<T, STAGES_OS, SST, true>();
    }
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess) {
        kern<<<L->grid, 384, smem, (cudaStream_t)L->stream>>>(tq, tk, tv, L->p);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess)
        snprintf(err, errlen, "FP8-compute forward kernel launch: %s", cudaGetErrorString(e));
    return (int)e;
}

} // namespace fa3

#define FA3_FWD_INSTANCE_FP8C(T, NAME) \
    extern "C" int NAME(const fa3_fwd_launch *L, char *err, size_t errlen) \
    { \
        return fa3::launch_fwd_fp8c<T>(L, err, errlen); \
    }
