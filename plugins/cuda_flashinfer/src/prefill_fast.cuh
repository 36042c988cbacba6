/*
 * Fast tensor-core kernel for prefill, extend and mixed batches when the KV
 * cache has the query's 16-bit type and the logits need no per-element hook
 * (no soft-cap, no ALiBi); masks (causal, window, cross, encoder), sinks,
 * LSE, partial states and the cascade prefix pass are all handled. FP8
 * caches, soft-cap and ALiBi go through prefill_kernel.cuh instead.
 *
 * One CTA of 4 warps per (64 packed rows, or 128 at d128, KV head, key range); rows pack the GQA
 * group (row = token * group + head-in-group) so one K/V tile serves all query heads of the KV
 * head. What makes it fast, compared with the general kernel:
 *   - Q is read into registers once (ldmatrix) at d64, so each tile's
 *     S = Q K^T reads only K from shared memory; at d128 (32 rows per warp)
 *     and d256 it stays in shared memory;
 *   - K/V tiles are stored with a 16-byte-chunk XOR swizzle (chunk ^ row % 8):
 *     the 8 rows an ldmatrix phase reads hit 8 different bank groups, with no
 *     padding (two K+V stages: 64 KiB at d128);
 *   - a cp.async pipeline of NS stages, the next tile's page numbers loaded
 *     into registers one iteration ahead (no copy waits on a table read);
 *   - the online softmax keeps the running maximum in base-2 units and turns
 *     a raw score into a probability with one FFMA and one exp2;
 *   - only tiles that cross some row's visible range are masked (CTA-uniform
 *     test): fully visible tiles skip the per-element compare, tiles outside
 *     every row's range are never visited;
 *   - P leaves the S accumulators as bf16/fp16 A fragments of the P.V mma
 *     (the accumulator layout equals the A-operand layout), and V is read with
 *     ldmatrix.trans, so P never goes through shared memory.
 */
#ifndef FI_PREFILL_FAST_CUH
#define FI_PREFILL_FAST_CUH

#include "prefill_kernel.cuh"

