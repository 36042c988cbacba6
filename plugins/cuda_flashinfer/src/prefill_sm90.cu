/*
 * Hopper (sm_90a) tensor-core kernel for prefill, extend and mixed batches at
 * head size 128 on a 16-bit cache of the query's type: masks, window, sinks,
 * soft-cap, ALiBi, LSE, partial states, split keys and the cascade prefix
 * pass. Compiled only for sm_90a (its own object library); launched on
 * compute capability 9.0 in place of prefill_fast.cuh's mma.sync kernel at
 * d128, and of prefill_kernel.cuh's general one for soft-cap and ALiBi. The
 * instance with LOGITS transforms each score before the mask, as logit2
 * does, in as few instructions as it takes: soft-cap by the hardware tanh
 * (tanh.approx, as cuda_fa3's fast-math build), the ALiBi bias from one
 * conversion per row and tile (the key offsets within a tile are
 * constants); the exponentials and conversions share one narrow pipe with
 * tanh. The plain instance folds the softmax scale into the exponent.
 *
 * One CTA of three warpgroups per (128 packed rows = one plan tile, KV head,
 * key range), 128-key tiles:
 *   - warpgroup 0 is a producer: its 128 threads copy K and V tiles with
 *     cp.async (two threads per key row, its page looked up a tile ahead)
 *     into two-stage rings (K and V separately, so K(j+1) lands before V(j)
 *     is consumed), 128-byte swizzled as wgmma reads them. Once a thread's
 *     own copies of a tile have landed it fences them to the async proxy and
 *     arrives on the tile's "full" mbarrier; before reusing a stage it waits
 *     on the "empty" mbarrier the consumers release as soon as the wgmma
 *     reading it retires. It gives its registers away (setmaxnreg).
 *   - warpgroups 1 and 2 own 64 rows each. S(j) = Q K(j)^T by wgmma
 *     m64n128k16 with Q and K read from shared memory by descriptors, P kept
 *     in registers as the A operand of O += P V (V read MN-major). Inside a
 *     warpgroup, S(j) and P(j-1) V(j-1) are issued together and the softmax
 *     of S(j) runs while P.V is in flight (O rescaled once it retires);
 *     between the two, named barriers alternate the GEMM issue (ping-pong):
 *     one warpgroup issues only after the other issued its own, so one's
 *     softmax runs while the other's GEMMs occupy the tensor cores.
 * No barrier spans the whole CTA inside the key loop, so the two consumer
 * warpgroups' softmaxes never coincide.
 * Shared memory: Q 32 KiB + K 2 x 32 + V 2 x 32 = 160 KiB, one CTA per SM.
 */
#include <limits.h>

#include "fi_common.cuh"
#include "prefill_rows.cuh"
#include "wgmma_sm90.cuh"

namespace fi {

using ah_sm90::mbar_arrive;
using ah_sm90::mbar_init;
using ah_sm90::mbar_wait;

namespace sm90 {
__device__ __forceinline__ float tanh_approx(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
constexpr int D = 128, BQ = 128, BK = 128, THREADS = 384, NST = 2; /* NST: K/V stages */
constexpr uint32_t QHALF = BQ * 128, KVHALF = BK * 128; /* bytes of one 64-channel half */
constexpr uint32_t QB = 2 * QHALF, KVB = 2 * KVHALF;
constexpr uint32_t K0 = QB, V0 = QB + NST * KVB;   /* K stage s at K0 + s * KVB, V likewise */
constexpr size_t SMEM = QB + 2 * NST * KVB + 1024; /* + slack to align the base to 1024 B */
static_assert(BQ == FI_TILE_ROWS, "one CTA per plan tile");

/* 8 chunks of 16 bytes of one 256-byte row (chunks 2i + lh; a thread pair
 * covers the row) in a tile stored as two 64-channel halves of 128-byte rows,
 * chunk ^ row % 8 in each: the 128-byte swizzle wgmma expects (atoms of 8 rows
 * x 128 B, 1024-B aligned). dst = the row's chunk lh, already swizzled. */
template <typename QT>
__device__ __forceinline__ void copy_row(uint32_t dst, uint32_t half_bytes, const QT *src, bool ok)
{
#pragma unroll
    for (int i = 0; i < 8; i++)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                         (dst ^ (uint32_t)((i & 3) << 5)) + (uint32_t)(i >> 2) * half_bytes),
                     "l"(src + (ok ? i * 16 : 0)), "r"(ok ? 16 : 0)
                     : "memory");
}
} // namespace sm90

