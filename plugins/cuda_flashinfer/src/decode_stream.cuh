/*
 * Streaming decode kernel for qk == v head sizes where the register-load
 * kernel (decode_regs.cuh) does not serve: FP8 caches at 64, 128 and 256;
 * and 16-bit caches at 128 where the plan picks it over the register loads
 * (scheduler.h, decode_stream_grid: a head block an SM and more on chips
 * that read at 4 TB/s and more, where its 3 stages of 16 KiB a CTA, 4 CTAs
 * an SM, keep 128 KiB in flight per SM to the register loads' 64).
 * One CTA of four warps per (query token, block of GB query heads sharing a
 * KV head, KV partition). Decode is a pure read of K and V, so the kernel is built
 * around keeping HBM busy:
 *   - K and V tiles of BN keys (16 KiB per stage) stream into shared memory
 *     through a cp.async pipeline of FI_DECODE_STAGES stages (scheduler.h),
 *     all but one in flight while one is being used; every thread issues 16-byte
 *     copies, and the page numbers of the next tile are loaded into
 *     registers one iteration ahead so no copy waits for its page lookup;
 *   - every warp takes its share of each tile's keys and keeps its own
 *     online-softmax state; the arithmetic is one of two policies, both
 *     sized to stay below the memory time:
 *       fma_math (any KV type): each lane owns D/32 channels, computes the
 *       GB dot products of a key from one read of it, and the warp's
 *       NKW x GB partial sums are reduced by a transposing butterfly (31
 *       shuffles for 32 sums instead of 5 each); softmax runs on one value
 *       per lane, probabilities go through shared memory to every lane;
 *       tc_math (at 128: FP8 KV as fp16 operands, 16-bit KV as it is):
 *       S^T = K Q^T and O^T += V^T P^T on mma.sync, 8 keys a step as the
 *       rows of a 16-row tile, the GB heads as its 8 columns, P^T turned
 *       into the second GEMM's operand by one movmatrix; a tenth of
 *       fma_math's instructions per key, which leaves the issue slots to
 *       the copies (the SM's other CTAs);
 *   - every loop trip count is uniform over the CTA, so the warp-wide
 *     shuffles never meet a lane that left the loop.
 * The four warps' online-softmax states are merged through shared memory at
 * the end; with num_splits > 1 the CTA writes a partial state (split-KV).
 * A KV head's last head block runs past the group when GB does not divide
 * it (decode_heads.h): its padding heads repeat the last real head's query
 * and read the ALiBi slope of some real head (padded_head), so their logits
 * stay finite; they are never stored.
 */
#ifndef FI_DECODE_STREAM_CUH
#define FI_DECODE_STREAM_CUH

#include <type_traits>

#include "fi_common.cuh"
#include "mma_frag.cuh"

