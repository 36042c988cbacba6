/*
 * Tensor-core kernel for prefill, extend and mixed batches (FA2 style): one
 * CTA of 4 warps per (64-row query tile, KV head). Rows pack the GQA group:
 * row = token * group + head-in-group, so a tile's queries share one stream
 * of K/V tiles. Each warp owns 16 rows; S = Q K^T and O += P V run on
 * mma.sync m16n8k16 with fp32 accumulation, operands fetched by ldmatrix
 * from padded shared memory (row pitch D + 8 elements: conflict-free), K/V
 * tiles gathered page by page with cp.async into a double buffer so the next
 * tile's loads overlap this tile's math. FP8 caches are converted to the
 * query type while staging (synchronous loads; a correctness path).
 *
 * Work list: plan builds (request, first row) per tile on the device; the
 * grid is sized for the most tiles any batch within the limits can need and
 * surplus CTAs exit, so a captured graph replays for any lengths.
 * shared_prefix mode (cascade): rows are every token of the batch and keys
 * are request 0's first prefix_len positions, computed once for all.
 */
#ifndef FI_PREFILL_KERNEL_CUH
#define FI_PREFILL_KERNEL_CUH

#include "fi_common.cuh"
#include "fi_dispatch.cuh"
#include "mma_frag.cuh"
#include "prefill_rows.cuh"

namespace fi {

template <int D> struct prefill_cfg {
    static constexpr int BQ = 64, THREADS = 128;
    static constexpr int BK = D <= 128 ? 64 : 32;
    static constexpr int LD = D + 8; /* padded pitch, elements */
    static constexpr int CH = D / 8; /* 16-byte chunks per row */
    static constexpr size_t SMEM = (size_t)(BQ + 4 * BK) * LD * 2;
    static constexpr int SUB = FI_TILE_ROWS / BQ; /* CTAs per plan tile */
};

/* Stage BK key rows [kb, kb+BK) of one cache tensor into dst (pitch LD);
 * rows at or past kend become zeros so masked probabilities never meet
 * garbage. */
template <typename QT, typename KT, int D>
__device__ __forceinline__ void stage_rows(QT *dst, const KT *cache, const kv_geom &g,
                                           const int32_t *pages, int kb, int kend, int hk)
{
    using C = prefill_cfg<D>;
    for (int idx = threadIdx.x; idx < C::BK * C::CH; idx += C::THREADS) {
        const int kk = idx / C::CH, ch = idx % C::CH, j = kb + kk;
        QT *d = dst + kk * C::LD + ch * 8;
        if constexpr (elem<KT>::fp8) {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (j < kend) {
                uint2 raw = __ldg(
                    reinterpret_cast<const uint2 *>(cache + kv_row(g, pages, j, hk) + ch * 8));
                v = fp8x8_to<KT, QT>(raw);
            }
            *reinterpret_cast<uint4 *>(d) = v;
        } else {
            const KT *src = j < kend ? cache + kv_row(g, pages, j, hk) + ch * 8 : cache;
            cp_async16(d, src, j < kend ? 16 : 0);
        }
    }
}

template <typename QT, typename KT, int D>
__global__ void __launch_bounds__(128) prefill_kernel(const attn_params p)
{
    using C = prefill_cfg<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    QT *Qs = reinterpret_cast<QT *>(smem_raw);
    QT *Ks = Qs + C::BQ * C::LD;     /* [2][BK][LD] */
    QT *Vs = Ks + 2 * C::BK * C::LD; /* [2][BK][LD] */
    __shared__ int s_lo, s_hi;

    const int hk = blockIdx.y, G = p.group;
    cta_rows cr;
    if (!cta_rows_find<C::BQ, C::SUB, false>(p, &cr)) return;
    /* FP8 scale tensors: KV head hk's key scale in the score scale, its
     * value scale in the output normalisation (16-bit caches read the
     * variant's where they use them, as they always did). */
    const kv_dequant dq = tensor_scales<KT>(p.var, hk);
    auto qk_scale = [&] { return elem<KT>::fp8 ? p.var.qk_scale * dq.k : p.var.qk_scale; };
    auto v_scale = [&] { return elem<KT>::fp8 ? p.var.v_scale * dq.v : p.var.v_scale; };
    const int row0 = cr.row0, nrows = cr.nrows, tok0 = cr.tok0;
    const int32_t *pages = cr.pages;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g8 = lane / 4, t4 = lane % 4;

    /* This thread's two rows (g8 and g8+8 of its warp's 16). */
    int r_tok[2], r_head[2], r_pos[2], r_lo[2], r_hi[2];
    bool r_ok[2];
    float r_slope[2];
    if (threadIdx.x == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rho = row0 + warp * 16 + g8 + i * 8;
        r_ok[i] = rho < nrows;
        r_tok[i] = tok0 + (r_ok[i] ? rho / G : 0);
        r_head[i] = hk * G + rho % G;
        r_pos[i] = r_ok[i] ? p.plan.token_pos[r_tok[i]] : 0;
        r_slope[i] = p.var.alibi && r_ok[i] ? p.var.slopes[r_head[i]] : 0.f;
        if (r_ok[i]) {
            row_keys(p, cr, r_pos[i], &r_lo[i], &r_hi[i]);
        } else {
            r_lo[i] = 0;
            r_hi[i] = 0;
        }
        if (r_ok[i] && r_hi[i] > r_lo[i]) {
            atomicMin(&s_lo, r_lo[i]);
            atomicMax(&s_hi, r_hi[i]);
        }
    }

    /* Q tile. */
    const QT *qg = static_cast<const QT *>(p.q);
    for (int idx = threadIdx.x; idx < C::BQ * C::CH; idx += C::THREADS) {
        const int rr = idx / C::CH, ch = idx % C::CH, rho = row0 + rr;
        const bool ok = rho < nrows;
        const QT *src = ok ? qg + (int64_t)(tok0 + rho / G) * p.q_stride_t +
                                 (int64_t)(hk * G + rho % G) * p.q_stride_h + ch * 8
                           : qg;
        cp_async16(Qs + rr * C::LD + ch * 8, src, ok ? 16 : 0);
    }
    __syncthreads();
    const int kv_lo = s_lo, kv_hi = s_hi;
    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + C::BK - 1) / C::BK : 0;

