/*
 * Fast tensor-core kernel for prefill, extend and mixed batches when the KV
 * cache has the query's 16-bit type and the logits need no per-element hook
 * (no soft-cap, no ALiBi); masks (causal, window, cross, encoder), sinks,
 * LSE, partial states and the cascade prefix pass are all handled. FP8
 * caches, soft-cap and ALiBi go through prefill_kernel.cuh instead.
 *
 * One CTA of 4 warps per (64 packed rows, KV head, key range); rows pack the GQA group
 * (row = token * group + head-in-group) so one K/V tile serves all query
 * heads of the KV head. What makes it fast, compared with the general kernel:
 *   - Q is read into registers once (ldmatrix) for head sizes up to 128, so
 *     each tile's S = Q K^T reads only K from shared memory;
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

template <int D> struct fast_cfg {
    static constexpr int BQ = 64, THREADS = 128, NW = 4;
    static constexpr int BK = D <= 128 ? 64 : 32;
    static constexpr int NS = D <= 64 ? 3 : 2;      /* pipeline stages */
    static constexpr bool QREG = D <= 128;          /* Q fragments in registers */
    static constexpr int CH = D / 8;                /* 16-byte chunks per row */
    static constexpr int TILE = BK * D;             /* elements of one K (or V) tile */
    static constexpr int STAGE = 2 * TILE;          /* K then V */
    static constexpr int QTILE = BQ * D;
    static constexpr int TPR = THREADS / BK;        /* loader threads per key row */
    static constexpr int CPT = CH / TPR;            /* chunks per thread per tensor */
    /* With Q in registers its staging buffer is the last stage (first written
     * after every warp has read Q); otherwise Q keeps its own region. */
    static constexpr size_t SMEM = (size_t)(NS * STAGE + (QREG ? 0 : QTILE)) * 2;
    static_assert(CH >= 8, "swizzle needs 8 chunks per row");
    static_assert(!QREG || QTILE <= STAGE, "Q staged in one stage");
    static_assert(CPT * TPR == CH && TPR * BK == THREADS, "tile copy must split evenly");
};

/* Byte offset of (row, 16-byte chunk) in a swizzled tile of CH-chunk rows. */
template <int CH> __device__ __forceinline__ uint32_t swz(int row, int chunk)
{
    return (uint32_t)(row * CH + (chunk ^ (row & 7))) * 16u;
}

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

/* MINB: CTAs per SM the registers are fitted for. At d128, 2 (210
 * registers, none spilled: the default) or 3 (168 registers, a few values
 * spilled); which one runs is a launch-time choice (prefill_fast_minb). */