namespace fi {

/* A head index of the block's KV rows' loop: h itself, or for a padding
 * head past the last query head, the last one, whose per-head values (the
 * ALiBi slope) are then read in bounds and left unused. Clamped against the
 * launch's head count rather than the block's real heads so the key loops
 * keep no count of them live. */
__device__ __forceinline__ int padded_head(const attn_params &p, int h)
{
    return min(h, p.num_qo_heads - 1);
}

template <typename KT, int D, int GB> struct stream_cfg {
    static constexpr int THREADS = 128, NW = 4, NS = FI_DECODE_STAGES;
    static constexpr int ES = (int)sizeof(KT);
    static constexpr int ROWB = D * ES;           /* bytes of one key row */
    static constexpr int CR = ROWB / 16;          /* 16-byte chunks per row */
    static constexpr int BN = 8192 / ROWB;        /* keys per stage: 8 KiB of K + 8 of V */
    static constexpr int LPT = BN * CR / THREADS; /* row chunks per thread per stage */
    static constexpr int KW = BN / NW;            /* keys per warp per stage */
    static constexpr int CPL = D / 32;            /* channels per lane */
    static constexpr int NKW = KW < 32 / GB ? KW : 32 / GB; /* keys per reduction */
    static constexpr int N0 = NKW * GB;                     /* partial sums per reduction (<= 32) */
    static constexpr int STAGE = 2 * BN * ROWB;             /* bytes */
    static constexpr int MERGE = NW * GB * D * 4;
    static constexpr int PIPE = NS * STAGE; /* bytes of all stages */
    /* Dynamic shared memory: the stages, which the merge reuses. */
    static constexpr int SMEM = PIPE > MERGE ? PIPE : MERGE;
    static_assert(LPT * THREADS == BN * CR, "stage copy must split evenly");
    static_assert(KW % NKW == 0 && N0 <= 32, "reduction shape");
    static_assert(GB * CPL <= 32, "registers: q and acc hold GB x CPL floats each");
};

/* CPL consecutive elements of a row in shared memory as floats. */
template <typename KT, int CPL> __device__ __forceinline__ void lane_load(const KT *p, float *f)
{
    if constexpr (elem<KT>::fp8) {
        const uint8_t *b = reinterpret_cast<const uint8_t *>(p);
        uint32_t w[CPL / 2 > 0 ? CPL / 2 : 1];
        if constexpr (CPL == 8) {
            uint2 r = *reinterpret_cast<const uint2 *>(b);
            w[0] = r.x & 0xffffu, w[1] = r.x >> 16, w[2] = r.y & 0xffffu, w[3] = r.y >> 16;
        } else if constexpr (CPL == 4) {
            uint32_t r = *reinterpret_cast<const uint32_t *>(b);
            w[0] = r & 0xffffu, w[1] = r >> 16;
        } else {
            w[0] = *reinterpret_cast<const uint16_t *>(b);
        }
#pragma unroll
        for (int i = 0; i < CPL / 2; i++) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)w[i], elem<KT>::kind);
            float2 v = __half22float2(*reinterpret_cast<half2 *>(&h));
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    } else {
        uint32_t w[CPL / 2];
        if constexpr (CPL == 8) {
            uint4 r = *reinterpret_cast<const uint4 *>(p);
            w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
        } else if constexpr (CPL == 4) {
            uint2 r = *reinterpret_cast<const uint2 *>(p);
            w[0] = r.x, w[1] = r.y;
        } else {
            w[0] = *reinterpret_cast<const uint32_t *>(p);
        }
#pragma unroll
        for (int i = 0; i < CPL / 2; i++) {
            float2 v = unpack2(w[i], (KT *)nullptr);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
}

/* N floats of a 16-byte aligned shared-memory row, 16 bytes per load. */
template <int N> __device__ __forceinline__ void load_row(const float *row, float (&v)[N])
{
    static_assert(N % 4 == 0, "whole float4s");
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        const float4 x = reinterpret_cast<const float4 *>(row)[j];
        v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
    }
}

/* Transposing butterfly: N partial sums per lane become, in v[0], the full
 * warp sum of one of them; returns which (lanes may share an index when
 * N < 32). Each halving step trades half the values with the partner lane.
 * One template level per step keeps every array index a constant (a loop
 * the compiler fails to unroll puts v in local memory). */
template <int N, int K> struct warp_tsum {
    static __device__ __forceinline__ void step(float (&v)[N], int lane, int &idx)
    {
        if constexpr (K < 5) {
            constexpr int off = 16 >> K, n = N >> K;
            const bool up = (lane & off) != 0;
            if constexpr (n >= 2) {
#pragma unroll
                for (int i = 0; i < n / 2; i++) {
                    const float lo_v = v[i], hi_v = v[i + n / 2];
                    v[i] = (up ? hi_v : lo_v) + __shfl_xor_sync(0xffffffffu, up ? lo_v : hi_v, off);
                }
                idx += up ? n / 2 : 0;
            } else {
                v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
            }
            warp_tsum<N, K + 1>::step(v, lane, idx);
        }
    }
};
template <int N> __device__ __forceinline__ int warp_transpose_sum(float (&v)[N], int lane)
{
    int idx = 0;
    warp_tsum<N, 0>::step(v, lane, idx);
    return idx;
}

