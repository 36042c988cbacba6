/*
 * Hopper (sm_90) asynchronous-copy primitives for CUDA plugins, one PTX
 * instruction each: mbarriers (a phase completes once its arrivals and its
 * expected transaction bytes are in; the copy engine counts bytes off as
 * they land) and bulk copies between global and shared memory, which the
 * engine runs on its own (the async proxy).
 *
 * Barriers and shared buffers are named by 32-bit shared addresses
 * (smem_addr); the pointer overloads convert. Compiled for an older target
 * the sm_90 bodies trap: plugins select their sm_90 kernels by compute
 * capability, so an sm_80 build may include this header and never run them.
 */
#ifndef ATTNHOST_CUDA_SM90_CUH
#define ATTNHOST_CUDA_SM90_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define AH_SM90_ASM(...) __trap()
#else
#define AH_SM90_ASM(...) asm volatile(__VA_ARGS__)
#endif

namespace ah_sm90 {

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers ---------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    AH_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
// Makes initialised barriers visible to the copy engine.
__device__ __forceinline__ void mbar_fence_init()
{
    AH_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also announces tx_bytes the copy engine will deliver.
__device__ __forceinline__ void mbar_arrive_tx(uint32_t bar, uint32_t tx_bytes)
{
    AH_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx_bytes)
                : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    AH_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Spins until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    AH_SM90_ASM("{\n"
                ".reg .pred done;\n"
                "WAIT_%=:\n"
                "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                "@!done bra WAIT_%=;\n"
                "}\n" ::"r"(bar),
                "r"(parity)
                : "memory");
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
    mbar_init(smem_addr(bar), count);
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *bar, uint32_t tx_bytes)
{
    mbar_arrive_tx(smem_addr(bar), tx_bytes);
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) { mbar_arrive(smem_addr(bar)); }
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
    mbar_wait(smem_addr(bar), parity);
}

// ---- bulk copies -------------------------------------------------------------

// bytes (a multiple of 16, both addresses 16-byte aligned) from global src
// to shared dst as they are, completing on bar.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                          uint32_t bar)
{
    AH_SM90_ASM(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    bulk_load(smem_addr(dst), src, bytes, smem_addr(bar));
}

// The reverse, shared to global, in this thread's bulk group: bulk_commit
// closes the group, bulk_wait_read<N> waits until at most N groups still
// read shared memory, bulk_wait<N> until the writes of all but the N most
// recent groups are done.
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes)
{
    AH_SM90_ASM("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src),
                "r"(bytes)
                : "memory");
}
__device__ __forceinline__ void bulk_store(void *dst, const void *src, uint32_t bytes)
{
    bulk_store(dst, smem_addr(src), bytes);
}
__device__ __forceinline__ void bulk_commit()
{
    AH_SM90_ASM("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    AH_SM90_ASM("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N = 0> __device__ __forceinline__ void bulk_wait()
{
    AH_SM90_ASM("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

} // namespace ah_sm90

#endif
