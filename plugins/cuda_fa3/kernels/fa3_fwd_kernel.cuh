// The cuda_fa3 forward kernel: FlashAttention-3's structure for Hopper.
//
// One persistent CTA per SM walks a list of work items (query tile x KV head
// x KV split) that plan() wrote to device memory. The CTA has three
// warpgroups:
//   - warpgroup 0, the producer: one warp issues TMA copies (Q once per item,
//     then K and V tile by tile) into a STAGES-deep shared-memory ring, each
//     completing on a "full" mbarrier; it gives its registers away.
//   - warpgroups 1 and 2, the consumers: 64 query rows each. S = Q K^T runs
//     as wgmma from shared memory, the online softmax runs on the register
//     accumulators, and O += P V runs as wgmma with P taken from registers.
// Overlap, as in the FA3 paper: inside a warpgroup the QK^T of tile j+1 and
// the PV of tile j are in flight while the softmax of tile j+1 runs; between
// the two warpgroups named barriers ping-pong the GEMM issue, so one
// warpgroup's softmax hides behind the other's GEMMs. KV tiles are walked
// from the last to the first, so the tiles that need masking (the causal
// diagonal, the sequence end) come first; tiles wholly outside the causal or
// window range are never visited (plan() trims each item's key range).
//
// KV is always read through the page table: a TMA box covers box_rows
// tokens of one page, and contiguous KV is a table of consecutive blocks.
// Boxes wholly outside the item's key range are aimed past the cache, so the
// copy engine zero-fills them without reading memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "fa3_params.h"
#include "fa3_sm90.cuh"
#include "fa3_wgmma.cuh"

namespace fa3 {

template <typename T> struct elem;
template <> struct elem<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct elem<__half> {
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

// wgmma dispatch on element type and N.
template <typename T, int N> struct mma;
#define FA3_MMA(TY, NAME, N)                                                                    \
    template <> struct mma<TY, N> {                                                             \
        static __device__ __forceinline__ void ss(float (&d)[N / 2], uint64_t a, uint64_t b, int s) \
        {                                                                                       \
            fa3_wgmma_ss_##NAME##_n##N(d, a, b, s);                                             \
        }                                                                                       \
        static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, \
                                                  int s)                                        \
        {                                                                                       \
            fa3_wgmma_rs_##NAME##_n##N(d, a, b, s);                                             \
        }                                                                                       \
    };
FA3_MMA(__nv_bfloat16, bf16, 64)
FA3_MMA(__nv_bfloat16, bf16, 128)
FA3_MMA(__nv_bfloat16, bf16, 256)
FA3_MMA(__half, f16, 64)
FA3_MMA(__half, f16, 128)
FA3_MMA(__half, f16, 256)
#undef FA3_MMA

template <int D, int BN, int STAGES, typename T> struct fwd_smem {
    // 128-byte-swizzled tiles: [64-column chunk][row][64 elements].
    alignas(1024) T q[D / 64][FA3_BLOCK_M][64];
    alignas(1024) T k[STAGES][D / 64][BN][64];
    alignas(1024) T v[STAGES][D / 64][BN][64];
    uint64_t q_full, q_empty;
    uint64_t k_full[STAGES], k_empty[STAGES], v_full[STAGES], v_empty[STAGES];
};

constexpr int kConsumerWarps = 8; // arrivals that free a stage or Q
constexpr int kBarPingPong = 1;   // named barriers 1 and 2

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}
__device__ __forceinline__ float tanh_fast(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---- producer ------------------------------------------------------------------

template <int D, int BN, int STAGES, typename T>
__device__ __forceinline__ void load_kv_tile(fwd_smem<D, BN, STAGES, T> &s, const CUtensorMap *map,
                                             T (*dst)[BN][64], uint64_t *full, const fa3_params &p,
                                             const fa3_work &it, int n, int lane)
{
    constexpr int CH = D / 64;
    const int R = p.box_rows;
    const int nbox = (BN / R) * CH;
    if (lane == 0) mbar_arrive_tx(full, BN * D * (int)sizeof(T));
    __syncwarp();
    const int32_t *table = p.block_table + (size_t)it.req * p.bt_stride;
    for (int i = lane; i < nbox; i += 32) {
        const int rb = i / CH, c = i - rb * CH;
        const int pos = n * BN + rb * R;
        int page = p.num_blocks, off = 0; // past the cache: zero fill, no read
        if (pos < it.kv_hi && pos + R > it.kv_lo) {
            page = table[pos / p.block_size];
            off = pos % p.block_size;
        }
        if (p.kv_hnd) tma_load_4d(&dst[c][rb * R][0], map, full, c * 64, off, it.kvh, page);
        else tma_load_4d(&dst[c][rb * R][0], map, full, c * 64, it.kvh, off, page);
    }
}

// ---- consumer pieces ---------------------------------------------------------------

// S(64 x BN) = Q(rows of this warpgroup) K^T over D.
template <int D, int BN, int STAGES, typename T>
__device__ __forceinline__ void gemm_qk(fwd_smem<D, BN, STAGES, T> &s, int cw, int st, float (&sacc)[BN / 2])
{
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const int c = kk / 4, kin = kk % 4;
        uint64_t da = desc_sw128(smem_addr(&s.q[c][cw * 64][0]) + kin * 32, 16, 1024);
        uint64_t db = desc_sw128(smem_addr(&s.k[st][c][0][0]) + kin * 32, 16, 1024);
        mma<T, BN>::ss(sacc, da, db, kk > 0);
    }
}