/* CUDA-core arithmetic: lane owns channels [lane*CPL, +CPL) of every head. */
template <typename QT, typename KT, int D, int GB> struct fma_math {
    using C = stream_cfg<KT, D, GB>;
    struct shared_t {
        __align__(16) float sc[C::NW][32], pc[C::NW][32]; /* read as float4 */
    };
    float q[GB][C::CPL], acc[GB][C::CPL], m[GB], l[GB];

    /* Heads from nh on are padding (decode_heads.h): they repeat the last
     * real head's query. k_scale: the KV head's key dequantisation from the
     * scale tensors (tensor_scales), folded into the query once. */
    __device__ __forceinline__ void init(const QT *qtok, int64_t q_stride_h, int h0, int nh,
                                         int lane, float k_scale)
    {
        const QT *qrow = qtok + lane * C::CPL;
#pragma unroll
        for (int g = 0; g < GB; g++) {
            const QT *qp = qrow + (int64_t)(h0 + min(g, nh - 1)) * q_stride_h;
#pragma unroll
            for (int c = 0; c < C::CPL; c++) {
                q[g][c] = elem<KT>::fp8 ? to_f32(qp[c]) * k_scale : to_f32(qp[c]);
                acc[g][c] = 0.f;
            }
            m[g] = -INFINITY;
            l[g] = 0.f;
        }
    }

    /* This warp's KW keys of the tile at stage st (keys kb.., valid below b). */
    __device__ __forceinline__ void tile(const attn_params &p, shared_t &sh,
                                         const unsigned char *st, int kb, int b, int pos, int h0,
                                         int warp, int lane)
    {
        const KT *Kt = reinterpret_cast<const KT *>(st);
        const KT *Vt = reinterpret_cast<const KT *>(st + C::BN * C::ROWB);
#pragma unroll
        for (int ck = 0; ck < C::KW / C::NKW; ck++) {
            const int row0 = warp * C::KW + ck * C::NKW;
            float s[C::N0];
#pragma unroll
            for (int kk = 0; kk < C::NKW; kk++) {
                float kf[C::CPL];
                lane_load<KT, C::CPL>(Kt + (row0 + kk) * D + lane * C::CPL, kf);
#pragma unroll
                for (int g = 0; g < GB; g++) {
                    float x = 0.f;
#pragma unroll
                    for (int c = 0; c < C::CPL; c++) x = fmaf(q[g][c], kf[c], x);
                    s[kk * GB + g] = x;
                }
            }
            const int idx = warp_transpose_sum<C::N0>(s, lane);
            const int own_g = idx % GB, own_j = kb + row0 + idx / GB;
            float lg = -INFINITY;
            if (own_j < b) {
                const float slope = p.var.alibi ? p.var.slopes[padded_head(p, h0 + own_g)] : 0.f;
                lg = logit2(p.var, s[0], slope, own_j, pos);
            }
            sh.sc[warp][idx] = lg;
            __syncwarp();
            /* Every lane reads the N0 logits (and below the N0 probabilities)
             * 16 bytes at a time: the loop is issue-bound at 4 CTAs per SM. */
            float all[C::N0];
            load_row<C::N0>(sh.sc[warp], all);
            float mt[GB];
#pragma unroll
            for (int g = 0; g < GB; g++) mt[g] = -INFINITY;
#pragma unroll
            for (int i = 0; i < C::N0; i++) mt[i % GB] = fmaxf(mt[i % GB], all[i]);
            /* m and mt are the same in every lane, so a head whose maximum
             * holds (most steps after the first) skips its rescale as a
             * warp-uniform branch. */
            float mu_own = 0.f;
#pragma unroll
            for (int g = 0; g < GB; g++) {
                if (mt[g] > m[g]) {
                    const float alpha = exp2f(m[g] - mt[g]); /* 0 while m is -inf */
                    l[g] *= alpha;
#pragma unroll
                    for (int c = 0; c < C::CPL; c++) acc[g][c] *= alpha;
                    m[g] = mt[g];
                }
                if (g == own_g) mu_own = m[g] == -INFINITY ? 0.f : m[g];
            }
            sh.pc[warp][idx] = exp2f(lg - mu_own);
            __syncwarp();
            load_row<C::N0>(sh.pc[warp], all);
#pragma unroll
            for (int kk = 0; kk < C::NKW; kk++) {
                float vf[C::CPL];
                lane_load<KT, C::CPL>(Vt + (row0 + kk) * D + lane * C::CPL, vf);
#pragma unroll
                for (int g = 0; g < GB; g++) {
                    const float pr = all[kk * GB + g];
                    l[g] += pr;
#pragma unroll
                    for (int c = 0; c < C::CPL; c++) acc[g][c] = fmaf(pr, vf[c], acc[g][c]);
                }
            }
            __syncwarp();
        }
    }

    /* The warp's state into the merge buffers ([NW][GB][D], [NW][GB]). */
    __device__ __forceinline__ void store(float *sm_acc, float (*sm_m)[GB], float (*sm_l)[GB],
                                          int warp, int lane)
    {
#pragma unroll
        for (int g = 0; g < GB; g++) {
#pragma unroll
            for (int c = 0; c < C::CPL; c++)
                sm_acc[(warp * GB + g) * D + lane * C::CPL + c] = acc[g][c];
            if (lane == 0) {
                sm_m[warp][g] = m[g];
                sm_l[warp][g] = l[g];
            }
        }
    }
};

