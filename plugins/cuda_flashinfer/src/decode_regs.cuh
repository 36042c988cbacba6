/*
 * Register-load decode kernel for 16-bit caches of the query's type at head
 * sizes 64, 128 and 256, the decode kernel for them. Loads straight into
 * registers stream a paged cache closer to the HBM read ceiling than
 * cp.async stages through shared memory (bench/fi_readbw.cu), so no byte
 * of the cache passes through shared memory here: every lane
 * loads the 16-byte pieces its mma.sync fragments need, and the channel
 * order inside the fragments is chosen so those pieces are whole 16-byte
 * chunks of key rows.
 *
 * Four warps per (query token, block of GB <= 8 query heads sharing a KV
 * head, KV partition), the streaming kernel's grid (a KV head's last block
 * padded past the group when GB does not divide it: decode_heads.h; padding
 * rows of Q stay zero and are never stored), and HPC such head
 * blocks per CTA: with HPC = 4 (the launcher's choice where the merge
 * buffers fit and the keys are not split), one CTA of 16 warps reads four
 * neighbouring heads of each slot of an NHD cache together. A warp takes steps of
 * 8 keys, warp w of its head block the steps w, w + 4, ..., and keeps its
 * own online-softmax state; with g = lane / 4 and t = lane % 4:
 *   - S = Q K^T, m16n8k16 per 16 channels: A is Q (row g = head g, rows 8-15
 *     zero), B is K^T (column g = key g). Lane (g, t) loads key g's chunks
 *     t, t + 4, ... (64 contiguous bytes per key and load across the four
 *     t); k-step s = 2i + h maps k-indices 2t, 2t+1 to channels
 *     8(t + 4i) + 4h + {0, 1} and 2t+8, 2t+9 to + {2, 3}, the same for Q's
 *     fragment, so each chunk is two k-steps' B operand as loaded.
 *   - The lane then holds the logits of head g for keys 2t, 2t+1: the row
 *     maximum over a step is two shuffles, and the pair packed is the B
 *     operand of O^T += V^T P^T (m16n8k8, column = head) as it stands.
 *   - V^T's A operand pairs two keys per register: lane (g, t) loads keys
 *     2t and 2t+1, chunks g, g + 8 (128 contiguous bytes per key and load
 *     across the eight g), and one byte permute per register pairs them.
 *     Row g of channel tile i is channel r = i of the lane's list, row
 *     g + 8 is r = D/16 + i, where list entry r is channel
 *     8(g + 8(r / 8)) + r % 8.
 *   - Loads run one step ahead: K of step n + 1 is issued once S of step n
 *     is computed, V of step n + 1 once step n's V is used, and the page
 *     numbers two steps ahead, so about 4 KiB are in flight per warp at
 *     any time, 64 KiB per SM at 16 warps (launch bounds keep the
 *     registers under 128 for that); at head size 256 a step is 8 KiB,
 *     and 8 warps an SM at up to 255 registers keep the same 64 KiB; at 64
 *     a step is 2 KiB, and 24 warps an SM at 80 keep 48 KiB
 *     (regs_warps_per_sm).
 * No barrier in the loop: a warp's step count is its own. A head block's
 * four warp states merge through shared memory at the end
 * (merge_cta_states), into the output or, with num_splits > 1, a partial
 * state.
 */
#ifndef FI_DECODE_REGS_CUH
#define FI_DECODE_REGS_CUH

#include <type_traits>

#include "fi_common.cuh"
#include "mma_frag.cuh"