    const KT *kc = static_cast<const KT *>(p.k_cache);
    const KT *vc = static_cast<const KT *>(p.v_cache);
    if (ntiles > 0) {
        stage_rows<QT, KT, D>(Ks, kc, p.kg, pages, kv_lo, kv_hi, hk);
        stage_rows<QT, KT, D>(Vs, vc, p.vg, pages, kv_lo, kv_hi, hk);
    }
    cp_async_commit();

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    for (int it = 0; it < ntiles; it++) {
        const int kb = kv_lo + it * C::BK;
        if (it + 1 < ntiles) {
            const int nb = (it + 1) & 1;
            stage_rows<QT, KT, D>(Ks + nb * C::BK * C::LD, kc, p.kg, pages, kb + C::BK, kv_hi, hk);
            stage_rows<QT, KT, D>(Vs + nb * C::BK * C::LD, vc, p.vg, pages, kb + C::BK, kv_hi, hk);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const QT *Kt = Ks + (it & 1) * C::BK * C::LD;
        const QT *Vt = Vs + (it & 1) * C::BK * C::LD;

        /* S = Q K^T for this warp's 16 rows and BK keys. */
        float s[C::BK / 8][4];
#pragma unroll
        for (int n = 0; n < C::BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            uint32_t a[4];
            ldmatrix_x4(a, Qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * C::LD + kd * 16 +
                               8 * (lane / 16));
#pragma unroll
            for (int np = 0; np < C::BK / 16; np++) {
                uint32_t b[4];
                ldmatrix_x4(b, Kt + (np * 16 + (lane % 8) + 8 * (lane / 16)) * C::LD + kd * 16 +
                                   8 * ((lane / 8) % 2));
                mma_op<QT>::run(s[2 * np], a, b[0], b[1]);
                mma_op<QT>::run(s[2 * np + 1], a, b[2], b[3]);
            }
        }

        /* Variant hooks, mask, online softmax. */
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = m[i];
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = kb + n * 8 + 2 * t4 + e;
                    float &v = s[n][i * 2 + e];
                    v = (j >= r_lo[i] && j < r_hi[i])
                            ? logit2_at(p.var, qk_scale(), v, r_slope[i], j, r_pos[i])
                            : -INFINITY;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mu = mx == -INFINITY ? 0.f : mx;
            const float alpha = exp2f(m[i] - mu);
            m[i] = mx;
            l[i] *= alpha;
#pragma unroll
            for (int d = 0; d < D / 8; d++) {
                o[d][i * 2] *= alpha;
                o[d][i * 2 + 1] *= alpha;
            }
#pragma unroll
            for (int n = 0; n < C::BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &v = s[n][i * 2 + e];
                    v = exp2f(v - mu);
                    l[i] += v;
                }
        }

        /* O += P V: P's accumulator layout is the A operand layout. */
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
                ldmatrix_x4_trans(b, Vt + (kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * C::LD +
                                         dp * 16 + 8 * (lane / 16));
                mma_op<QT>::run(o[2 * dp], a, b[0], b[1]);
                mma_op<QT>::run(o[2 * dp + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();
    }

    /* Row sums live spread over the quad. */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }

#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!r_ok[i]) continue;
        const int tok = r_tok[i], h = r_head[i];
        const float M = m[i], L = l[i];
        if (!p.partial) {
            float f, lse2;
            finish_state(p.var, h, L, M, &f, &lse2);
            f *= v_scale();
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t +
                       (int64_t)h * p.o.out_stride_h;
#pragma unroll
            for (int d = 0; d < D / 8; d++)
                *reinterpret_cast<uint32_t *>(orow + d * 8 + 2 * t4) =
                    pack2<QT>(o[d][i * 2] * f, o[d][i * 2 + 1] * f);
            if (t4 == 0 && p.o.lse) p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + blockIdx.z) * p.num_tokens + tok;
            const float f = L > 0.f ? v_scale() / L : 0.f;
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

/* The general kernel's launcher; prefill_fast.cuh's prefill_launch_hd picks
 * between the two. */
template <int D>
cudaError_t prefill_general_launch(int q_dtype, int kv_dtype, const attn_params &p, int grid_tiles,
                                   cudaStream_t st)
{
    using C = prefill_cfg<D>;
    FI_DISPATCH_QTYPE(q_dtype, QT, {FI_DISPATCH_KVTYPE(kv_dtype, QT, KT, {
                          auto kern = prefill_kernel<QT, KT, D>;
                          /* grid_tiles 0: prepare only (raise the shared-memory limit), done
                           * once at state creation, never inside a graph capture. */
                          if (grid_tiles <= 0)
                              return cudaFuncSetAttribute(
                                  kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM);
                          dim3 grid(grid_tiles * C::SUB, p.num_kv_heads,
                                    p.kv_splits > 1 ? p.kv_splits : 1);
                          kern<<<grid, C::THREADS, C::SMEM, st>>>(p);
                          return cudaPeekAtLastError();
                      })})
    return cudaSuccess;
}

} // namespace fi

#endif