/* Tensor-core arithmetic, with g = lane / 4 and t = lane % 4. A step takes
 * 8 keys of the warp's share: S^T[key][head] = K Q^T as an m16n8k16 tile
 * whose rows 8-15 are zero, so this lane holds the logits of key g for
 * heads 2t, 2t+1; their maxima over the 8 keys are three shuffles away. P^T
 * goes through movmatrix into the B operand of O^T[channel][head] += V^T P^T
 * (m16n8k8, V^T by ldmatrix.trans), whose accumulators hold the same two
 * heads, so rescaling needs no exchange. The stage rows are XOR-swizzled by
 * the copy (swz) so every ldmatrix phase hits 8 different bank groups.
 *
 * 16-bit caches of the query's type feed the mma as they are. FP8 caches
 * (head size 128) run it in fp16, which holds every e4m3 and e5m2 value
 * exactly: one ldmatrix gives a lane 4 bytes where a 16-bit tile would give
 * it 2 elements, so the channels are permuted instead of shuffled.
 *   - K (ldmatrix): lane (g, t) gets channels 4t..4t+3 of a 16-channel block
 *     for key g; they become k-indices 2t, 2t+1 (a0) and 2t+8, 2t+9 (a2),
 *     and Q's B fragment takes the same channels (dot products do not care
 *     about the order).
 *   - V (ldmatrix.trans): lane (g, t) gets channels 2g, 2g+1 of keys 2t,
 *     2t+1; A row g is channel 2g and row g+8 channel 2g+1, so O^T's rows
 *     are permuted the same way and the store undoes it.
 *   - Q is scaled per head by a power of two into fp16's top binade (exact
 *     for bf16 queries of any range); the logits are scaled back. */
