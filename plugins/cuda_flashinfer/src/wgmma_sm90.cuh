/*
 * Ordering for the Hopper warpgroup MMA (wgmma.mma_async, sm_90a) of the
 * Hopper kernels (prefill_sm90.cu, decode_mla_sm90.cu): fences, commits and
 * group waits, and the shared-memory matrix descriptor. The MMA wrappers
 * themselves are the plugins' shared attnhost/cuda_wgmma.cuh: ss (A and B
 * from shared memory, both K-major; scale_d 0 overwrites D, so S needs no
 * zeroing) and rs (A from registers in the accumulator layout, B MN-major).
 */
#ifndef FI_WGMMA_SM90_CUH
#define FI_WGMMA_SM90_CUH

#include <stdint.h>

#include <attnhost/cuda_wgmma.cuh>

namespace fi {

/* Registers written by ordinary instructions are read by the next wgmma. */
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving reads or writes of v across a wgmma wait. */
__device__ __forceinline__ void reg_fence(float &v) { asm volatile("" : "+f"(v)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t &v) { asm volatile("" : "+r"(v)::"memory"); }

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * and stride byte offsets (16-byte units), layout type 1 in bits 62-63. */
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

} // namespace fi

#endif
