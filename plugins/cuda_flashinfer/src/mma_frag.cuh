/*
 * Warp-level tensor-core building blocks (sm_80 and up) shared by the
 * prefill and decode kernels: mma.sync on 16-bit operands with fp32
 * accumulators, ldmatrix (plain and transposing) from shared memory,
 * movmatrix (an 8x8 transpose in registers) and the XOR swizzle that keeps
 * the 8 rows one ldmatrix phase reads in 8 different bank groups.
 *
 * Fragment layouts follow the PTX manual; with g = lane / 4, t = lane % 4,
 * an m16n8 accumulator holds (row g, cols 2t, 2t+1) and (row g+8, same).
 */
#ifndef FI_MMA_FRAG_CUH
#define FI_MMA_FRAG_CUH

#include "fi_common.cuh"

namespace fi {

/* mma_op<T>::run: c[16x8] += a[16x16] b[16x8]; run_k8: c[16x8] += a[16x8]
 * b[8x8]. PTX names the operand type inside the instruction text, which
 * only a string literal can carry, so one macro stamps out both
 * specialisations (TY: "bf16" or "f16"). */
template <typename T> struct mma_op;
#define FI_MMA_OP(T, TY) \
    template <> struct mma_op<T> { \
        static __device__ __forceinline__ void run(float *c, const uint32_t *a, uint32_t b0, \
                                                   uint32_t b1) \
        { \
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, " \
                         "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)); \
        } \
        static __device__ __forceinline__ void run_k8(float *c, uint32_t a0, uint32_t a1, \
                                                      uint32_t b0) \
        { \
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, " \
                         "{%4,%5}, {%6}, {%0,%1,%2,%3};\n" \
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) \
                         : "r"(a0), "r"(a1), "r"(b0)); \
        } \
    };
FI_MMA_OP(__nv_bfloat16, "bf16")
FI_MMA_OP(half, "f16")
#undef FI_MMA_OP

__device__ __forceinline__ void ldsm_x4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const void *p)
{
    ldsm_x4(r, smem_addr(p));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const void *p)
{
    ldsm_x4_t(r, smem_addr(p));
}

/* The 8x8 16-bit matrix whose fragment the warp holds (row g, cols 2t,
 * 2t+1 in x), transposed: the result holds (row g, cols 2t, 2t+1) of the
 * transpose. */
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x)
{
    uint32_t r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
    return r;
}

/* Byte offset of (row, 16-byte chunk) in a swizzled tile of CH-chunk rows. */
template <int CH> __device__ __forceinline__ uint32_t swz(int row, int chunk)
{
    return (uint32_t)(row * CH + (chunk ^ (row & 7))) * 16u;
}

} // namespace fi

#endif