template <typename QT, typename KT, int D, int GB> struct tc_math {
    using C = stream_cfg<KT, D, GB>;
    static constexpr bool FP8 = elem<KT>::fp8;
    using MT = std::conditional_t<FP8, half, QT>; /* mma operand type */
    static constexpr int KS = D / 16;             /* k-steps of S, 16-channel row blocks of O^T */
    static constexpr int BL = FP8 ? 64 : 32;      /* channels per ldmatrix.x4 */
    /* Keys a warp step: 16 where a warp's share of the stage holds them
     * (FP8: 16 of 64), as both 8-row halves of every m16n8k16 tile; else 8,
     * the tile's upper rows zero */
    static constexpr int STEP = C::KW % 16 == 0 ? 16 : 8, R = STEP / 8;
    static_assert(GB <= 8 && C::KW % 8 == 0 && KS % 2 == 0, "tensor-core decode shape");
    static_assert(!FP8 || C::CR == 8, "fp8 rows of 8 chunks (head size 128)");
    struct shared_t {};
    uint32_t qf[KS][2]; /* Q^T B fragments of head g (channels above) */
    float o[KS][4];     /* O^T: channel rows (above) x heads 2t, 2t+1 */
    float m[2], l[2];   /* heads 2t, 2t+1; l sums this lane's keys only */
    float qinv[2];      /* FP8: the inverse of heads 2t, 2t+1's query scale */

    /* Heads from nh on are padding (decode_heads.h): they repeat the last
     * real head's query. k_scale (FP8): the KV head's key dequantisation
     * from the scale tensors, folded into the logits' scale-back. */
    __device__ __forceinline__ void init(const QT *qtok, int64_t q_stride_h, int h0, int nh,
                                         int lane, float k_scale)
    {
        const int g = lane / 4, t = lane % 4;
        const uint32_t *qp =
            reinterpret_cast<const uint32_t *>(qtok + (int64_t)(h0 + min(g, nh - 1)) * q_stride_h);
        if constexpr (FP8) {
            float2 q[KS][2];
            float amax = 0.f;
#pragma unroll
            for (int k = 0; k < KS; k++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    q[k][h] = g < GB ? unpack2(qp[8 * k + 2 * t + h], (QT *)nullptr)
                                     : make_float2(0.f, 0.f);
                    amax = fmaxf(amax, fmaxf(fabsf(q[k][h].x), fabsf(q[k][h].y)));
                }
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
            const int sh = f16_top_shift(amax);
            const float qs = ldexpf(1.f, sh);
#pragma unroll
            for (int k = 0; k < KS; k++)
#pragma unroll
                for (int h = 0; h < 2; h++) qf[k][h] = pack2<half>(q[k][h].x * qs, q[k][h].y * qs);
#pragma unroll
            for (int h = 0; h < 2; h++)
                qinv[h] = __shfl_sync(0xffffffffu, ldexpf(1.f, -sh), 4 * (2 * t + h)) * k_scale;
        } else {
#pragma unroll
            for (int k = 0; k < KS; k++) {
                qf[k][0] = g < GB ? qp[8 * k + t] : 0u;
                qf[k][1] = g < GB ? qp[8 * k + t + 4] : 0u;
            }
        }
#pragma unroll
        for (int k = 0; k < KS; k++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[k][i] = 0.f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.f;
    }

    __device__ __forceinline__ void tile(const attn_params &p, shared_t &, const unsigned char *st,
                                         int kb, int b, int pos, int h0, int warp, int lane)
    {
        const int g = lane / 4, t = lane % 4;
        const uint32_t ks = smem_addr(st), vs = ks + C::BN * C::ROWB;
#pragma unroll
        for (int ck = 0; ck < C::KW / STEP; ck++) {
            const int row0 = warp * C::KW + ck * STEP;
            /* ldmatrix lane addresses: row row0 + lane % 8, chunk 4i + lane / 8;
             * a 16-key step's second 8 keys 8 rows on (the same swizzle). */
            const int lr = row0 + lane % 8, lc = lane / 8;
            float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int i = 0; i < D / BL; i++) {
                uint32_t a[4], a8[4] = {0u, 0u, 0u, 0u};
                ldsm_x4(a, ks + swz<C::CR>(lr, 4 * i + lc));
                if constexpr (R == 2) ldsm_x4(a8, ks + swz<C::CR>(lr + 8, 4 * i + lc));
                if constexpr (FP8) {
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const uint2 x = fp8x4_to_f16x2x2<KT>(a[j]),
                                    y = R == 2 ? fp8x4_to_f16x2x2<KT>(a8[j]) : make_uint2(0u, 0u);
                        const uint32_t aj[4] = {x.x, y.x, x.y, y.y};
                        mma_op<MT>::run(s, aj, qf[4 * i + j][0], qf[4 * i + j][1]);
                    }
                } else {
                    const uint32_t a0[4] = {a[0], a8[0], a[1], a8[1]},
                                   a1[4] = {a[2], a8[2], a[3], a8[3]};
                    mma_op<MT>::run(s, a0, qf[2 * i][0], qf[2 * i][1]);
                    mma_op<MT>::run(s, a1, qf[2 * i + 1][0], qf[2 * i + 1][1]);
                }
            }
            /* s[2r + e]: key row0 + g + 8r, head 2t + e */
            float lg[R][2], mt[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int h = 2 * t + e;
                mt[e] = -INFINITY;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int j = kb + row0 + g + 8 * r;
                    const float dot = FP8 ? s[2 * r + e] * qinv[e] : s[2 * r + e];
                    lg[r][e] = -INFINITY;
                    if (j < b && h < GB)
                        lg[r][e] = logit2(p.var, dot,
                                          p.var.alibi ? p.var.slopes[padded_head(p, h0 + h)] : 0.f,
                                          j, pos);
                    mt[e] = fmaxf(mt[e], lg[r][e]);
                }
#pragma unroll
                for (int off = 4; off < 32; off *= 2)
                    mt[e] = fmaxf(mt[e], __shfl_xor_sync(0xffffffffu, mt[e], off));
                mt[e] = fmaxf(mt[e], m[e]);
            }
            /* Rescale only when some head's maximum moved (rare after the
             * first steps); alpha is 0 while m is -inf. */
            if (!__all_sync(0xffffffffu, mt[0] == m[0] && mt[1] == m[1])) {
                const float al0 = mt[0] == m[0] ? 1.f : exp2f(m[0] - mt[0]);
                const float al1 = mt[1] == m[1] ? 1.f : exp2f(m[1] - mt[1]);
                l[0] *= al0;
                l[1] *= al1;
#pragma unroll
                for (int k = 0; k < KS; k++) {
                    o[k][0] *= al0, o[k][1] *= al1;
                    o[k][2] *= al0, o[k][3] *= al1;
                }
                m[0] = mt[0], m[1] = mt[1];
            }
            /* P^T as the second GEMM's B operand, 8 keys a movmatrix */
            uint32_t pb[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                float pr[2];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    pr[e] = exp2f(lg[r][e] - (m[e] == -INFINITY ? 0.f : m[e]));
                    l[e] += pr[e];
                }
                pb[r] = movmatrix_t(pack2<MT>(pr[0], pr[1]));
            }