// O(64 x D) += P(64 x BN, registers) V(BN x D).
template <int D, int BN, int STAGES, typename T>
__device__ __forceinline__ void gemm_pv(fwd_smem<D, BN, STAGES, T> &s, int st, const uint32_t (&pa)[BN / 16][4],
                                        float (&o)[D / 2])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        uint64_t db = desc_sw128(smem_addr(&s.v[st][0][kk * 16][0]), BN * 128, 1024);
        mma<T, D>::rs(o, pa[kk], db, 1);
    }
}

// Per-thread view of its two rows (row0 = lane/4, row1 = row0 + 8 within a
// warp's 16 rows).
struct row_info {
    int pos[2];   // query position of each row
    int valid[2]; // row maps to a real (token, head)
    int head[2];
    int tok[2];
};

// Scale (or soft-cap) the raw scores into the log2 domain and mask.
template <int BN>
__device__ __forceinline__ void scale_mask(float (&sacc)[BN / 2], const fa3_params &p, const fa3_work &it,
                                           const row_info &ri, int n, bool need_mask, int lane)
{
    const float log2e = 1.4426950408889634f;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        float x = sacc[i];
        if (p.softcap > 0.f) x = p.softcap * tanhf(x * p.scale / p.softcap) * log2e;
        else x *= p.scale_log2;
        sacc[i] = x;
    }
    if (!need_mask) return;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = n * BN + j * 8 + 2 * (lane & 3) + e;
                const int q = ri.pos[i];
                bool ok = key >= it.kv_lo && key < it.kv_hi;
                if (!p.cross) {
                    if (p.causal) {
                        ok = ok && key <= q;
                        if (p.window) ok = ok && key > q - p.window;
                    } else if (p.window) {
                        ok = ok && key > q - p.window && key < q + p.window;
                    }
                }
                if (!ok) sacc[j * 4 + i * 2 + e] = -INFINITY;
            }
        }
    }
}

// Online softmax: update row maxima, turn scores into probabilities, and
// return the factor by which the running O and l must be rescaled.
template <int BN>
__device__ __forceinline__ void online_softmax(float (&sacc)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2])
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = m[i];
#pragma unroll
        for (int j = 0; j < BN / 8; j++) mx = fmaxf(mx, fmaxf(sacc[j * 4 + i * 2], sacc[j * 4 + i * 2 + 1]));
        mx = quad_max(mx);
        const float mu = mx == -INFINITY ? 0.f : mx;
        alpha[i] = exp2f(m[i] - mu);
        m[i] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float pv = exp2f(sacc[j * 4 + i * 2 + e] - mu);
                sacc[j * 4 + i * 2 + e] = pv;
                sum += pv;
            }
        }
        l[i] = l[i] * alpha[i] + sum;
    }
}

template <typename T, int BN>
__device__ __forceinline__ void to_operand(const float (&sacc)[BN / 2], uint32_t (&pa)[BN / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        pa[kk][0] = elem<T>::pack(sacc[(2 * kk) * 4 + 0], sacc[(2 * kk) * 4 + 1]);
        pa[kk][1] = elem<T>::pack(sacc[(2 * kk) * 4 + 2], sacc[(2 * kk) * 4 + 3]);
        pa[kk][2] = elem<T>::pack(sacc[(2 * kk + 1) * 4 + 0], sacc[(2 * kk + 1) * 4 + 1]);
        pa[kk][3] = elem<T>::pack(sacc[(2 * kk + 1) * 4 + 2], sacc[(2 * kk + 1) * 4 + 3]);
    }
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2])
{
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        o[j * 4 + 0] *= alpha[0];
        o[j * 4 + 1] *= alpha[0];
        o[j * 4 + 2] *= alpha[1];
        o[j * 4 + 3] *= alpha[1];
    }
}