namespace fi {

template <int D, int MT_ = 1> struct fast_cfg {
    /* MT: m16 row blocks per warp. With 2 (d128) each warp owns
     * 32 rows (two row blocks share every K and V fragment read by ldmatrix:
     * half the shared-memory reads per mma), a CTA covers 128 rows and Q,
     * too big for registers beside 32 rows of O, stays in shared memory. */
    static constexpr int MT = MT_;
    static constexpr int THREADS = 128, NW = 4, BQ = NW * 16 * MT;
    static constexpr int BK = D <= 128 ? 64 : 32;
    static constexpr int NS = D <= 64 ? 3 : 2;        /* pipeline stages */
    static constexpr bool QREG = D <= 128 && MT == 1; /* Q fragments in registers */
    static constexpr int CH = D / 8;                  /* 16-byte chunks per row */
    static constexpr int TILE = BK * D;               /* elements of one K (or V) tile */
    static constexpr int STAGE = 2 * TILE;            /* K then V */
    static constexpr int QTILE = BQ * D;
    static constexpr int TPR = THREADS / BK; /* loader threads per key row */
    static constexpr int CPT = CH / TPR;     /* chunks per thread per tensor */
    /* With Q in registers its staging buffer is the last stage (first written
     * after every warp has read Q); otherwise Q keeps its own region. */
    static constexpr size_t SMEM = (size_t)(NS * STAGE + (QREG ? 0 : QTILE)) * 2;
    static_assert(CH >= 8, "swizzle needs 8 chunks per row");
    static_assert(!QREG || QTILE <= STAGE, "Q staged in one stage");
    static_assert(CPT * TPR == CH && TPR * BK == THREADS, "tile copy must split evenly");
    static_assert(FI_TILE_ROWS % BQ == 0, "a plan tile splits into whole CTAs");
    static constexpr int SUB = FI_TILE_ROWS / BQ; /* CTAs per plan tile */
};

/* x ^ k, computed where it is used: an opaque XOR the compiler cannot hoist
 * out of the tile loop, so the 8 swizzled fragment offsets of a row block
 * cost one LOP3 per ldmatrix instead of 8 live registers each (what lets
 * 32 rows per warp fit in 255 registers). */
__device__ __forceinline__ uint32_t xor_here(uint32_t x, uint32_t k)
{
    uint32_t r;
    asm volatile("xor.b32 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(k));
    return r;
}

/* Registers fitted for 2 CTAs per SM; MT: 16-row blocks per warp (2 at
 * d128: 128-row CTAs; 1 elsewhere: 64-row CTAs). */
template <typename QT, int D, int MT_>
__global__ void __launch_bounds__(128, 2) prefill_fast_kernel(const attn_params p)
{
    using C = fast_cfg<D, MT_>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t sbase = smem_addr(smem_raw);
    const uint32_t qbase =
        C::QREG ? sbase + (C::NS - 1) * C::STAGE * 2 : sbase + C::NS * C::STAGE * 2;
    __shared__ int s_lo, s_hi, s_maxlo, s_minhi;
    __shared__ int2 s_rng[C::BQ]; /* each row's visible keys, read by masked tiles only */

    /* Grid x = (tile, KV head) with the head fastest, tiles in reverse order:
     * a request's last tiles see the most keys under a causal mask, so the
     * longest CTAs start first and the short ones fill the tail. */
    const int hk = (int)blockIdx.x % p.num_kv_heads, G = p.group;
    cta_rows cr;
    if (!cta_rows_find<C::BQ, C::SUB, true>(p, &cr)) return;
    const int row0 = cr.row0, nrows = cr.nrows, tok0 = cr.tok0;
    const int32_t *pages = cr.pages;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;

    /* This thread's 2 x MT rows (g8 and g8+8 of each of its warp's 16-row
     * blocks) and their visible key ranges; the CTA keeps their union (tiles
     * to visit) and intersection (tiles that need no mask). */
    constexpr int MT = C::MT, NR = 2 * MT; /* row r: block r / 2, half r % 2 */
    int r_lo[NR], r_hi[NR];                /* kept in s_rng, not registers, past the prologue */
    if (tid == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
        s_maxlo = INT_MIN;
        s_minhi = INT_MAX;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NR; i++) {
        const int rho = row0 + (warp * MT + i / 2) * 16 + g8 + (i % 2) * 8;
        r_lo[i] = 0;
        r_hi[i] = 0;
        if (rho < nrows) {
            row_keys(p, cr, p.plan.token_pos[tok0 + rho / G], &r_lo[i], &r_hi[i]);
            row_keys_fold(r_lo[i], r_hi[i], &s_lo, &s_hi, &s_maxlo, &s_minhi);
        }
        if (t4 == 0)
            s_rng[(warp * MT + i / 2) * 16 + g8 + (i % 2) * 8] = make_int2(r_lo[i], r_hi[i]);
    }

    /* Q tile, swizzled, as cp.async group 0. */
    const QT *qg = static_cast<const QT *>(p.q);
    for (int idx = tid; idx < C::BQ * C::CH; idx += C::THREADS) {
        const int rr = idx / C::CH, ch = idx % C::CH, rho = row0 + rr;
        const bool ok = rho < nrows;
        const QT *src = ok ? qg + (int64_t)(tok0 + rho / G) * p.q_stride_t +
                                 (int64_t)(hk * G + rho % G) * p.q_stride_h + ch * 8
                           : qg;
        asm volatile(
            "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(qbase + swz<C::CH>(rr, ch)),
            "l"(src), "r"(ok ? 16 : 0));
    }
    cp_async_commit();
    __syncthreads(); /* the range atomics are visible */
    const int kv_lo = s_lo, kv_hi = s_hi, full_lo = s_maxlo, full_hi = s_minhi;
    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + C::BK - 1) / C::BK : 0;

    /* Tile loader: TPR threads per key row, thread chunks i * TPR + lh (the
     * TPR threads of a row read 16 * TPR contiguous bytes per copy), so each
     * thread needs one page number per tile, loaded one tile ahead. Its
     * swizzled chunks are (i * TPR) ^ (lh ^ row % 8): one offset XOR an
     * immediate. */
    const QT *kc = static_cast<const QT *>(p.k_cache);
    const QT *vc = static_cast<const QT *>(p.v_cache);
    const int lrow = tid / C::TPR, lh = tid % C::TPR;
    const uint32_t ld_off = swz<C::CH>(lrow, lh);
    const int shift = p.kg.page_shift, pmask = (1 << shift) - 1;
    const QT *kbase = kc + (int64_t)hk * p.kg.stride_head + lh * 8;
    const QT *vbase = vc + (int64_t)hk * p.vg.stride_head + lh * 8;
    int pgn = 0;
    auto fetch_pages = [&](int it) {
        const int j = kv_lo + it * C::BK + lrow;
        pgn = j < (MT > 1 ? s_hi : kv_hi) ? __ldg(pages + (j >> shift)) : 0;
    };
    auto issue = [&](int it) {
        const uint32_t st = sbase + (it % C::NS) * C::STAGE * 2;
        const int j = kv_lo + it * C::BK + lrow;
        const bool ok = j < (MT > 1 ? s_hi : kv_hi);
        const int64_t slot = j & pmask;
        const QT *ks = kc, *vs = vc;
        if (ok && MT > 1) { /* no per-thread 64-bit bases live across the loop */
            ks = kc + ((int64_t)hk * p.kg.stride_head + pgn * p.kg.stride_page +
                       slot * p.kg.stride_slot + lh * 8);
            vs = vc + ((int64_t)hk * p.vg.stride_head + pgn * p.vg.stride_page +
                       slot * p.vg.stride_slot + lh * 8);
        } else if (ok) {
            ks = kbase + pgn * p.kg.stride_page + slot * p.kg.stride_slot;
            vs = vbase + pgn * p.vg.stride_page + slot * p.vg.stride_slot;
        }
        const int nb = ok ? 16 : 0;
#pragma unroll
        for (int i = 0; i < C::CPT; i++) {
            const uint32_t o = ld_off ^ (uint32_t)(i * C::TPR * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(st + o),
                         "l"(ks + i * C::TPR * 8), "r"(nb));
            asm volatile(
                "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(st + C::TILE * 2 + o),
                "l"(vs + i * C::TPR * 8), "r"(nb));
        }
    };

    if (ntiles > 0) fetch_pages(0);
#pragma unroll
    for (int s = 0; s < C::NS - 1; s++) {
        if (s < ntiles) {
            issue(s);
            if (s + 1 < ntiles) fetch_pages(s + 1);
        }
        cp_async_commit();
    }

    /* Per-lane ldmatrix coordinates (rows within a 16-row block, chunk parity):
     * A / V.trans: row lane%8 + 8*((lane/8)%2), chunk lane/16;
     * K (B of Q K^T): row lane%8 + 8*(lane/16), chunk (lane/8)%2. */
    const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_ch = lane >> 4;
    const int b_row = (lane & 7) + 8 * (lane >> 4), b_ch = (lane >> 3) & 1;
    /* Chunk 2k + c of a row r (r % 8 == lane % 8) sits at chunk (2k + c) ^ (lane % 8)
     * = (2k) ^ (c ^ lane % 8): a per-lane offset XOR (k << 5) bytes, so every
     * fragment address is one lane register, one XOR immediate and an
     * immediate row-block offset (few live address registers). */
    const uint32_t a_off = swz<C::CH>(a_row, a_ch), b_off = swz<C::CH>(b_row, b_ch);
    const uint32_t q_off = qbase + (uint32_t)(warp * MT * 16 * C::CH * 16); /* this warp's Q rows */

    uint32_t qf[C::QREG ? D / 16 : 1][4];
    if constexpr (C::QREG) {
        cp_async_wait<C::NS - 1>(); /* group 0 (Q) landed */
        __syncthreads();
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++)
            ldsm_x4(qf[kd], qbase + warp * 16 * C::CH * 16 + (a_off ^ (kd << 5)));
    }