template <typename QT, bool LOGITS>
__global__ void __launch_bounds__(384, 1) prefill_sm90_kernel(const attn_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sm90;
    using MMA = ah_wgmma<QT, 128>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t sbase = (smem_addr(smem_raw) + 1023u) & ~1023u;
    __shared__ int s_lo, s_hi, s_maxlo, s_minhi;
    __shared__ int2 s_rng[BQ]; /* each row's visible keys, read by masked tiles only */
    __shared__ __align__(8) uint64_t s_bar[4 * NST]; /* full K, full V, empty K, empty V */
    const uint32_t bar0 = smem_addr(s_bar);
    auto full_k = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto full_v = [&](int s) { return bar0 + 8u * (uint32_t)(NST + s); };
    auto empty_k = [&](int s) { return bar0 + 8u * (uint32_t)(2 * NST + s); };
    auto empty_v = [&](int s) { return bar0 + 8u * (uint32_t)(3 * NST + s); };

    /* Grid x = (plan tile, KV head), head fastest, tiles last first (the
     * longest causal CTAs start first). */
    const int hk = (int)blockIdx.x % p.num_kv_heads, G = p.group;
    cta_rows cr;
    if (!cta_rows_find<BQ, 1, true>(p, &cr)) return;
    const int row0 = cr.row0, nrows = cr.nrows, tok0 = cr.tok0;
    const int32_t *pages = cr.pages;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    const int g8 = lane / 4, t4 = lane % 4;
    const int c = wg - 1; /* consumer index (-1: the producer) */
    /* A consumer thread's two rows (g8 and g8 + 8 of its warp's 16). */
    const int lrow0 = c * 64 + (warp % 4) * 16 + g8;

    if (tid == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
        s_maxlo = INT_MIN;
        s_minhi = INT_MAX;
        for (int s = 0; s < NST; s++) {
            mbar_init(full_k(s), 128);
            mbar_init(full_v(s), 128);
            mbar_init(empty_k(s), 8);
            mbar_init(empty_v(s), 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    int r_pos[2] = {0, 0};          /* the two rows' query positions */
    float r_slope2[2] = {0.f, 0.f}; /* and ALiBi slopes in base 2 (LOGITS only) */
    if (c >= 0) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int rho = row0 + lrow0 + i * 8;
            int lo = 0, hi = 0;
            if (rho < nrows) {
                const int pos = p.plan.token_pos[tok0 + rho / G];
                row_keys(p, cr, pos, &lo, &hi);
                row_keys_fold(lo, hi, &s_lo, &s_hi, &s_maxlo, &s_minhi);
                if (LOGITS) {
                    r_pos[i] = pos;
                    r_slope2[i] = p.var.alibi ? p.var.slopes[hk * G + rho % G] * FI_LOG2E : 0.f;
                }
            }
            if (t4 == 0) s_rng[lrow0 + i * 8] = make_int2(lo, hi);
        }
        /* This warpgroup's 64 Q rows: two threads per row. */
        const int ct = tid - 128 * wg, lr = c * 64 + (ct >> 1), lh = ct & 1;
        const QT *qg = static_cast<const QT *>(p.q);
        const int rho = row0 + lr;
        const bool ok = rho < nrows;
        const QT *src = ok ? qg + (int64_t)(tok0 + rho / G) * p.q_stride_t +
                                 (int64_t)(hk * G + rho % G) * p.q_stride_h + lh * 8
                           : qg;
        copy_row<QT>(sbase + (uint32_t)lr * 128u + (uint32_t)((lh ^ (lr & 7)) << 4), QHALF, src,
                     ok);
        commit();
    }
    __syncthreads(); /* the range atomics are visible */
    const int kv_lo = s_lo, kv_hi = s_hi;
    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + BK - 1) / BK : 0;

    if (wg == 0) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        const QT *kc = static_cast<const QT *>(p.k_cache);
        const QT *vc = static_cast<const QT *>(p.v_cache);
        const int shift = p.kg.page_shift, pmask = (1 << shift) - 1;
        const int r0 = tid >> 1, lh = tid & 1; /* rows r0 and r0 + 64 of each tile */
        const uint32_t off = (uint32_t)r0 * 128u + (uint32_t)((lh ^ (r0 & 7)) << 4);
        auto page = [&](int it, int r) {
            const int j = kv_lo + it * BK + r;
            return j < kv_hi ? __ldg(pages + (j >> shift)) : 0;
        };
        auto issue = [&](const QT *cache, const kv_geom &g, uint32_t st, int it, int pg0, int pg1) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int j = kv_lo + it * BK + r0 + 64 * h;
                const bool ok = j < kv_hi;
                const QT *src = ok ? cache + ((int64_t)hk * g.stride_head +
                                              (int64_t)(h ? pg1 : pg0) * g.stride_page +
                                              (int64_t)(j & pmask) * g.stride_slot + lh * 8)
                                   : cache;
                copy_row<QT>(st + off + (uint32_t)h * 64u * 128u, KVHALF, src, ok);
            }
            commit();
        };
        /* Jobs K(0), K(1), V(0), K(2), V(1), ..., V(n-1): the consumers' order.
         * After each job, the one before it is waited for (this thread's
         * copies), fenced to the async proxy and announced. */
        uint32_t prev = 0;
        auto announce = [&](uint32_t bar) {
            if (prev) {
                wait_copies<1>();
                fence_async_smem();
                mbar_arrive(prev);
            }
            prev = bar;
        };
        int pc0 = 0, pc1 = 0, pp0 = 0, pp1 = 0; /* pages of tile it and it - 1 */
        if (ntiles > 0) pc0 = page(0, r0), pc1 = page(0, r0 + 64);
        for (int it = 0; it <= ntiles; it++) {
            if (it < ntiles) {
                const int s = it % NST;
                if (it >= NST) mbar_wait(empty_k(s), (uint32_t)((it / NST - 1) & 1));
                issue(kc, p.kg, sbase + K0 + (uint32_t)s * KVB, it, pc0, pc1);
                announce(full_k(s));
            }
            if (it > 0) {
                const int v = it - 1, s = v % NST;
                if (v >= NST) mbar_wait(empty_v(s), (uint32_t)((v / NST - 1) & 1));
                issue(vc, p.vg, sbase + V0 + (uint32_t)s * KVB, v, pp0, pp1);
                announce(full_v(s));
            }
            pp0 = pc0;
            pp1 = pc1;
            if (it + 1 < ntiles) pc0 = page(it + 1, r0), pc1 = page(it + 1, r0 + 64);
        }
        if (prev) {
            wait_copies<0>();
            fence_async_smem();
            mbar_arrive(prev);
        }
    } else {
        /* ---- consumers ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        wait_copies<0>(); /* this thread's Q copies */
        fence_async_smem();
        named_sync(1 + c, 128);

        float o[64], s[64];
#pragma unroll
        for (int i = 0; i < 64; i++) o[i] = 0.f;
        uint32_t pa[8][4];
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
        /* base-2 logits are s * sl2, or s itself after the LOGITS transform */
        const float sl2 = LOGITS ? 1.f : p.var.qk_scale * FI_LOG2E;
        const uint32_t qw = sbase + (uint32_t)c * 64u * 128u;
        /* Ping-pong over issue points 0..ntiles: warpgroup 0 skips its first
         * wait, warpgroup 1 its last signal, so both barriers balance. */
        const int bar_self = 3 + c, bar_other = 4 - c;
        auto sched_begin = [&](int pt) {
            if (!(c == 0 && pt == 0)) named_sync(bar_self, 256);
        };
        auto sched_end = [&](int pt) {
            if (!(c == 1 && pt == ntiles)) named_arrive(bar_other, 256);
        };
        auto release = [&](uint32_t bar) {
            if (lane == 0) mbar_arrive(bar);
        };
        auto qk = [&](int it) {
            const uint32_t kt = sbase + K0 + (uint32_t)(it % NST) * KVB;
#pragma unroll
            for (int kd = 0; kd < D / 16; kd++)
                MMA::ss(s,
                        wgmma_desc(qw + (uint32_t)(kd >> 2) * QHALF + (uint32_t)(kd & 3) * 32u, 16,
                                   1024),
                        wgmma_desc(kt + (uint32_t)(kd >> 2) * KVHALF + (uint32_t)(kd & 3) * 32u, 16,
                                   1024),
                        kd > 0 ? 1 : 0);
            wgmma_commit();
        };
        auto pv = [&](int it) {
            const uint32_t vt = sbase + V0 + (uint32_t)(it % NST) * KVB;
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
                MMA::rs(o, pa[kk], wgmma_desc(vt + (uint32_t)kk * 2048u, KVHALF, 1024), 1);
            wgmma_commit();
        };
        auto softmax = [&](int it, float *alpha) {
            const int kb = kv_lo + it * BK;
            if (LOGITS) {
                const bool cap = p.var.softcap > 0.f;
                const float f = p.var.qk_scale * (cap ? p.var.inv_softcap : FI_LOG2E);
                const float cap2 = p.var.softcap * FI_LOG2E;
                /* the bias at this thread's first key of the tile */
                const float b0 = r_slope2[0] * (float)(kb + 2 * t4 - r_pos[0]);
                const float b1 = r_slope2[1] * (float)(kb + 2 * t4 - r_pos[1]);
#pragma unroll
                for (int n = 0; n < BK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float v = s[4 * n + e] * f;
                        if (cap) v = cap2 * tanh_approx(v);
                        s[4 * n + e] =
                            fmaf(r_slope2[e >> 1], (float)(n * 8 + (e & 1)), v + (e < 2 ? b0 : b1));
                    }
            }
            if (kb < s_maxlo || kb + BK > s_minhi) {
                const int2 rg0 = s_rng[lrow0], rg1 = s_rng[lrow0 + 8];
#pragma unroll
                for (int n = 0; n < BK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = kb + n * 8 + 2 * t4 + (e & 1);
                        const int2 rg = e < 2 ? rg0 : rg1;
                        if (j < rg.x || j >= rg.y) s[4 * n + e] = -INFINITY;
                    }
            }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float mx = s[2 * i];
#pragma unroll
                for (int n = 0; n < BK / 8; n++)
                    mx = fmaxf(mx, fmaxf(s[4 * n + 2 * i], s[4 * n + 2 * i + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[i], mx * sl2);
                const float mu = mn == -INFINITY ? 0.f : mn;
                alpha[i] = ex2(m[i] - mu);
                m[i] = mn;
                float rs = 0.f;
#pragma unroll
                for (int n = 0; n < BK / 8; n++) {
                    s[4 * n + 2 * i] = ex2(fmaf(s[4 * n + 2 * i], sl2, -mu));
                    s[4 * n + 2 * i + 1] = ex2(fmaf(s[4 * n + 2 * i + 1], sl2, -mu));
                    rs += s[4 * n + 2 * i] + s[4 * n + 2 * i + 1];
                }
                l[i] = l[i] * alpha[i] + rs;
            }
        };
        auto pack_p = [&]() { acc_to_a<QT>(pa, s); };

        if (ntiles > 0) {
            float alpha[2];
            mbar_wait(full_k(0), 0);
            sched_begin(0);
            wgmma_fence();
            qk(0);
            sched_end(0);
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 64; i++) reg_fence(s[i]);
            release(empty_k(0));
            softmax(0, alpha); /* O is still zero: no rescale */
            pack_p();
            for (int it = 1; it < ntiles; it++) {
                mbar_wait(full_k(it % NST), (uint32_t)((it / NST) & 1));
                mbar_wait(full_v((it - 1) % NST), (uint32_t)(((it - 1) / NST) & 1));
                sched_begin(it);
                wgmma_fence();
                qk(it);
                pv(it - 1);
                sched_end(it);
                wgmma_wait<1>();
#pragma unroll
                for (int i = 0; i < 64; i++) reg_fence(s[i]);
                release(empty_k(it % NST));
                softmax(it, alpha);
                wgmma_wait<0>();
#pragma unroll
                for (int i = 0; i < 64; i++) reg_fence(o[i]), reg_fence(s[i]);
                release(empty_v((it - 1) % NST));
                scale_rows(o, alpha);
                pack_p();
            }
            mbar_wait(full_v((ntiles - 1) % NST), (uint32_t)(((ntiles - 1) / NST) & 1));
            sched_begin(ntiles);
            wgmma_fence();
            pv(ntiles - 1);
            sched_end(ntiles);
            wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 64; i++) reg_fence(o[i]);
        }