// Does tile n hold any key that some row of the item must not see?
__device__ __forceinline__ bool tile_needs_mask(const fa3_params &p, const fa3_work &it, int n, int BN)
{
    const int a = n * BN, b = a + BN - 1;
    if (a < it.kv_lo || b >= it.kv_hi) return true;
    if (p.cross) return false;
    const int pmin = it.pos0, pmax = it.pos0 + it.q_ntok - 1;
    if (p.causal) {
        if (b > pmin) return true;
        if (p.window && a <= pmax - p.window) return true;
    } else if (p.window) {
        if (a <= pmax - p.window || b >= pmin + p.window) return true;
    }
    return false;
}

template <int D, typename T>
__device__ __forceinline__ void epilogue(const fa3_params &p, const fa3_work &it, const row_info &ri,
                                         float (&o)[D / 2], const float (&m)[2], const float (&l)[2],
                                         int row_local0, int lane)
{
    const float log2e = 1.4426950408889634f, ln2 = 0.6931471805599453f;
    const bool split = it.part_row >= 0;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float lt = quad_sum(l[i]);
        const float mu = m[i] == -INFINITY ? 0.f : m[i];
        if (!split && p.sinks && ri.valid[i]) lt += exp2f(p.sinks[ri.head[i]] * log2e - mu);
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        const float lse = lt > 0.f ? (mu + log2f(lt)) * ln2 : -INFINITY;
        const float os = inv * (split ? 1.f : p.v_scale);
        if (!ri.valid[i]) continue;
        const int rl = row_local0 + i * 8; // row within the item's valid rows
        if (split) {
            float *dst = p.part_o + (size_t)(it.part_row + rl) * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                float2 v = make_float2(o[j * 4 + i * 2] * os, o[j * 4 + i * 2 + 1] * os);
                *reinterpret_cast<float2 *>(dst + j * 8 + 2 * (lane & 3)) = v;
            }
            if ((lane & 3) == 0) p.part_lse[it.part_row + rl] = lse;
        } else {
            T *dst = reinterpret_cast<T *>(p.out) + (size_t)ri.tok[i] * p.out_tok_stride +
                     (size_t)ri.head[i] * p.out_head_stride;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                uint32_t v = elem<T>::pack(o[j * 4 + i * 2] * os, o[j * 4 + i * 2 + 1] * os);
                *reinterpret_cast<uint32_t *>(dst + j * 8 + 2 * (lane & 3)) = v;
            }
            if (p.lse && (lane & 3) == 0) p.lse[(size_t)ri.tok[i] * p.num_q_heads + ri.head[i]] = lse;
        }
    }
}