    float o[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < D / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
    float m[NR], l[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) m[i] = -INFINITY, l[i] = 0.f;
    const float sl2 = p.var.qk_scale * FI_LOG2E; /* raw dot -> base-2 logit */

    for (int it = 0; it < ntiles; it++) {
        cp_async_wait<C::NS - 2>();
        __syncthreads(); /* tile it landed; every warp left tile it-1's stage (and Q) */
        if (it + C::NS - 1 < ntiles) {
            issue(it + C::NS - 1);
            if (it + C::NS < ntiles) fetch_pages(it + C::NS);
        }
        cp_async_commit();
        const uint32_t kt = sbase + (it % C::NS) * C::STAGE * 2, vt = kt + C::TILE * 2;
        const int kb = kv_lo + it * C::BK;

        /* S = Q K^T for this warp's 16 x MT rows and BK keys (raw dot
         * products); each K fragment serves the MT row blocks. */
        float s[MT][C::BK / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
                s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if constexpr (C::QREG) {
                    qa[mt][0] = qf[kd][0], qa[mt][1] = qf[kd][1], qa[mt][2] = qf[kd][2],
                    qa[mt][3] = qf[kd][3];
                } else {
                    ldsm_x4(qa[mt], q_off + (uint32_t)(mt * 16 * C::CH * 16) +
                                        (MT > 1 ? xor_here(a_off, kd << 5) : a_off ^ (kd << 5)));
                }
            }
#pragma unroll
            for (int np = 0; np < C::BK / 16; np++) {
                uint32_t b[4];
                ldsm_x4(b, kt + np * 16 * C::CH * 16 +
                               (MT > 1 ? xor_here(b_off, kd << 5) : b_off ^ (kd << 5)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_op<QT>::run(s[mt][2 * np], qa[mt], b[0], b[1]);
                    mma_op<QT>::run(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
                }
            }
        }

        /* Mask only a tile that crosses some row's range (CTA-uniform test). */
        /* At 32 rows per warp the bounds are re-read from shared memory (a
         * barrier precedes this point), sparing two registers across the loop. */
        const int flo = MT > 1 ? s_maxlo : full_lo, fhi = MT > 1 ? s_minhi : full_hi;
        if (kb < flo || kb + C::BK > fhi) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = kb + n * 8 + 2 * t4 + (e & 1);
                        const int2 rg = s_rng[(warp * MT + mt) * 16 + g8 + (e >> 1) * 8];
                        if (j < rg.x || j >= rg.y) s[mt][n][e] = -INFINITY;
                    }
        }

        /* Online softmax, base 2: m in logit2 units, p = exp2(s * sl2 - m). */
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int mt = r / 2, i = r % 2;
            float mx = s[mt][0][2 * i];
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
                mx = fmaxf(mx, fmaxf(s[mt][n][2 * i], s[mt][n][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m[r], mx * sl2);
            const float mu = mn == -INFINITY ? 0.f : mn;
            const float alpha = exp2f(m[r] - mu);
            m[r] = mn;
            l[r] *= alpha;
#pragma unroll
            for (int d = 0; d < D / 8; d++) {
                o[mt][d][2 * i] *= alpha;
                o[mt][d][2 * i + 1] *= alpha;
            }
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++) {
                s[mt][n][2 * i] = exp2f(fmaf(s[mt][n][2 * i], sl2, -mu));
                s[mt][n][2 * i + 1] = exp2f(fmaf(s[mt][n][2 * i + 1], sl2, -mu));
                l[r] += s[mt][n][2 * i] + s[mt][n][2 * i + 1];
            }
        }

        /* O += P V: the S accumulators are the A fragments (packed at once,
         * halving their registers); each V fragment serves the MT row blocks. */
        uint32_t pa[C::BK / 16][MT][4];
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; kk++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                pa[kk][mt][0] = pack2<QT>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[kk][mt][1] = pack2<QT>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[kk][mt][2] = pack2<QT>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[kk][mt][3] = pack2<QT>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; kk++) {
            const uint32_t(&a)[MT][4] = pa[kk];
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, vt + kk * 16 * C::CH * 16 +
                                 (MT > 1 ? xor_here(a_off, dp << 5) : a_off ^ (dp << 5)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_op<QT>::run(o[mt][2 * dp], a[mt], b[0], b[1]);
                    mma_op<QT>::run(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < NR; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }

#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int mt = r / 2, i = r % 2;
        const int rho = row0 + (warp * MT + mt) * 16 + g8 + i * 8;
        if (rho >= nrows) continue;
        const int tok = tok0 + rho / G, h = hk * G + rho % G;
        const float M = m[r], L = l[r];
        if (!p.partial) {
            float f, lse2;
            finish_state(p.var, h, L, M, &f, &lse2);
            f *= p.var.v_scale;
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t +
                       (int64_t)h * p.o.out_stride_h;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<uint32_t *>(orow + d * 8 + 2 * t4) =
                    pack2<QT>(o[mt][d][i * 2] * f, o[mt][d][i * 2 + 1] * f);
            if (t4 == 0 && p.o.lse) p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + blockIdx.z) * p.num_tokens + tok;
            const float f = L > 0.f ? p.var.v_scale / L : 0.f;
            float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * D;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<float2 *>(prow + d * 8 + 2 * t4) =
                    make_float2(o[mt][d][i * 2] * f, o[mt][d][i * 2 + 1] * f);
            if (t4 == 0)
                p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
}

template <int D>
cudaError_t prefill_launch_hd(int q_dtype, int kv_dtype, prefill_family family,
                              const attn_params &p, int grid_tiles, cudaStream_t st)
{
    constexpr int MT = D == 128 ? 2 : 1; /* 32 rows per warp at d128, 16 elsewhere */
    using C = fast_cfg<D, MT>;
    FI_DISPATCH_QTYPE(q_dtype, QT, {
        auto kern = prefill_fast_kernel<QT, D, MT>;
        /* grid_tiles 0: prepare only (raise the shared-memory limits of the
         * family's kernel and of those it stands for), done once at state
         * creation, never inside a capture. */
        if (grid_tiles <= 0) {
            cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)C::SMEM);
#ifdef FI_HAVE_SM90
            if (e == cudaSuccess && family == FI_PREFILL_SM90)
                e = launch_prefill_sm90(q_dtype, p, 0, st);
#endif
            if (e != cudaSuccess) return e;
            return prefill_general_launch<D>(q_dtype, kv_dtype, p, grid_tiles, st);
        }
        switch (family) {
        case FI_PREFILL_GENERAL:
            return prefill_general_launch<D>(q_dtype, kv_dtype, p, grid_tiles, st);
#ifdef FI_HAVE_SM90
        case FI_PREFILL_SM90: return launch_prefill_sm90(q_dtype, p, grid_tiles, st);
#endif
        case FI_PREFILL_FAST: {
            const int kz = p.kv_splits > 1 ? p.kv_splits : 1;
            kern<<<dim3(grid_tiles * C::SUB * p.num_kv_heads, 1, kz), C::THREADS, C::SMEM, st>>>(p);
            return cudaPeekAtLastError();
        }
        default: FI_UNSUPPORTED("prefill kernel family", family, "general, fast, sm90 (if built)");
        }
    })
    return cudaSuccess;
}

} // namespace fi

#endif