template <typename QT, int D, int MINB>
__global__ void __launch_bounds__(128, MINB) prefill_fast_kernel(const attn_params p)
{
    using C = fast_cfg<D>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t sbase = smem_addr(smem_raw);
    const uint32_t qbase = C::QREG ? sbase + (C::NS - 1) * C::STAGE * 2 : sbase + C::NS * C::STAGE * 2;
    __shared__ int s_lo, s_hi, s_maxlo, s_minhi;

    /* Grid x = (tile, KV head) with the head fastest, tiles in reverse order:
     * a request's last tiles see the most keys under a causal mask, so the
     * longest CTAs start first and the short ones fill the tail. */
    const int hk = (int)blockIdx.x % p.num_kv_heads, xi = (int)blockIdx.x / p.num_kv_heads;
    const int G = p.group;
    int req, row0, nrows, tok0, seq_len;
    if (p.shared_prefix) {
        req = 0;
        row0 = xi * C::BQ;
        nrows = p.num_tokens * G;
        tok0 = 0;
        seq_len = p.prefix_len;
    } else {
        const int nt = *p.plan.num_tiles;
        if (xi >= nt) return;
        req = p.plan.tile_req[nt - 1 - xi];
        row0 = p.plan.tile_row0[nt - 1 - xi];
        tok0 = p.plan.qo_indptr[req];
        nrows = (p.plan.qo_indptr[req + 1] - tok0) * G;
        seq_len = p.plan.seq_lens[req];
    }
    if (row0 >= nrows) return;
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[req];
    const int kv_begin = p.shared_prefix ? 0 : p.kv_begin;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g8 = lane / 4, t4 = lane % 4;

    /* This thread's two rows (g8 and g8+8 of its warp's 16) and their
     * visible key ranges; the CTA keeps their union (tiles to visit) and
     * intersection (tiles that need no mask). */
    int r_lo[2], r_hi[2];
    if (tid == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
        s_maxlo = INT_MIN;
        s_minhi = INT_MAX;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rho = row0 + warp * 16 + g8 + i * 8;
        r_lo[i] = 0;
        r_hi[i] = 0;
        if (rho < nrows) {
            visible_range(p.var, p.plan.token_pos[tok0 + rho / G], seq_len, kv_begin, &r_lo[i],
                          &r_hi[i]);
            if (p.kv_chunk > 0) { /* split keys: this CTA's range only */
                const int zl = (int)blockIdx.z * p.kv_chunk;
                r_lo[i] = max(r_lo[i], zl);
                r_hi[i] = min(r_hi[i], zl + p.kv_chunk);
            }
            atomicMax(&s_maxlo, r_lo[i]);
            atomicMin(&s_minhi, r_hi[i]);
            if (r_hi[i] > r_lo[i]) {
                atomicMin(&s_lo, r_lo[i]);
                atomicMax(&s_hi, r_hi[i]);
            }
        }
    }

    /* Q tile, swizzled, as cp.async group 0. */
    const QT *qg = static_cast<const QT *>(p.q);
    for (int idx = tid; idx < C::BQ * C::CH; idx += C::THREADS) {
        const int rr = idx / C::CH, ch = idx % C::CH, rho = row0 + rr;
        const bool ok = rho < nrows;
        const QT *src = ok ? qg + (int64_t)(tok0 + rho / G) * p.q_stride_t +
                                 (int64_t)(hk * G + rho % G) * p.q_stride_h + ch * 8
                           : qg;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(qbase + swz<C::CH>(rr, ch)),
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
        pgn = j < kv_hi ? __ldg(pages + (j >> shift)) : 0;
    };
    auto issue = [&](int it) {
        const uint32_t st = sbase + (it % C::NS) * C::STAGE * 2;
        const int j = kv_lo + it * C::BK + lrow;
        const bool ok = j < kv_hi;
        const int64_t slot = j & pmask;
        const QT *ks = ok ? kbase + pgn * p.kg.stride_page + slot * p.kg.stride_slot : kc;
        const QT *vs = ok ? vbase + pgn * p.vg.stride_page + slot * p.vg.stride_slot : vc;
        const int nb = ok ? 16 : 0;
#pragma unroll
        for (int i = 0; i < C::CPT; i++) {
            const uint32_t o = ld_off ^ (uint32_t)(i * C::TPR * 16);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(st + o),
                         "l"(ks + i * C::TPR * 8), "r"(nb));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(st + C::TILE * 2 + o),
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

    uint32_t qf[C::QREG ? D / 16 : 1][4];
    if constexpr (C::QREG) {
        cp_async_wait<C::NS - 1>(); /* group 0 (Q) landed */
        __syncthreads();
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++)
            ldsm_x4(qf[kd], qbase + warp * 16 * C::CH * 16 + (a_off ^ (kd << 5)));
    }

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
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

        /* S = Q K^T for this warp's 16 rows and BK keys (raw dot products). */
        float s[C::BK / 8][4];
#pragma unroll
        for (int n = 0; n < C::BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            uint32_t qa[4];
            if constexpr (C::QREG) {
                qa[0] = qf[kd][0], qa[1] = qf[kd][1], qa[2] = qf[kd][2], qa[3] = qf[kd][3];
            } else {
                ldsm_x4(qa, qbase + warp * 16 * C::CH * 16 + (a_off ^ (kd << 5)));
            }
#pragma unroll
            for (int np = 0; np < C::BK / 16; np++) {
                uint32_t b[4];
                ldsm_x4(b, kt + np * 16 * C::CH * 16 + (b_off ^ (kd << 5)));
                mma_op<QT>::run(s[2 * np], qa, b[0], b[1]);
                mma_op<QT>::run(s[2 * np + 1], qa, b[2], b[3]);
            }
        }

        /* Mask only a tile that crosses some row's range (CTA-uniform test). */
        if (kb < full_lo || kb + C::BK > full_hi) {
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = kb + n * 8 + 2 * t4 + (e & 1), i = e >> 1;
                    if (j < r_lo[i] || j >= r_hi[i]) s[n][e] = -INFINITY;
                }
        }

        /* Online softmax, base 2: m in logit2 units, p = exp2(s * sl2 - m). */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = s[0][2 * i];
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mn = fmaxf(m[i], mx * sl2);
            const float mu = mn == -INFINITY ? 0.f : mn;
            const float alpha = exp2f(m[i] - mu);
            m[i] = mn;
            l[i] *= alpha;
