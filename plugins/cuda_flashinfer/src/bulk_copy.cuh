/*
 * mbarriers and bulk asynchronous copies (sm_90). An mbarrier completes a
 * phase once its arrivals and its expected transaction bytes are in; the
 * copy engine counts bytes off it as they land. The Hopper prefill's
 * pipeline (prefill_sm90.cu) waits and releases on them; the read-pattern
 * benchmark (fi_readbw) fills the decode's stages with one bulk copy per
 * 256-byte row to measure what the copy engine reaches on that pattern.
 */
#ifndef FI_BULK_COPY_CUH
#define FI_BULK_COPY_CUH

#include <cstdint>

/* Everything here is sm_90; the sm_80 build keeps the callers out (the
 * launcher selects them by compute capability), so there it traps. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FI_SM90_ASM(...) __trap()
#else
#define FI_SM90_ASM(...) asm volatile(__VA_ARGS__)
#endif

namespace fi {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    FI_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* Makes initialised barriers visible to the copy engine (async proxy). */
__device__ __forceinline__ void mbar_init_fence()
{
    FI_SM90_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    FI_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* One arrival that also expects `bytes` of copies to complete the phase. */
__device__ __forceinline__ void mbar_arrive_expect(uint32_t bar, uint32_t bytes)
{
    FI_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* Spins until the phase of the given parity has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    FI_SM90_ASM("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16, both addresses 16-byte aligned) from global src
 * to shared dst, completing on bar. */
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    FI_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

} // namespace fi

#endif