#pragma unroll
            for (int i = 0; i < D / BL; i++) {
                uint32_t a[4], a8[4];
                ldsm_x4_t(a, vs + swz<C::CR>(lr, 4 * i + lc));
                if constexpr (R == 2) ldsm_x4_t(a8, vs + swz<C::CR>(lr + 8, 4 * i + lc));
                if constexpr (FP8) {
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        /* O^T rows g, g + 8: channels 2g, 2g + 1 (store) */
                        const uint2 x = fp8x4_to_f16x2x2<KT>(__byte_perm(a[j], 0u, 0x3120));
                        if constexpr (R == 2) {
                            const uint2 y = fp8x4_to_f16x2x2<KT>(__byte_perm(a8[j], 0u, 0x3120));
                            const uint32_t aj[4] = {x.x, x.y, y.x, y.y};
                            mma_op<MT>::run(o[4 * i + j], aj, pb[0], pb[R - 1]);
                        } else {
                            mma_op<MT>::run_k8(o[4 * i + j], x.x, x.y, pb[0]);
                        }
                    }
                } else if constexpr (R == 2) {
                    const uint32_t a0[4] = {a[0], a[1], a8[0], a8[1]},
                                   a1[4] = {a[2], a[3], a8[2], a8[3]};
                    mma_op<MT>::run(o[2 * i], a0, pb[0], pb[R - 1]);
                    mma_op<MT>::run(o[2 * i + 1], a1, pb[0], pb[R - 1]);
                } else {
                    mma_op<MT>::run_k8(o[2 * i], a[0], a[1], pb[0]);
                    mma_op<MT>::run_k8(o[2 * i + 1], a[2], a[3], pb[0]);
                }
            }
        }
    }

    __device__ __forceinline__ void store(float *sm_acc, float (*sm_m)[GB], float (*sm_l)[GB],
                                          int warp, int lane)
    {
        const int g = lane / 4, t = lane % 4;
        /* Channels of O^T's rows g and g + 8 within each 16-channel block. */
        const int c0 = FP8 ? 2 * g : g, c1 = FP8 ? 2 * g + 1 : g + 8;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float le = l[e];
#pragma unroll
            for (int off = 4; off < 32; off *= 2) le += __shfl_xor_sync(0xffffffffu, le, off);
            const int h = 2 * t + e;
            if (h < GB) {
                float *row = sm_acc + (warp * GB + h) * D;
#pragma unroll
                for (int k = 0; k < KS; k++) {
                    row[16 * k + c0] = o[k][e];
                    row[16 * k + c1] = o[k][2 + e];
                }
                if (g == 0) {
                    sm_m[warp][h] = m[e];
                    sm_l[warp][h] = le;
                }
            }
        }
    }
};