#pragma unroll
        for (int i = 0; i < 2; i++) {
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int rho = row0 + lrow0 + i * 8;
            if (rho >= nrows) continue;
            const int tok = tok0 + rho / G, h = hk * G + rho % G;
            const float M = m[i], L = l[i];
            if (!p.partial) {
                float f, lse2;
                finish_state(p.var, h, L, M, &f, &lse2);
                f *= p.var.v_scale;
                QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t +
                           (int64_t)h * p.o.out_stride_h;
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    *reinterpret_cast<uint32_t *>(orow + n * 8 + 2 * t4) =
                        pack2<QT>(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
                if (t4 == 0 && p.o.lse)
                    p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
            } else {
                const int64_t slot = (int64_t)(p.o.part_slot + blockIdx.z) * p.num_tokens + tok;
                const float f = L > 0.f ? p.var.v_scale / L : 0.f;
                float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * D;
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    *reinterpret_cast<float2 *>(prow + n * 8 + 2 * t4) =
                        make_float2(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
                if (t4 == 0)
                    p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
            }
        }
    }
#endif
}

/* grid_tiles 0: raise the kernels' shared-memory limit (state creation). */
cudaError_t launch_prefill_sm90(int q_dtype, const attn_params &p, int grid_tiles, cudaStream_t st)
{
    const bool bf16 = q_dtype == FI_BF16;
    auto plain =
        bf16 ? prefill_sm90_kernel<__nv_bfloat16, false> : prefill_sm90_kernel<half, false>;
    auto logits = bf16 ? prefill_sm90_kernel<__nv_bfloat16, true> : prefill_sm90_kernel<half, true>;
    if (grid_tiles <= 0) {
        cudaError_t e = cudaFuncSetAttribute(plain, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)sm90::SMEM);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(logits, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)sm90::SMEM);
        return e;
    }
    const dim3 grid(grid_tiles * p.num_kv_heads, 1, p.kv_splits > 1 ? p.kv_splits : 1);
    (p.var.softcap > 0.f || p.var.alibi ? logits
                                        : plain)<<<grid, sm90::THREADS, sm90::SMEM, st>>>(p);
    return cudaPeekAtLastError();
}

} // namespace fi
