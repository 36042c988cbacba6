/*
 * Hopper (sm_90a) tensor-core kernel for prefill, extend and mixed batches at
 * head size 128, on the fast path's terms (16-bit cache of the query's type,
 * no soft-cap, no ALiBi; masks, window, sinks, LSE, partial states, split
 * keys and the cascade prefix pass all handled). Compiled only for sm_90a
 * (its own object library); launched on compute capability 9.0 unless
 * AH_FI_PREFILL_SM90=0, else prefill_fast.cuh's mma.sync kernel runs.
 *
 * One CTA of two warpgroups per (128 packed rows = one plan tile, KV head,
 * key range): each warpgroup owns 64 rows. Why it beats the mma.sync kernel:
 *   - wgmma m64n128k16 reads Q and K straight from shared memory through
 *     descriptors (no ldmatrix, no fragment registers), at twice the
 *     tensor-core rate mma.sync reaches on this chip;
 *   - P stays in registers as the A operand of P.V (the accumulator layout is
 *     the register-A layout) and V is read MN-major by the descriptor;
 *   - within a warpgroup, S(j) = Q K(j)^T and O += P(j-1) V(j-1) are issued
 *     together and the softmax of S(j) runs while P.V is still in the tensor
 *     cores; O is rescaled only after that group retires;
 *   - tiles of 128 keys in a 2-deep cp.async ring (V(j) and K(j+1) are copied
 *     during tile j's work), 128-byte swizzle (the layout wgmma reads), the
 *     next tile's page numbers fetched a tile ahead.
 * Shared memory: Q 32 KiB + 2 x (K 32 KiB + V 32 KiB) = 160 KiB, one CTA per
 * SM; up to 255 registers per thread without spills.
 */
#include <limits.h>
#include <stdlib.h>

#include "fi_common.cuh"
#include "wgmma_sm90.cuh"

namespace fi {

namespace sm90 {
constexpr int D = 128, BQ = 128, BK = 128, THREADS = 256;
constexpr uint32_t QHALF = BQ * 128, KVHALF = BK * 128; /* bytes of one 64-channel half */
constexpr uint32_t QB = 2 * QHALF, KVB = 2 * KVHALF;
constexpr uint32_t K0 = QB, V0 = QB + KVB, STAGE = 2 * KVB; /* stage s: K at K0 + s * STAGE */
/* NST K/V stages in the cp.async ring: tile it's copies start NST - 1 tiles
 * ahead of their use. 2 measured 1-4% faster than 3 on the H100 (3 fills the
 * 227 KiB limit). + slack to align the base to 1024 B. */
constexpr int NST = 2;
constexpr size_t SMEM = QB + NST * STAGE + 1024;
static_assert(BQ == FI_TILE_ROWS, "one CTA per plan tile");
} // namespace sm90

/* Byte offset of (row, 16-byte chunk c of 16) in a tile of `rows` rows stored
 * as two 64-channel halves of 128-byte rows, chunk ^ row % 8 in each (the
 * 128-byte swizzle wgmma expects, atoms of 8 rows x 128 B 1024-B aligned). */
__device__ __forceinline__ uint32_t sw128(uint32_t rows, int r, int c)
{
    return (uint32_t)(c >> 3) * rows * 128u + (uint32_t)r * 128u + (uint32_t)(((c & 7) ^ (r & 7)) << 4);
}

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename QT>
__global__ void __launch_bounds__(256, 1) prefill_sm90_kernel(const attn_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace sm90;
    using MMA = wgmma_n128<QT>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t sbase = (smem_addr(smem_raw) + 1023u) & ~1023u;
    __shared__ int s_lo, s_hi, s_maxlo, s_minhi;
    __shared__ int2 s_rng[BQ]; /* each row's visible keys, read by masked tiles only */

    /* Grid x = (plan tile, KV head), head fastest, tiles last first (the
     * longest causal CTAs start first). */
    const int hk = (int)blockIdx.x % p.num_kv_heads, xi = (int)blockIdx.x / p.num_kv_heads;
    const int G = p.group;
    int req, row0, nrows, tok0, seq_len;
    if (p.shared_prefix) {
        req = 0;
        row0 = xi * BQ;
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

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    const int g8 = lane / 4, t4 = lane % 4;
    /* This thread's two rows (g8 and g8 + 8 of its warp's 16 within its
     * warpgroup's 64), as CTA-local indices. */
    const int lrow0 = wg * 64 + (warp % 4) * 16 + g8;

    if (tid == 0) {
        s_lo = INT_MAX;
        s_hi = INT_MIN;
        s_maxlo = INT_MIN;
        s_minhi = INT_MAX;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int rho = row0 + lrow0 + i * 8;
        int lo = 0, hi = 0;
        if (rho < nrows) {
            visible_range(p.var, p.plan.token_pos[tok0 + rho / G], seq_len, kv_begin, &lo, &hi);
            if (p.kv_chunk > 0) { /* split keys: this CTA's range only */
                const int zl = (int)blockIdx.z * p.kv_chunk;
                lo = max(lo, zl);
                hi = min(hi, zl + p.kv_chunk);
            }
            atomicMax(&s_maxlo, lo);
            atomicMin(&s_minhi, hi);
            if (hi > lo) {
                atomicMin(&s_lo, lo);
                atomicMax(&s_hi, hi);
            }
        }
        if (t4 == 0) s_rng[lrow0 + i * 8] = make_int2(lo, hi);
    }

    /* Copies: two threads per row, thread chunks 2i + lh (a pair reads 32
     * contiguous bytes per copy), 8 chunks each per 128-row tile. */
    const int lr = tid >> 1, lh = tid & 1;
    const uint32_t ld_off = (uint32_t)lr * 128u + (uint32_t)((lh ^ (lr & 7)) << 4);
    {
        const QT *qg = static_cast<const QT *>(p.q);
        const int rho = row0 + lr;
        const bool ok = rho < nrows;
        const QT *src = ok ? qg + (int64_t)(tok0 + rho / G) * p.q_stride_t + (int64_t)(hk * G + rho % G) * p.q_stride_h + lh * 8
                           : qg;
#pragma unroll
        for (int i = 0; i < 8; i++)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                             sbase + (ld_off ^ (uint32_t)((i & 3) << 5)) + (uint32_t)(i >> 2) * QHALF),
                         "l"(src + (ok ? i * 16 : 0)), "r"(ok ? 16 : 0));
    }
    __syncthreads(); /* the range atomics are visible */
    const int kv_lo = s_lo, kv_hi = s_hi;
    const int ntiles = kv_hi > kv_lo ? (kv_hi - kv_lo + BK - 1) / BK : 0;

