// Thin wrappers over the Hopper (sm_90) primitives the cuda_fa3 kernels are
// built from, beside the mbarriers and bulk copies of
// <attnhost/cuda_sm90.cuh>: the bulk tensor copy engine (TMA) filling shared
// memory and completing on an mbarrier, wgmma ordering (fence, commit,
// wait), shared-memory matrix descriptors for 128-byte-swizzled tiles,
// named barriers and register reallocation between warpgroups. Each is one
// instruction; keeping them here lets the kernel read as the algorithm.
#pragma once
#include <attnhost/cuda_sm90.cuh>
#include <cuda.h>
#include <stdint.h>

namespace fa3 {

// mbarriers and plain bulk copies come from the plugin API's sm_90 header.
using ah_sm90::bulk_commit;
using ah_sm90::bulk_load;
using ah_sm90::bulk_store;
using ah_sm90::bulk_wait;
using ah_sm90::bulk_wait_read;
using ah_sm90::mbar_arrive;
using ah_sm90::mbar_arrive_tx;
using ah_sm90::mbar_fence_init;
using ah_sm90::mbar_init;
using ah_sm90::mbar_wait;
using ah_sm90::smem_addr;

// ---- TMA -----------------------------------------------------------------

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
                 "r"(c2)
                 : "memory");
}

__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar,
                                            int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
                 "r"(c2), "r"(c3)
                 : "memory");
}

__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- wgmma ordering ----------------------------------------------------------

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across async MMAs.
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M> __device__ __forceinline__ void reg_fence(uint32_t (&r)[N][M])
{
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < M; j++) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Descriptor of a 128-byte-swizzled tile in shared memory (PTX "matrix
// descriptor"): start address, leading and stride byte offsets, all in
// 16-byte units, layout type 1 = 128B swizzle in bits 62-63.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t saddr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes)
{
    uint64_t d = 0;
    d |= (uint64_t)((saddr & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)((sbo_bytes >> 4) & 0x3FFF) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

// ---- warpgroup coordination ----------------------------------------------------

__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <int N> __device__ __forceinline__ void regs_dealloc()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void regs_alloc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

// stmatrix: four 8x8 matrices of b16 per warp, matrix i's row addresses
// from lanes 8i..8i+7; lane t holds row t / 4, elements 2 (t % 4) and
// 2 (t % 4) + 1 of each (the wgmma accumulator's fragment).
__device__ __forceinline__ void stsm_x4(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2,
                                        uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The same for global memory: the copy engine's reads and writes of global
// data ordered with this thread's ordinary loads and stores.
__device__ __forceinline__ void fence_proxy_async_global()
{
    asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Flags between CTAs, at GPU scope.
__device__ __forceinline__ uint64_t ld_relaxed_gpu(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

} // namespace fa3
