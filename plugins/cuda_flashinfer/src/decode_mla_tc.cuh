/*
 * Tensor-core decode for absorbed MLA (qk 576 / v 512, one latent KV head,
 * a 16-bit cache of the query's type): one CTA of four warps per (query
 * token, block of 16 query heads, KV partition). The 16 heads are the 16
 * rows of mma.sync, so one read of a key serves all of them (a group of
 * fewer than 16 heads repeats its last head in the spare rows, unstored).
 *   - Keys stream through shared memory in stages of 32 rows (one 1152-byte
 *     row per key; V is its first 512 channels) by a cp.async pipeline of
 *     FI_DECODE_STAGES stages, each row's 16-byte chunks XOR-swizzled
 *     (chunk ^ row % 8) so every ldmatrix phase hits 8 bank groups.
 *   - Q stays in registers as the A fragments of its 36 k-steps.
 *   - Every warp computes the same S = Q K^T for the stage's keys (K by
 *     ldmatrix), 16 keys at a time, and so the same online softmax: no
 *     exchange between warps. Each warp then owns 128 of the 512 output
 *     channels: O[16 x 128] += P V, where P is S's accumulators repacked
 *     (two 8-key tiles make one m16n8k16 A fragment) and V comes by
 *     ldmatrix.trans. The repeated S costs tensor work, not bandwidth:
 *     4 x 18 KFLOP per key against its 1152 bytes.
 * The four warps end with the same m and l, so each writes its channels
 * directly; split partitions write partial states merged by LSE.
 */
#ifndef FI_DECODE_MLA_TC_CUH
#define FI_DECODE_MLA_TC_CUH

#include "fi_common.cuh"
#include "mma_frag.cuh"

