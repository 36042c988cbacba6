/*
 * What the Hopper kernels (prefill_sm90.cu, decode_mla_sm90.cu) share: the
 * ordering of the warpgroup MMA (wgmma.mma_async, sm_90a: fences, commits,
 * group waits), named barriers, the async-proxy fence, cp.async groups, and
 * the shared-memory matrix descriptor. The MMA wrappers
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

/* The rest the Hopper kernels share. Their warpgroups meet on named
 * barriers (bar.sync / bar.arrive over n threads; 0 is __syncthreads), hand
 * cp.async-written shared memory to wgmma (which reads through the async
 * proxy) after fence_async_smem, and take exp2 approximately. The cp.async
 * group calls carry a memory clobber, so no shared-memory access moves
 * across them. */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void named_sync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait_copies()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * and stride byte offsets (16-byte units), layout type 1 in bits 62-63. */
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

} // namespace fi

#endif