namespace fi {

template <int D, int GB, int HPC_ = 1> struct regs_cfg {
    static constexpr int HPC = HPC_;              /* head blocks per CTA */
    static constexpr int WPH = 4, NW = WPH * HPC; /* warps per head block, per CTA */
    static constexpr int THREADS = 32 * NW, MIN_CTAS = regs_warps_per_sm(D) / NW;
    static constexpr int STEP = 8;     /* keys per warp step */
    static constexpr int KS = D / 16;  /* k-steps of S; channel tiles of O^T */
    static constexpr int KCH = D / 32; /* K chunks per lane: key g, chunks t + 4i */
    static constexpr int VCH = D / 64; /* V chunks per lane and key: g + 8c */
    static_assert(D == 64 || D == 128 || D == 256, "head sizes 64, 128 and 256");
    static_assert(GB <= 8, "a head per row of the first 8 of Q's tile");
    static_assert(HPC == 1 || HPC == 2 || HPC == 4, "a whole number of CTAs per SM");
    static_assert(regs_hpc_fits(D, GB, HPC), "merge buffers and warps of HPC head blocks");
};

/* Does this instantiation take the register-load kernel? */
template <typename QT, typename KT, int D, int GB> constexpr bool regs_fits()
{
    return std::is_same<QT, KT>::value && (D == 64 || D == 128 || D == 256) && GB <= 8;
}

/* 16 bytes of the cache, streamed past L1 (read once), L2 fetching the
 * whole 256-byte row piece around it; zeros
 * where !ok, so a masked key's V row multiplies its zero probability by a
 * finite value. */
__device__ __forceinline__ uint4 ld_stream16(const void *p, bool ok)
{
    uint4 r = make_uint4(0u, 0u, 0u, 0u);
    if (ok)
        asm volatile("ld.global.cs.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p));
    return r;
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Channel of entry r of lane group g's V list (see the header). */
__device__ __forceinline__ int regs_channel(int g, int r) { return 8 * (g + 8 * (r / 8)) + r % 8; }

template <typename QT, int D, int GB, int HPC = 1>
__global__ void __launch_bounds__(regs_cfg<D, GB, HPC>::THREADS, regs_cfg<D, GB, HPC>::MIN_CTAS)
    decode_regs_kernel(const attn_params p)
{
    using C = regs_cfg<D, GB, HPC>;
    __shared__ __align__(16) float sm_acc[C::NW * GB * D];
    __shared__ float sm_m[C::NW][GB], sm_l[C::NW][GB];

    /* Head block threadIdx.x / 32 / WPH of the CTA's HPC (the HPC == 1
     * spellings here and for phase tell the compiler that warp < WPH). */
    const decode_cta cta(p, GB, HPC, HPC == 1 ? 0 : threadIdx.x / 32 / C::WPH);
    const int t = cta.t, split = cta.split, hk = cta.hk, h0 = cta.h0, nh = cta.nh;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int phase =
        HPC == 1 ? warp : warp % C::WPH; /* this warp's steps: phase, phase + WPH, ... */
    allow_dependent_launch();            /* the split merge may be scheduled now; it waits for us */

    const int r = p.plan.token_req[t], pos = p.plan.token_pos[t];
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    const split_keys keys(p, pos, p.plan.seq_lens[r], split, C::STEP * C::WPH);
    const int a = keys.a, b = keys.b;
    const int first = a + phase * C::STEP;
    const int nsteps = b > first ? (b - first + C::STEP * C::WPH - 1) / (C::STEP * C::WPH) : 0;

    /* Q's A fragments: head g, the channels of k-step s above. Rows from
     * nh on (past the group, or past GB) stay zero: their logits are finite
     * and never stored. */
    uint32_t qa[C::KS][2];
    {
        const uint32_t *qw = reinterpret_cast<const uint32_t *>(
            static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t +
            (int64_t)(h0 + (g < nh ? g : 0)) * p.q_stride_h);
#pragma unroll
        for (int s = 0; s < C::KS; s++) {
            const int w = 4 * (tq + 4 * (s / 2)) + 2 * (s % 2);
            qa[s][0] = g < nh ? qw[w] : 0u;
            qa[s][1] = g < nh ? qw[w + 1] : 0u;
        }
    }
    const float slope = p.var.alibi && g < nh ? p.var.slopes[h0 + g] : 0.f;

    const QT *kc = static_cast<const QT *>(p.k_cache) + (int64_t)hk * p.kg.stride_head;
    const QT *vc = static_cast<const QT *>(p.v_cache) + (int64_t)hk * p.vg.stride_head;
    const int shift = p.kg.page_shift, mask = (1 << shift) - 1;
    auto base = [&](int n) { return first + n * C::STEP * C::WPH; };
    auto page_of = [&](int j) { return j < b ? __ldg(pages + (j >> shift)) : 0; };

    uint4 kr[C::KCH], vr[2][C::VCH];
    int pk = 0, pv[2] = {0, 0}; /* page numbers of the next step to load */
    auto fetch_pages = [&](int n) {
        const int j = base(n);
        pk = page_of(j + g);
        pv[0] = page_of(j + 2 * tq);
        pv[1] = page_of(j + 2 * tq + 1);
    };
    auto load_k = [&](int n) {
        const int j = base(n) + g;
        const QT *row =
            kc + (int64_t)pk * p.kg.stride_page + (int64_t)(j & mask) * p.kg.stride_slot;
#pragma unroll
        for (int i = 0; i < C::KCH; i++) kr[i] = ld_stream16(row + 8 * (tq + 4 * i), j < b);
    };
    auto load_v = [&](int n) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int j = base(n) + 2 * tq + e;
            const QT *row =
                vc + (int64_t)pv[e] * p.vg.stride_page + (int64_t)(j & mask) * p.vg.stride_slot;
#pragma unroll
            for (int c = 0; c < C::VCH; c++) vr[e][c] = ld_stream16(row + 8 * (g + 8 * c), j < b);
        }
    };

    float o[C::KS][4];
#pragma unroll
    for (int i = 0; i < C::KS; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m = -INFINITY, l = 0.f; /* head g; l sums this lane's keys only */

    if (nsteps > 0) {
        fetch_pages(0);
        load_k(0);
        load_v(0);
        if (nsteps > 1) fetch_pages(1);
    }
    for (int n = 0; n < nsteps; n++) {
        float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int k = 0; k < C::KS; k++) {
            const uint32_t a4[4] = {qa[k][0], 0u, qa[k][1], 0u};
            mma_op<QT>::run(s, a4, word(kr[k / 2], 2 * (k % 2)), word(kr[k / 2], 2 * (k % 2) + 1));
        }
        if (n + 1 < nsteps) load_k(n + 1);

        const int j0 = base(n) + 2 * tq;
        float lg[2];
#pragma unroll
        for (int e = 0; e < 2; e++)
            lg[e] = g < GB && j0 + e < b ? logit2(p.var, s[e], slope, j0 + e, pos) : -INFINITY;
        float mt = fmaxf(lg[0], lg[1]);
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        mt = fmaxf(mt, m);
        /* Rescale only when some head's maximum moved (rare after the first
         * steps); the accumulators hold heads 2t, 2t+1, whose factors live
         * in lane groups 2t, 2t+1. alpha is 0 while m is -inf. */
        if (__any_sync(0xffffffffu, mt != m)) {
            const float al = mt == m ? 1.f : exp2f(m - mt);
            l *= al;
            m = mt;
            const float al0 = __shfl_sync(0xffffffffu, al, 8 * tq),
                        al1 = __shfl_sync(0xffffffffu, al, 8 * tq + 4);
#pragma unroll
            for (int i = 0; i < C::KS; i++) {
                o[i][0] *= al0, o[i][1] *= al1;
                o[i][2] *= al0, o[i][3] *= al1;
            }
        }
        const float mu = m == -INFINITY ? 0.f : m;
        const float p0 = exp2f(lg[0] - mu), p1 = exp2f(lg[1] - mu);
        l += p0 + p1;
        const uint32_t pb = pack2<QT>(p0, p1);
#pragma unroll
        for (int i = 0; i < C::KS; i++) {
            const int r0 = i, r1 = C::KS + i; /* list entries of rows g and g + 8 */
            const int sel = i % 2 ? 0x7632 : 0x5410;
            const uint32_t a0 = __byte_perm(word(vr[0][r0 / 8], (r0 % 8) / 2),
                                            word(vr[1][r0 / 8], (r0 % 8) / 2), sel);
            const uint32_t a1 = __byte_perm(word(vr[0][r1 / 8], (r1 % 8) / 2),
                                            word(vr[1][r1 / 8], (r1 % 8) / 2), sel);
            mma_op<QT>::run_k8(o[i], a0, a1, pb);
        }
        if (n + 1 < nsteps) {
            load_v(n + 1);
            if (n + 2 < nsteps) fetch_pages(n + 2);
        }
    }

    /* This warp's state into the merge buffers ([NW][GB][D], [NW][GB]). */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int h = 2 * tq + e;
        if (h < GB) {
            float *row = sm_acc + (warp * GB + h) * D;
#pragma unroll
            for (int i = 0; i < C::KS; i++) {
                row[regs_channel(g, i)] = o[i][e];
                row[regs_channel(g, C::KS + i)] = o[i][2 + e];
            }
        }
    }
    if (tq == 0 && g < GB) {
        sm_m[warp][g] = m;
        sm_l[warp][g] = l;
    }
    __syncthreads();

    if constexpr (HPC == 1) {
        merge_cta_states<QT, C::NW, GB, D, C::THREADS>(p, sm_acc, sm_m, sm_l, t, h0, split,
                                                       p.var.v_scale);
    } else {
#pragma unroll 1
        for (int c = 0; c < HPC; c++)
            merge_cta_states<QT, C::WPH, GB, D, C::THREADS>(
                p, sm_acc + c * C::WPH * GB * D, sm_m + c * C::WPH, sm_l + c * C::WPH, t,
                decode_cta(p, GB, HPC, c).h0, split, p.var.v_scale);
    }
}

} // namespace fi

#endif