namespace fi {

struct mla_tc_cfg {
    static constexpr int D = 576, DV = 512, GB = 16, THREADS = 128, NW = 4, NS = FI_DECODE_STAGES;
    static constexpr int CR = D * 2 / 16;         /* 16-byte chunks per row: 72 */
    static constexpr int BN = 32;                 /* keys per stage */
    static constexpr int STAGE = BN * D * 2;      /* 36 KiB */
    static constexpr int KS = D / 16;             /* k-steps of S */
    static constexpr int NT = DV / NW / 8;        /* 8-channel output tiles per warp: 16 */
    static constexpr int CPT = BN * CR / THREADS; /* 16-byte copies per thread per stage: 18 */
    static_assert(CPT * THREADS == BN * CR, "stage copy must split evenly");
    static constexpr int SMEM = NS * STAGE;
    /* two CTAs per SM, whose 8 warps hide the latency of S's mma chains */
    static_assert(2 * SMEM <= 227 * 1024, "at most 3 stages of 36 KiB");
};

template <typename QT>
__global__ void __launch_bounds__(128, 2) decode_mla_tc_kernel(const attn_params p)
{
    using C = mla_tc_cfg;
    extern __shared__ __align__(16) unsigned char smem[];
    const int t = blockIdx.x, split = blockIdx.z, h0 = blockIdx.y * C::GB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    /* Rows past the group (a group of fewer than 16 heads) repeat its last
     * head and are not stored. */
    const int hq0 = min(h0 + g, p.group - 1), hq1 = min(h0 + g + 8, p.group - 1);
    constexpr int ns = C::NS;
    allow_dependent_launch(); /* the split merge may be scheduled now; it waits for us */

    const int r = p.plan.token_req[t], pos = p.plan.token_pos[t];
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    const split_keys keys(p, pos, p.plan.seq_lens[r], split, C::BN);
    const int a = keys.a, b = keys.b;

    /* Q's A fragments: rows g and g + 8 (heads h0 + g, h0 + g + 8), channels
     * 16k + 2tq (+1) and 16k + 8 + 2tq (+1). */
    uint32_t qa[C::KS][4];
    {
        const QT *qt = static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t;
        const uint32_t *q0 = reinterpret_cast<const uint32_t *>(qt + (int64_t)hq0 * p.q_stride_h);
        const uint32_t *q1 = reinterpret_cast<const uint32_t *>(qt + (int64_t)hq1 * p.q_stride_h);
#pragma unroll
        for (int k = 0; k < C::KS; k++) {
            qa[k][0] = q0[8 * k + tq];
            qa[k][1] = q1[8 * k + tq];
            qa[k][2] = q0[8 * k + 4 + tq];
            qa[k][3] = q1[8 * k + 4 + tq];
        }
    }
    const float sl0 = p.var.alibi ? p.var.slopes[hq0] : 0.f,
                sl1 = p.var.alibi ? p.var.slopes[hq1] : 0.f;

    float o[C::NT][4]; /* heads g (0, 1) and g + 8 (2, 3) x channels 128 warp + 8 nt + 2tq (+1) */
#pragma unroll
    for (int i = 0; i < C::NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f,
          l1 = 0.f; /* heads g, g + 8; l: this lane's keys */

    const QT *kc = static_cast<const QT *>(p.k_cache);
    const int shift = p.kg.page_shift, mask = (1 << shift) - 1;
    /* The stage's pages come one per lane from a single table read per warp
     * (a read per copy waits on memory before each of the 18: two CTAs'
     * shared memory leave L1 little); blocks of one token, 33 pages for an
     * unaligned stage, read per copy. */
    const bool by_lane = shift >= 1;
    auto issue = [&](int it) {
        unsigned char *st = smem + (it % ns) * C::STAGE;
        const int p0 = (a + it * C::BN) >> shift, p1 = (min(b, a + (it + 1) * C::BN) - 1) >> shift;
        const int pg = by_lane && lane <= p1 - p0 ? __ldg(pages + p0 + lane) : 0;
#pragma unroll
        for (int i = 0; i < C::CPT; i++) {
            const int e = threadIdx.x + i * C::THREADS, row = e / C::CR, ch = e % C::CR,
                      j = a + it * C::BN + row;
            const bool ok = j < b;
            const int lp = __shfl_sync(0xffffffffu, pg, ok ? (j >> shift) - p0 : 0);
            const int page = by_lane ? lp : ok ? __ldg(pages + (j >> shift)) : 0;
            const int64_t off = ok ? (int64_t)page * p.kg.stride_page +
                                         (int64_t)(j & mask) * p.kg.stride_slot + ch * 8
                                   : 0;
            cp_async16(st + swz<C::CR>(row, ch), kc + off, ok ? 16 : 0);
        }
    };
    stage_pipeline(ns, keys.ntiles, issue, [&](int it) {
        const uint32_t st = smem_addr(smem + (it % ns) * C::STAGE);
#pragma unroll 1
        for (int half = 0; half < C::BN / 16; half++) {
            const int key0 = 16 * half;
            /* S for keys key0 .. key0 + 15 as two 8-key tiles: s[u] holds
             * (head g, keys 8u + 2tq, +1) and (head g + 8, same keys). */
            /* Two accumulators per tile (even and odd k-steps) halve the
             * dependent mma chain (H100 B32: 10% faster, 44 bytes spilled
             * outside the key loop). */
            float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int i = 0; i < C::KS / 2; i++) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    uint32_t kb[4]; /* b0, b1 of k-steps 2i and 2i + 1 */
                    ldsm_x4(kb, st + swz<C::CR>(key0 + 8 * u + (lane & 7), 4 * i + (lane >> 3)));
                    mma_op<QT>::run(s[u], qa[2 * i], kb[0], kb[1]);
                    mma_op<QT>::run(s2[u], qa[2 * i + 1], kb[2], kb[3]);
                }
            }
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[u][e] += s2[u][e];
            const int jb = a + it * C::BN + key0 + 2 * tq;
            float lg[2][4], mt0 = m0, mt1 = m1;
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = jb + 8 * u + (e & 1);
                    lg[u][e] =
                        j < b ? logit2(p.var, s[u][e], e < 2 ? sl0 : sl1, j, pos) : -INFINITY;
                    if (e < 2) mt0 = fmaxf(mt0, lg[u][e]);
                    else mt1 = fmaxf(mt1, lg[u][e]);
                }
#pragma unroll
            for (int off = 1; off < 4; off *= 2) {
                mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, off));
                mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, off));
            }
            /* Rescale only when some head's maximum moved; alpha is 0 while m is -inf. */
            if (!__all_sync(0xffffffffu, mt0 == m0 && mt1 == m1)) {
                const float al0 = mt0 == m0 ? 1.f : exp2f(m0 - mt0),
                            al1 = mt1 == m1 ? 1.f : exp2f(m1 - mt1);
                l0 *= al0;
                l1 *= al1;
#pragma unroll
                for (int i = 0; i < C::NT; i++) {
                    o[i][0] *= al0, o[i][1] *= al0;
                    o[i][2] *= al1, o[i][3] *= al1;
                }
                m0 = mt0, m1 = mt1;
            }
            const float b0 = m0 == -INFINITY ? 0.f : m0, b1 = m1 == -INFINITY ? 0.f : m1;
            uint32_t pa[4]; /* P as the A fragment of keys key0 .. key0 + 15 */
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float p0 = exp2f(lg[u][0] - b0), p1 = exp2f(lg[u][1] - b0);
                const float p2 = exp2f(lg[u][2] - b1), p3 = exp2f(lg[u][3] - b1);
                l0 += p0 + p1;
                l1 += p2 + p3;
                pa[2 * u] = pack2<QT>(p0, p1);
                pa[2 * u + 1] = pack2<QT>(p2, p3);
            }
            /* V^T fragments by ldmatrix.trans: matrices (keys 0-7 | 8-15) x
             * (channels c | c + 8) give b0, b1 of two 8-channel tiles. */
            const int vrow = key0 + (lane & 7) + ((lane >> 3) & 1) * 8, vch = lane >> 4;
#pragma unroll
            for (int i = 0; i < C::NT / 2; i++) {
                uint32_t vb[4];
                ldsm_x4_t(vb, st + swz<C::CR>(vrow, warp * (C::DV / C::NW / 8) + 2 * i + vch));
                mma_op<QT>::run(o[2 * i], pa, vb[0], vb[1]);
                mma_op<QT>::run(o[2 * i + 1], pa, vb[2], vb[3]);
            }
        }
    });

#pragma unroll
    for (int off = 1; off < 4; off *= 2) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    const bool final_out = p.num_splits == 1 && !p.partial;
#pragma unroll
    for (int i = 0; i < C::NT; i++) {
        const int d = warp * (C::DV / C::NW) + 8 * i + 2 * tq;
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (h0 + g + (e < 2 ? 0 : 8) < p.group)
                store_state<QT>(p, final_out, t, h0 + g + (e < 2 ? 0 : 8), split, d + (e & 1),
                                C::DV, o[i][e], e < 2 ? l0 : l1, e < 2 ? m0 : m1, p.var.v_scale);
    }
}

} // namespace fi

#endif