#pragma unroll
            for (int d = 0; d < D / 8; d++) {
                o[d][2 * i] *= alpha;
                o[d][2 * i + 1] *= alpha;
            }
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++) {
                s[n][2 * i] = exp2f(fmaf(s[n][2 * i], sl2, -mu));
                s[n][2 * i + 1] = exp2f(fmaf(s[n][2 * i + 1], sl2, -mu));
                l[i] += s[n][2 * i] + s[n][2 * i + 1];
            }
        }

        /* O += P V: the S accumulators are the A fragments. */
#pragma unroll
        for (int kk = 0; kk < C::BK / 16; kk++) {
            uint32_t a[4];
            a[0] = pack2<QT>(s[2 * kk][0], s[2 * kk][1]);
            a[1] = pack2<QT>(s[2 * kk][2], s[2 * kk][3]);
            a[2] = pack2<QT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = pack2<QT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, vt + kk * 16 * C::CH * 16 + (a_off ^ (dp << 5)));
                mma_op<QT>::run(o[2 * dp], a, b[0], b[1]);
                mma_op<QT>::run(o[2 * dp + 1], a, b[2], b[3]);
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rho = row0 + warp * 16 + g8 + i * 8;
        if (rho >= nrows) continue;
        const int tok = tok0 + rho / G, h = hk * G + rho % G;
        const float M = m[i], L = l[i];
        if (!p.partial) {
            const bool has_sink = p.var.sinks != nullptr;
            const float sink2 = has_sink ? p.var.sinks[h] * FI_LOG2E : -INFINITY;
            float Mx = has_sink ? fmaxf(M, sink2) : M, f = 0.f, lse2 = -INFINITY;
            if (Mx != -INFINITY) {
                const float a = M == -INFINITY ? 0.f : exp2f(M - Mx);
                const float den = L * a + (has_sink ? exp2f(sink2 - Mx) : 0.f);
                f = den > 0.f ? a / den : 0.f;
                lse2 = Mx + log2f(den);
            }
            f *= p.var.v_scale;
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t +
                       (int64_t)h * p.o.out_stride_h;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<uint32_t *>(orow + d * 8 + 2 * t4) =
                    pack2<QT>(o[d][i * 2] * f, o[d][i * 2 + 1] * f);
            if (t4 == 0 && p.o.lse) p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + blockIdx.z) * p.num_tokens + tok;
            const float f = L > 0.f ? p.var.v_scale / L : 0.f;
            float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * D;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<float2 *>(prow + d * 8 + 2 * t4) =
                    make_float2(o[d][i * 2] * f, o[d][i * 2 + 1] * f);
            if (t4 == 0)
                p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
}

/* Which kernel a call takes: the fast one for a 16-bit cache of the query's
 * type and logits without soft-cap or ALiBi. */
__host__ __forceinline__ bool prefill_fast_ok(int q_dtype, int kv_dtype, const variant &v)
{
    return kv_dtype == q_dtype && v.softcap <= 0.f && !v.alibi;
}

template <int D>
cudaError_t prefill_launch_hd(int q_dtype, int kv_dtype, const attn_params &p, int grid_tiles,
                              cudaStream_t st)
{
    FI_DISPATCH_QTYPE(q_dtype, QT, {
        constexpr int MB_HI = fast_cfg<D>::QREG ? 3 : 2;
        auto fast = prefill_fast_minb(D) >= 3 ? prefill_fast_kernel<QT, D, MB_HI>
                                              : prefill_fast_kernel<QT, D, 2>;
        /* grid_tiles 0: prepare only (raise the shared-memory limits of every
         * kernel), done once at state creation, never inside a capture. */
        if (grid_tiles <= 0) {
            for (auto k : {prefill_fast_kernel<QT, D, MB_HI>, prefill_fast_kernel<QT, D, 2>}) {
                cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     (int)fast_cfg<D>::SMEM);
                if (e != cudaSuccess) return e;
            }
            return prefill_general_launch<D>(q_dtype, kv_dtype, p, grid_tiles, st);
        }
        if (!prefill_fast_ok(q_dtype, kv_dtype, p.var))
            return prefill_general_launch<D>(q_dtype, kv_dtype, p, grid_tiles, st);
        dim3 grid(grid_tiles * p.num_kv_heads, 1, p.kv_splits > 1 ? p.kv_splits : 1);
        fast<<<grid, fast_cfg<D>::THREADS, fast_cfg<D>::SMEM, st>>>(p);
        return cudaPeekAtLastError();
    })
    return cudaSuccess;
}

} // namespace fi

#endif