    const QT *kc = static_cast<const QT *>(p.k_cache);
    const QT *vc = static_cast<const QT *>(p.v_cache);
    const int shift = p.kg.page_shift, pmask = (1 << shift) - 1;
    int pgn = 0, pgn_v = 0; /* page of this thread's row in the next K tile / the V tile */
    auto fetch_page = [&](int it) {
        const int j = kv_lo + it * BK + lr;
        return j < kv_hi ? __ldg(pages + (j >> shift)) : 0;
    };
    /* One tensor (K or V) of tile it into stage it % 2. */
    auto issue = [&](const QT *cache, const kv_geom &g, uint32_t region, int it, int pg) {
        const uint32_t st = sbase + region + (uint32_t)(it % NST) * STAGE;
        const int j = kv_lo + it * BK + lr;
        const bool ok = j < kv_hi;
        const QT *src = ok ? cache + ((int64_t)hk * g.stride_head + (int64_t)pg * g.stride_page +
                                      (int64_t)(j & pmask) * g.stride_slot + lh * 8)
                           : cache;
#pragma unroll
        for (int i = 0; i < 8; i++)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                             st + (ld_off ^ (uint32_t)((i & 3) << 5)) + (uint32_t)(i >> 2) * KVHALF),
                         "l"(src + (ok ? i * 16 : 0)), "r"(ok ? 16 : 0));
    };
    /* Copy groups: {Q, K(0)}, then {V(j), K(j+1)} for j = 0, 1, ...; group
     * j + 1 is started at the top of tile j + 1 - (NST - 1), into the stages
     * that V(j - NST + 1) and K(j + 1 - NST) left. */
    auto issue_pair = [&](int j) {
        if (j < ntiles) {
            issue(vc, p.vg, V0, j, pgn_v);
            if (j + 1 < ntiles) {
                issue(kc, p.kg, K0, j + 1, pgn);
                pgn_v = pgn;
                if (j + 2 < ntiles) pgn = fetch_page(j + 2);
            }
        }
        cp_async_commit();
    };
    if (ntiles > 0) {
        pgn = fetch_page(0);
        issue(kc, p.kg, K0, 0, pgn);
        pgn_v = pgn;
        if (ntiles > 1) pgn = fetch_page(1);
    }
    cp_async_commit();
    if (NST > 2) issue_pair(0);

    float o[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    uint32_t pa[8][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl2 = p.var.qk_scale * FI_LOG2E; /* raw dot -> base-2 logit */
    const uint32_t qw = sbase + (uint32_t)wg * 64u * 128u; /* this warpgroup's Q rows */

    /* Waits for this thread's copies of K(it) and V(it-1) (NST - 2 newer
     * groups may stay in flight), makes them visible to the tensor cores
     * (async proxy), joins the CTA (every warpgroup is done with tile it-1,
     * so its stages are free), then starts group it + NST - 2. */
    auto next_tile = [&](int it) {
        if (NST > 2 && it < ntiles) cp_async_wait<NST - 2>();
        else cp_async_wait<0>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        issue_pair(it + NST - 2);
    };
    auto qk = [&](int it) { /* S = Q K(it)^T, raw dot products */
        const uint32_t kt = sbase + K0 + (uint32_t)(it % NST) * STAGE;
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++)
            MMA::ss(s, wgmma_desc(qw + (uint32_t)(kd >> 2) * QHALF + (uint32_t)(kd & 3) * 32u, 16, 1024),
                    wgmma_desc(kt + (uint32_t)(kd >> 2) * KVHALF + (uint32_t)(kd & 3) * 32u, 16, 1024),
                    kd > 0);
        wgmma_commit();
    };
    auto pv = [&](int it) { /* O += P(it) V(it) */
        const uint32_t vt = sbase + V0 + (uint32_t)(it % NST) * STAGE;
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) MMA::rs(o, pa[kk], wgmma_desc(vt + (uint32_t)kk * 2048u, KVHALF, 1024));
        wgmma_commit();
    };
    /* Masks S where needed, turns it into P (in place) and updates m and l;
     * returns the rescale factors of O's two rows. */
    auto softmax = [&](int it, float *alpha) {
        const int kb = kv_lo + it * BK;
        if (kb < s_maxlo || kb + BK > s_minhi) { /* a tile crossing some row's range (CTA-uniform) */
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
            for (int n = 0; n < BK / 8; n++) mx = fmaxf(mx, fmaxf(s[4 * n + 2 * i], s[4 * n + 2 * i + 1]));
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
    auto pack_p = [&]() {
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            pa[kk][0] = pack2<QT>(s[8 * kk], s[8 * kk + 1]);
            pa[kk][1] = pack2<QT>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2<QT>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2<QT>(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };

    if (ntiles > 0) {
        float alpha[2];
        next_tile(0);
        wgmma_fence();
        qk(0);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 64; i++) reg_fence(s[i]);
        softmax(0, alpha); /* O is still zero: no rescale */
        pack_p();
        /* Tile it: S(it) and P(it-1) V(it-1) issued together; the softmax of
         * S(it) runs while the P.V group is still in the tensor cores. */
        for (int it = 1; it < ntiles; it++) {
            next_tile(it);
            wgmma_fence();
            qk(it);
            pv(it - 1);
            wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < 64; i++) reg_fence(s[i]);
            softmax(it, alpha);
            wgmma_wait<0>(); /* P(it-1) and O are free once the P.V group retires */
#pragma unroll
            for (int i = 0; i < 64; i++) reg_fence(o[i]), reg_fence(s[i]);
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                o[4 * n] *= alpha[0];
                o[4 * n + 1] *= alpha[0];
                o[4 * n + 2] *= alpha[1];
                o[4 * n + 3] *= alpha[1];
            }
            pack_p();
        }
        next_tile(ntiles); /* V(ntiles-1) landed */
        wgmma_fence();
        pv(ntiles - 1);
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
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t + (int64_t)h * p.o.out_stride_h;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<uint32_t *>(orow + n * 8 + 2 * t4) =
                    pack2<QT>(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
            if (t4 == 0 && p.o.lse) p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + blockIdx.z) * p.num_tokens + tok;
            const float f = L > 0.f ? p.var.v_scale / L : 0.f;
            float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * D;
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                *reinterpret_cast<float2 *>(prow + n * 8 + 2 * t4) =
                    make_float2(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
            if (t4 == 0) p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
#endif
}

cudaError_t launch_prefill_sm90_ws(int stages, int q_dtype, const attn_params &p, int grid_tiles, cudaStream_t st);

/* grid_tiles 0: raise the kernels' shared-memory limit (state creation).
 * AH_FI_SM90_WS = 2 or 3 runs the warp-specialized kernel
 * (prefill_sm90_ws.cu) with that many K/V stages. */
cudaError_t launch_prefill_sm90(int q_dtype, const attn_params &p, int grid_tiles, cudaStream_t st)
{
    static int ws = -1;
    if (ws < 0) {
        const char *e = getenv("AH_FI_SM90_WS");
        ws = e && (atoi(e) == 2 || atoi(e) == 3) ? atoi(e) : 0;
    }
    if (ws) return launch_prefill_sm90_ws(ws, q_dtype, p, grid_tiles, st);
    if (grid_tiles <= 0) {
        cudaError_t e = cudaFuncSetAttribute(prefill_sm90_kernel<__nv_bfloat16>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm90::SMEM);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(prefill_sm90_kernel<half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)sm90::SMEM);
        return e;
    }
    const dim3 grid(grid_tiles * p.num_kv_heads, 1, p.kv_splits > 1 ? p.kv_splits : 1);
    if (q_dtype == FI_BF16)
        prefill_sm90_kernel<__nv_bfloat16><<<grid, sm90::THREADS, sm90::SMEM, st>>>(p);
    else
        prefill_sm90_kernel<half><<<grid, sm90::THREADS, sm90::SMEM, st>>>(p);
    return cudaPeekAtLastError();
}

} // namespace fi
