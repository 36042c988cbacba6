/*
 * What the Hopper kernels (prefill_sm90.cu, decode_mla_sm90.cu,
 * decode_mla_fp8_sm90.cu) share: the ordering of the warpgroup MMA
 * (wgmma.mma_async, sm_90a: fences, commits, group waits), the warpgroup
 * index, named barriers, the async-proxy fence, cp.async groups, and
 * the shared-memory matrix descriptor. The MMA wrappers
 * themselves are the plugins' shared attnhost/cuda_wgmma.cuh: ss (A and B
 * from shared memory, both K-major; scale_d 0 overwrites D, so S needs no
 * zeroing) and rs (A from registers in the accumulator layout, B MN-major).
 */
#ifndef FI_WGMMA_SM90_CUH
#define FI_WGMMA_SM90_CUH

#include <stdint.h>

#include <attnhost/cuda_sm90.cuh>
#include <attnhost/cuda_wgmma.cuh>

#include "fi_common.cuh"

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
/* This thread's warpgroup, broadcast from lane 0 so ptxas knows it is
 * warp-uniform: shared-memory descriptors derived from it then live in
 * uniform registers, not moved into them (R2UR) before every wgmma. */
__device__ __forceinline__ int warpgroup_index()
{
    return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
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

/* A ring of n stages' mbarriers, "full" at bar0 + 8 s and "empty" at
 * bar0 + 8 (n + s), expecting the given arrivals; one thread initialises
 * them before the CTA's first barrier. */
__device__ __forceinline__ void mbar_ring_init(uint32_t bar0, int n, uint32_t full_arrivals,
                                               uint32_t empty_arrivals)
{
    for (int s = 0; s < n; s++) {
        ah_sm90::mbar_init(bar0 + 8u * (uint32_t)s, full_arrivals);
        ah_sm90::mbar_init(bar0 + 8u * (uint32_t)(n + s), empty_arrivals);
    }
    ah_sm90::mbar_fence_init();
}
/* 16 bytes from global to shared memory by cp.async (the L2 only),
 * zero-filled where !ok. */
__device__ __forceinline__ void copy16(uint32_t dst, const void *src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0)
                 : "memory");
}
/* One arrival on bar once every copy this thread issued so far landed (the
 * barrier's count includes it); and a wait for all of them. */
__device__ __forceinline__ void copies_arrive(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wait_all_copies()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
/* Shared-memory loads and stores by address. */
__device__ __forceinline__ uint4 lds16(uint32_t a)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a));
    return v;
}
__device__ __forceinline__ void sts16(uint32_t a, uint4 v)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}
/* An m64 accumulator as each thread holds it: per 8 columns, 4 floats, two
 * of row r then two of row r + 8. acc_to_a packs it (S's probabilities) as
 * the register A operand of the k16 steps that follow (P V); scale_rows
 * multiplies row r by alpha[0] and row r + 8 by alpha[1] (O's rescale). */
template <typename QT, int KK, int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[KK][4], const float (&acc)[N])
{
    static_assert(N == 8 * KK, "16 columns per k16 step");
#pragma unroll
    for (int kk = 0; kk < KK; kk++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            a[kk][j] = pack2<QT>(acc[8 * kk + 2 * j], acc[8 * kk + 2 * j + 1]);
}
template <int N> __device__ __forceinline__ void scale_rows(float (&acc)[N], const float *alpha)
{
#pragma unroll
    for (int n = 0; n < N / 4; n++) {
        acc[4 * n] *= alpha[0];
        acc[4 * n + 1] *= alpha[0];
        acc[4 * n + 2] *= alpha[1];
        acc[4 * n + 3] *= alpha[1];
    }
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * and stride byte offsets (16-byte units), layout type 1 in bits 62-63. */
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

/* The descriptor of a start address `bytes` past d's: the start field
 * (bits 0-13, 16-byte units) gains the offset in one 32-bit add, where
 * wgmma_desc takes four operations. Nothing carries out of the field:
 * shared memory ends below 256 KiB, 2^14 units. */
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t bytes)
{
    uint64_t r;
    asm("mov.b64 %0, {%1, %2};\n"
        : "=l"(r)
        : "r"((uint32_t)d + (bytes >> 4)), "r"((uint32_t)(d >> 32)));
    return r;
}

} // namespace fi

#endif