/* Can this instantiation take tc_math? (Head size 128, FP8 KV or 16-bit
 * KV of the query's type, with whole 8-key warp steps.) */
template <typename QT, typename KT, int D, int GB> constexpr bool tc_fits()
{
    if constexpr (D != 128 || GB > 8) return false; /* (no stream_cfg of other shapes) */
    else
        return (elem<KT>::fp8 || std::is_same<QT, KT>::value) && stream_cfg<KT, D, GB>::KW % 8 == 0;
}

template <typename QT, typename KT, int D, int GB, bool TC>
__global__ void __launch_bounds__(128) decode_stream_kernel(const attn_params p)
{
    using C = stream_cfg<KT, D, GB>;
    using Math = std::conditional_t<TC, tc_math<QT, KT, D, GB>, fma_math<QT, KT, D, GB>>;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ typename Math::shared_t msh;
    __shared__ float sm_m[C::NW][GB], sm_l[C::NW][GB];

    const decode_cta cta(p, GB);
    const int t = cta.t, split = cta.split, hk = cta.hk, h0 = cta.h0, nh = cta.nh;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int ns = C::NS;
    allow_dependent_launch(); /* the split merge may be scheduled now; it waits for us */

    const int r = p.plan.token_req[t], pos = p.plan.token_pos[t];
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    const split_keys keys(p, pos, p.plan.seq_lens[r], split, C::BN);
    const int a = keys.a, b = keys.b, ntiles = keys.ntiles;

    const KT *kc = static_cast<const KT *>(p.k_cache);
    const KT *vc = static_cast<const KT *>(p.v_cache);

    /* This thread's copy slots: chunk cc of rows rr + i * (THREADS / CR),
     * at chunk cc ^ (row % 8) for the tensor-core reads. */
    const int cc = threadIdx.x % C::CR, rr = threadIdx.x / C::CR;
    const int shift = p.kg.page_shift, mask = (1 << shift) - 1;
    const int64_t head_off = (int64_t)hk * p.kg.stride_head + cc * (16 / C::ES);
    int pg[C::LPT];
    auto fetch_pages = [&](int it) {
#pragma unroll
        for (int i = 0; i < C::LPT; i++) {
            const int j = a + it * C::BN + rr + i * (C::THREADS / C::CR);
            pg[i] = j < b ? __ldg(pages + (j >> shift)) : 0;
        }
    };
    auto issue = [&](int it) {
        unsigned char *st = smem + (it % ns) * C::STAGE;
#pragma unroll
        for (int i = 0; i < C::LPT; i++) {
            const int row = rr + i * (C::THREADS / C::CR), j = a + it * C::BN + row;
            const bool ok = j < b;
            const int64_t off = (int64_t)pg[i] * p.kg.stride_page +
                                (int64_t)(j & mask) * p.kg.stride_slot + head_off;
            unsigned char *dk = st + (TC ? (int)swz<C::CR>(row, cc) : row * C::ROWB + cc * 16);
            cp_async16(dk, ok ? (const void *)(kc + off) : (const void *)kc, ok ? 16 : 0);
            cp_async16(dk + C::BN * C::ROWB, ok ? (const void *)(vc + off) : (const void *)vc,
                       ok ? 16 : 0);
        }
    };

    const kv_dequant dq = tensor_scales<KT>(p.var, hk);
    Math math;
    math.init(static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t, p.q_stride_h, h0, nh, lane,
              dq.k);

    if (ntiles > 0) fetch_pages(0);
    stage_pipeline(
        ns, ntiles,
        [&](int it) {
            issue(it);
            if (it + 1 < ntiles) fetch_pages(it + 1);
        },
        [&](int it) {
            math.tile(p, msh, smem + (it % ns) * C::STAGE, a + it * C::BN, b, pos, h0, warp, lane);
        });
    __syncthreads(); /* the stage buffers become the merge buffer */

    float *sm_acc = reinterpret_cast<float *>(smem); /* [NW][GB][D] */
    math.store(sm_acc, sm_m, sm_l, warp, lane);
    __syncthreads();

    merge_cta_states<QT, C::NW, GB, D, C::THREADS>(p, sm_acc, sm_m, sm_l, t, h0, split,
                                                   p.var.v_scale * dq.v);
}

} // namespace fi

#endif