template <int D, int BN, int STAGES, typename T>
__global__ void __launch_bounds__(384, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv, const fa3_params p)
{
    extern __shared__ uint8_t smem_raw[];
    using Smem = fwd_smem<D, BN, STAGES, T>;
    Smem &s = *reinterpret_cast<Smem *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;

    if (tid == 0) {
        mbar_init(&s.q_full, 1);
        mbar_init(&s.q_empty, kConsumerWarps);
        for (int i = 0; i < STAGES; i++) {
            mbar_init(&s.k_full[i], 1);
            mbar_init(&s.v_full[i], 1);
            mbar_init(&s.k_empty[i], kConsumerWarps);
            mbar_init(&s.v_empty[i], kConsumerWarps);
        }
        mbar_fence_init();
    }
    __syncthreads();
    const int n_work = p.counts->n_work;

    if (wg == 0) {
        regs_dealloc<40>();
        if (tid >= 32) return;
        if (lane == 0) {
            tma_prefetch_desc(&tq);
            tma_prefetch_desc(&tk);
            tma_prefetch_desc(&tv);
        }
        int pi = 0, iter = 0;
        for (int w = blockIdx.x; w < n_work; w += gridDim.x, iter++) {
            const fa3_work it = p.work[w];
            if (iter > 0) mbar_wait(&s.q_empty, (iter - 1) & 1);
            if (lane == 0) mbar_arrive_tx(&s.q_full, 64 * p.group * p.tpt * (D / 64) * (int)sizeof(T));
            __syncwarp();
            if (lane < D / 64) tma_load_3d(&s.q[lane][0][0], &tq, &s.q_full, lane * 64, it.kvh * p.group, it.q_tok0);
            const int n_lo = it.kv_lo / BN, n_hi = (it.kv_hi + BN - 1) / BN;
            for (int n = n_hi - 1; n >= n_lo; n--, pi++) {
                const int st = pi % STAGES;
                const uint32_t ph = (pi / STAGES) & 1;
                mbar_wait(&s.k_empty[st], ph ^ 1);
                load_kv_tile<D, BN, STAGES, T>(s, &tk, s.k[st], &s.k_full[st], p, it, n, lane);
                mbar_wait(&s.v_empty[st], ph ^ 1);
                load_kv_tile<D, BN, STAGES, T>(s, &tv, s.v[st], &s.v_full[st], p, it, n, lane);
            }
        }
        return;
    }

    regs_alloc<232>();
    const int cw = wg - 1, warp = (tid % 128) / 32;
    const int bar_self = kBarPingPong + cw, bar_other = kBarPingPong + (1 - cw);
    if (cw == 1) named_arrive(kBarPingPong, 256); // warpgroup 0 issues first
    int pi = 0, iter = 0;
    for (int w = blockIdx.x; w < n_work; w += gridDim.x, iter++) {
        const fa3_work it = p.work[w];
        // Rows this thread owns, in the item's (token, head-in-group) order.
        row_info ri;
        const int rl0 = cw * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = rl0 + i * 8, t = r / p.group, g = r - t * p.group;
            ri.valid[i] = t < it.q_ntok && t < p.tpt;
            ri.pos[i] = it.pos0 + t;
            ri.tok[i] = it.q_tok0 + t;
            ri.head[i] = it.kvh * p.group + g;
        }
        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
        float sacc[BN / 2];
        uint32_t pa[BN / 16][4];

        mbar_wait(&s.q_full, iter & 1);
        const int n_lo = it.kv_lo / BN, n_hi = (it.kv_hi + BN - 1) / BN;
        if (n_hi > n_lo) {
            // First tile: S only.
            int n = n_hi - 1;
            {
                const int st = pi % STAGES;
                mbar_wait(&s.k_full[st], (pi / STAGES) & 1);
                named_sync(bar_self, 256);
                wgmma_fence();
                gemm_qk<D, BN, STAGES, T>(s, cw, st, sacc);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<0>();
                reg_fence(sacc);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                scale_mask<BN>(sacc, p, it, ri, n, tile_needs_mask(p, it, n, BN), lane);
                online_softmax<BN>(sacc, m, l, alpha);
                to_operand<T, BN>(sacc, pa);
            }
            // Steady state: QK^T(n) and PV(n+1) in flight together.
            for (n = n_hi - 2; n >= n_lo; n--) {
                const int cur = pi + 1;
                const int st = cur % STAGES, pst = pi % STAGES;
                mbar_wait(&s.k_full[st], (cur / STAGES) & 1);
                mbar_wait(&s.v_full[pst], (pi / STAGES) & 1);
                named_sync(bar_self, 256);
                reg_fence(o);
                reg_fence(pa);
                wgmma_fence();
                gemm_qk<D, BN, STAGES, T>(s, cw, st, sacc);
                wgmma_commit();
                gemm_pv<D, BN, STAGES, T>(s, pst, pa, o);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<1>();
                reg_fence(sacc);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                scale_mask<BN>(sacc, p, it, ri, n, tile_needs_mask(p, it, n, BN), lane);
                online_softmax<BN>(sacc, m, l, alpha);
                wgmma_wait<0>();
                reg_fence(o);
                if (lane == 0) mbar_arrive(&s.v_empty[pst]);
                rescale<D>(o, alpha);
                to_operand<T, BN>(sacc, pa);
                pi = cur;
            }
            // Last PV.
            {
                const int pst = pi % STAGES;
                mbar_wait(&s.v_full[pst], (pi / STAGES) & 1);
                named_sync(bar_self, 256);
                reg_fence(o);
                reg_fence(pa);
                wgmma_fence();
                gemm_pv<D, BN, STAGES, T>(s, pst, pa, o);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<0>();
                reg_fence(o);
                if (lane == 0) mbar_arrive(&s.v_empty[pst]);
                pi++;
            }
        }
        if (lane == 0) mbar_arrive(&s.q_empty);
        // Row index among the item's valid rows (token-major, head in group).
        epilogue<D, T>(p, it, ri, o, m, l, rl0, lane);
    }
}

} // namespace fa3
