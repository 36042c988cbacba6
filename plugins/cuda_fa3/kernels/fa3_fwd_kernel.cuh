// The cuda_fa3 forward kernel: FlashAttention-3's structure for Hopper.
//
// One persistent CTA per SM walks a list of work items (query tile x KV head
// x KV split) that plan() wrote to device memory. The CTA has three
// warpgroups:
//   - warpgroup 0, the producer: one warp issues TMA copies (Q once per item,
//     then K and V tile by tile) into a STAGES-deep shared-memory ring, each
//     completing on a "full" mbarrier; it gives its registers away.
//   - warpgroups 1 to NWG, the consumers (two, three at head size 64; see
//     FA3_BLOCK_M): 64 query rows each. S = Q K^T runs as wgmma from shared
//     memory, the online softmax runs on the register accumulators, and
//     O += P V runs as wgmma with P taken from registers.
// Overlap, as in the FA3 paper: inside a warpgroup the QK^T of tile j+1 and
// the PV of tile j are issued together and the scores of tile j+1 are
// masked while PV runs (ptxas puts the wait for PV ahead of the
// exponentials whatever the source order); between the consumer
// warpgroups named barriers pass the GEMM issue round in a ring, so one
// warpgroup's softmax hides behind the others' GEMMs. KV tiles are walked
// from the last to the first, so the tiles that need masking (the causal
// diagonal, the sequence end) come first; tiles wholly outside the causal or
// window range are never visited (plan() trims each item's key range).
//
// KV is read through the page table: a TMA box covers box_rows tokens of
// one page, and contiguous KV is a table of consecutive blocks. Boxes
// wholly outside the item's key range are aimed past the cache, so the
// copy engine zero-fills them without reading memory. A ragged layer's
// packed K and V (MLA's non-absorbed prefill, qk 192 / v 128) are one
// page of all the step's keys, request r's from row k_start[r].
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

#include <type_traits>

#include <attnhost/cuda_wgmma.cuh>

#include "fa3_params.h"
#include "fa3_sm90.cuh"

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

// Two e4m3 bytes (low byte first) widened to two 16-bit elements of T. The
// hardware converts e4m3 pairs to fp16 exactly; every e4m3 value is also
// exact in bf16, so the bf16 path goes through float without rounding.
template <typename T> __device__ __forceinline__ uint32_t widen_e4m3x2(uint16_t b);
template <> __device__ __forceinline__ uint32_t widen_e4m3x2<__half>(uint16_t b)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)b, __NV_E4M3);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
template <> __device__ __forceinline__ uint32_t widen_e4m3x2<__nv_bfloat16>(uint16_t b)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)b, __NV_E4M3);
    __half2 hh = *reinterpret_cast<__half2 *>(&h);
    return elem<__nv_bfloat16>::pack(__low2float(hh), __high2float(hh));
}

// wgmma by element type and N.
template <typename T, int N> using mma = ah_wgmma<T, N>;

// FP8 KV: the copy engine lands e4m3 tiles, unswizzled ([row][D bytes]), in
// a staging ring of SST stages; three producer warps widen them into the
// 16-bit swizzled K/V ring the consumers read, so the GEMMs are unchanged.
template <int D, int BN, int SST> struct fp8_staging {
    alignas(1024) uint8_t k8[SST][BN][D];
    alignas(1024) uint8_t v8[SST][BN][D];
    uint64_t k8_full[SST], k8_empty[SST], v8_full[SST], v8_empty[SST];
};
template <int D, int BN> struct fp8_staging<D, BN, 0> {
};

// Consumer warps at head size D (16 rows each), the arrivals that free a
// stage or Q; with the producer warpgroup, the forward's threads.
template <int D> constexpr int consumer_warps = FA3_BLOCK_M(D) / 16;
template <int D> constexpr int fwd_threads = 128 + 32 * consumer_warps<D>;

// Output staging for the epilogue: each consumer warp's 16 rows of O, a
// row of D elements padded by 16 bytes so that the eight rows of a
// stmatrix fall in distinct banks. The warp then copies each row to global
// memory with one bulk store and goes on to its next item while the copy
// engine drains them; the next epilogue only waits until they have been
// read from shared memory (bulk_wait_read), an item later. The direct
// per-lane stores this replaces stalled the warp on the store queue.
template <int D, typename T> struct out_stage {
    static constexpr int PITCH = D * (int)sizeof(T) + 16;
    alignas(128) uint8_t rows[consumer_warps<D>][16][PITCH];
};

// A kernel's shared memory holds the output staging as member o when OS
// (a base class, empty otherwise).
template <int D, typename T, bool OS> struct with_out_stage {
};
template <int D, typename T> struct with_out_stage<D, T, true> {
    out_stage<D, T> o;
};

// D: the query and key head size; DV: the value (and output) head size.
template <int D, int BN, int STAGES, typename T, int SST = 0, bool OS = false, int DV = D>
struct fwd_smem : with_out_stage<DV, T, OS> {
    // 128-byte-swizzled tiles: [64-column chunk][row][64 elements].
    alignas(1024) T q[D / 64][FA3_BLOCK_M(D)][64];
    alignas(1024) T k[STAGES][D / 64][BN][64];
    alignas(1024) T v[STAGES][DV / 64][BN][64];
    uint64_t q_full, q_empty;
    uint64_t k_full[STAGES], k_empty[STAGES], v_full[STAGES], v_empty[STAGES];
    fp8_staging<D, BN, SST> f8;
};

constexpr int kConvertWarps = 3; // FP8 KV: producer warps 1-3 widen tiles
constexpr int kBarPingPong = 1;  // named barriers 1 to NWG

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

// An item's key tiles are [tile_lo, tile_hi): every BN-key tile its
// [kv_lo, kv_hi) touches. Every role walks them from tile_hi - 1 down.
template <int BN> __device__ __forceinline__ int tile_lo(const fa3_work &it)
{
    return it.kv_lo / BN;
}
template <int BN> __device__ __forceinline__ int tile_hi(const fa3_work &it)
{
    return (it.kv_hi + BN - 1) / BN;
}

// Tile n's page for row block `lane` (box_rows tokens; lanes past the
// tile's row blocks, and row blocks wholly outside the item's key range,
// get num_blocks: aimed past the cache, the copy engine zero-fills them
// without reading memory).
template <int BN>
__device__ __forceinline__ int kv_tile_page(const fa3_params &p, const fa3_work &it, int n,
                                            int lane)
{
    const int R = p.box_rows, pos = n * BN + lane * R;
    if (lane * R >= BN || pos >= it.kv_hi || pos + R <= it.kv_lo) return p.num_blocks;
    return p.block_table[(size_t)it.req * p.bt_stride + pos / p.block_size];
}

// Box c (64 columns) of a KV tile's row block at d: box_rows tokens from
// token `off` of page `page` (num_blocks: zero fill, no read).
__device__ __forceinline__ void load_kv_box(uint8_t *d, const CUtensorMap *map, uint64_t *full,
                                            const fa3_params &p, const fa3_work &it, int c,
                                            int page, int off)
{
    if (p.kv_hnd) tma_load_4d(d, map, full, c * 64, off, it.kvh, page);
    else tma_load_4d(d, map, full, c * 64, it.kvh, off, page);
}

// One KV tile (BN keys) as TMA boxes of box_rows tokens of one page each.
// CH boxes per row block cover D (64 columns each, 16-bit swizzled tiles,
// chunk stride CHB bytes) or one box does (FP8 staging, CH 1); ROWB is the
// bytes of one row in shared memory. AHEAD: the pages come in pg (this
// lane's kv_tile_page, read a tile ahead by produce) instead of from the
// table here. RG: ragged K/V, page 0 from the request's first key row.
template <int BN, int CH, int ROWB, int CHB, bool AHEAD = false, bool RG = false>
__device__ __forceinline__ void load_kv_tile(uint8_t *dst, const CUtensorMap *map, uint64_t *full,
                                             int tx_bytes, const fa3_params &p, const fa3_work &it,
                                             int n, int lane, int pg = 0)
{
    const int R = p.box_rows;
    const int nbox = (BN / R) * CH;
    if (lane == 0) mbar_arrive_tx(full, tx_bytes);
    __syncwarp();
    if constexpr (AHEAD) {
        static_assert(BN / 16 * CH <= 32, "a box per lane (box_rows >= 16)");
        const int rb = lane / CH, c = lane - rb * CH;
        const int page = __shfl_sync(0xffffffffu, pg, rb);
        if (lane < nbox) {
            const int off = page < p.num_blocks ? (n * BN + rb * R) % p.block_size : 0;
            load_kv_box(dst + c * CHB + rb * R * ROWB, map, full, p, it, c, page, off);
        }
        return;
    }
    const int32_t *table = RG ? nullptr : p.block_table + (size_t)it.req * p.bt_stride;
    for (int i = lane; i < nbox; i += 32) {
        const int rb = i / CH, c = i - rb * CH;
        const int pos = n * BN + rb * R;
        int page = p.num_blocks, off = 0; // past the cache: zero fill, no read
        if (pos < it.kv_hi && pos + R > it.kv_lo) {
            if constexpr (RG) {
                page = 0;
                off = p.k_start[it.req] + pos;
            } else {
                page = table[pos / p.block_size];
                off = pos % p.block_size;
            }
        }
        load_kv_box(dst + c * CHB + rb * R * ROWB, map, full, p, it, c, page, off);
    }
}

// The producer warp's Q step of one item: wait until the consumers released
// the previous item's Q (iteration iter), then TMA the item's Q tile (D/64
// swizzled 64-column boxes of group x tpt rows) onto q_full.
template <int D, typename T, typename S>
__device__ __forceinline__ void load_q_tile(S &s, const CUtensorMap *tq, const fa3_params &p,
                                            const fa3_work &it, int iter, int lane)
{
    if (iter > 0) mbar_wait(&s.q_empty, (iter - 1) & 1);
    if (lane == 0) mbar_arrive_tx(&s.q_full, 64 * p.group * p.tpt * (D / 64) * (int)sizeof(T));
    __syncwarp();
    if (lane < D / 64)
        tma_load_3d(&s.q[lane][0][0], tq, &s.q_full, lane * 64, it.kvh * p.group, it.q_tok0);
}

// The producer warp's loop: for every work item of this CTA (a persistent
// grid's stride), Q, then the item's KV tiles from the last to the first;
// kv(it, n, pi, pg) waits for free stages and copies tile n's K and V (pi
// counts tiles across items, for the rings' indices and phases). AHEAD: each
// tile's pages are read from the table a tile ahead and passed in pg (see
// load_kv_tile), so no copy waits for the read. Only the FP8-compute decode
// instance takes it (13-14% faster); the prefill instances, whose
// whole-kernel code changed with it, lost ~2% (FP8) and 2-7% (16-bit), so
// they read the table at each copy.
template <int D, int BN, typename T, bool AHEAD, typename S, typename KV>
__device__ __forceinline__ void produce(S &s, const CUtensorMap *tq, const CUtensorMap *tk,
                                        const CUtensorMap *tv, const fa3_params &p, int w0,
                                        int n_mine, int lane, KV &&kv)
{
    if (lane == 0) {
        tma_prefetch_desc(tq);
        tma_prefetch_desc(tk);
        tma_prefetch_desc(tv);
    }
    int pi = 0, iter = 0;
    for (; iter < n_mine; iter++) {
        const fa3_work it = p.work[w0 + iter];
        load_q_tile<D, T>(s, tq, p, it, iter, lane);
        const int n_lo = tile_lo<BN>(it), n_hi = tile_hi<BN>(it);
        if constexpr (AHEAD) {
            int pg = n_hi > n_lo ? kv_tile_page<BN>(p, it, n_hi - 1, lane) : 0;
            for (int n = n_hi - 1; n >= n_lo; n--, pi++) {
                const int pg_next = n > n_lo ? kv_tile_page<BN>(p, it, n - 1, lane) : 0;
                kv(it, n, pi, pg);
                pg = pg_next;
            }
        } else {
            for (int n = n_hi - 1; n >= n_lo; n--, pi++) kv(it, n, pi, 0);
        }
    }
}

// FP8 KV: widen one staged e4m3 tile ([BN][D] bytes) into the 16-bit
// 128-byte-swizzled layout ([D/64][BN][64]) the wgmma descriptors expect.
// Each step reads 16 bytes (16 channels of one row) and writes two 16-byte
// units; the swizzle puts unit u of row r at u ^ (r % 8).
template <int D, int BN, typename T>
__device__ __forceinline__ void widen_tile(const uint8_t (*src)[D], T (*dst)[BN][64], int t)
{
    constexpr int PER_ROW = D / 16, TOTAL = BN * PER_ROW;
    for (int i = t; i < TOTAL; i += kConvertWarps * 32) {
        const int r = i / PER_ROW, col = (i - r * PER_ROW) * 16;
        const uint4 b = *reinterpret_cast<const uint4 *>(&src[r][col]);
        uint4 lo, hi;
        lo.x = widen_e4m3x2<T>((uint16_t)(b.x & 0xffff));
        lo.y = widen_e4m3x2<T>((uint16_t)(b.x >> 16));
        lo.z = widen_e4m3x2<T>((uint16_t)(b.y & 0xffff));
        lo.w = widen_e4m3x2<T>((uint16_t)(b.y >> 16));
        hi.x = widen_e4m3x2<T>((uint16_t)(b.z & 0xffff));
        hi.y = widen_e4m3x2<T>((uint16_t)(b.z >> 16));
        hi.z = widen_e4m3x2<T>((uint16_t)(b.w & 0xffff));
        hi.w = widen_e4m3x2<T>((uint16_t)(b.w >> 16));
        const int c = col / 64, u = (col % 64) / 8;
        uint8_t *row = reinterpret_cast<uint8_t *>(&dst[c][r][0]);
        *reinterpret_cast<uint4 *>(row + ((u ^ (r & 7)) << 4)) = lo;
        *reinterpret_cast<uint4 *>(row + (((u + 1) ^ (r & 7)) << 4)) = hi;
    }
}

// ---- consumer pieces ---------------------------------------------------------------

// S(64 x BN) = Q(rows of this warpgroup) K^T over D.
template <int D, int BN, int STAGES, typename T, typename S>
__device__ __forceinline__ void gemm_qk(S &s, int cw, int st, float (&sacc)[BN / 2])
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
template <int D, int BN, int STAGES, typename T, typename S>
__device__ __forceinline__ void gemm_pv(S &s, int st, const uint32_t (&pa)[BN / 16][4],
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
    int lo[2], hi[2]; // keys [lo, hi) the row may see (sequence, causal, window)
    float slope2[2];  // ALiBi slope of the row's head times log2(e); 0 without ALiBi
};

// Visible key range of one row: the item's range cut by the causal and
// window limits, so a tile's mask is two compares per score, no branches.
__device__ __forceinline__ void row_range(const fa3_params &p, const fa3_work &it, int q, int &lo,
                                          int &hi)
{
    lo = it.kv_lo;
    hi = it.kv_hi;
    if (p.cross) return;
    if (p.causal) {
        hi = min(hi, q + 1);
        if (p.window) lo = max(lo, q - p.window + 1);
    } else if (p.window) {
        lo = max(lo, q - p.window + 1);
        hi = min(hi, q + p.window);
    }
}

// Row r of item it (below FA3_BLOCK_M) in the item's (token, head-in-group)
// order: its token offset t in the tile and its query head; false when it
// maps to no real (token, head).
__device__ __forceinline__ bool item_row(const fa3_params &p, const fa3_work &it, int r, int &t,
                                         int &head)
{
    t = r / p.group;
    head = it.kvh * p.group + (r - t * p.group);
    return t < it.q_ntok && t < p.tpt;
}

// The two rows a consumer thread owns in item it (rl0: its first row in the
// query tile).
__device__ __forceinline__ row_info item_rows(const fa3_params &p, const fa3_work &it, int rl0)
{
    row_info ri;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int t;
        ri.valid[i] = item_row(p, it, rl0 + i * 8, t, ri.head[i]);
        ri.pos[i] = it.pos0 + t;
        ri.tok[i] = it.q_tok0 + t;
        row_range(p, it, ri.pos[i], ri.lo[i], ri.hi[i]);
        ri.slope2[i] = p.alibi ? p.alibi[ri.head[i]] * 1.4426950408889634f : 0.f;
    }
    return ri;
}

// Scores outside each row's visible keys [lo, hi) of key tile n to -inf:
// two compares per score, no branches.
template <int BN>
__device__ __forceinline__ void mask_tile(float (&sacc)[BN / 2], const row_info &ri, int n,
                                          int lane)
{
    const int k0 = n * BN + 2 * (lane & 3); // key of this thread's first column
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int a = ri.lo[i] - k0, b = ri.hi[i] - k0;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = j * 8 + e;
                if (c < a || c >= b) sacc[j * 4 + i * 2 + e] = -INFINITY;
            }
        }
    }
}

// An item's FP8 scales: k multiplies the softmax factor (the host's float
// is folded into scale and scale_log2 already, so 1 then), v the output
// normalisation. With scale tensors they are the item's KV head's, read
// here, when the kernel runs; callers read them where they use them rather
// than hold them through the key loop (the FP8 instances' consumers are at
// their register limits).
struct item_scales {
    float k, v;
};
__device__ __forceinline__ item_scales scales_of(const fa3_params &p, int kvh)
{
    item_scales s = {1.f, p.v_scale};
    if (p.k_scales) {
        s.k = p.k_scales[kvh * p.scale_head_stride];
        s.v = p.v_scales[kvh * p.scale_head_stride];
    }
    return s;
}


// The pre-pass's factor for rows whose scores are scaled by q (the K
// scale, and for FP8 compute the row's Q scale): the softmax scale in the
// log2 domain, or over the soft-cap inside its tanh.
__device__ __forceinline__ float prepass_factor(const fa3_params &p, float q)
{
    return p.softcap > 0.f ? p.scale * q / p.softcap : p.scale_log2 * q;
}
struct row_factors {
    float f[2]; // prepass_factor of a thread's two rows
};

// Tile n's scores into the log2 domain: row i's factor f[i], soft-cap's
// tanh, and ALiBi's bias slope * (key - query position), which costs one
// FFMA per score (a tile's key offsets are constants, so a row needs one
// product per tile). ALIBI is a template flag so that layers without it
// pay nothing.
template <int BN, bool ALIBI>
__device__ __forceinline__ void score_transform(float (&sacc)[BN / 2], const fa3_params &p,
                                                const row_info &ri, int n, const row_factors &rf,
                                                int lane)
{
    const float capl = p.softcap * 1.4426950408889634f;
    const bool cap = p.softcap > 0.f;
    const int k0 = n * BN + 2 * (lane & 3); // key of this thread's first column
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float f = rf.f[i], sl = ALIBI ? ri.slope2[i] : 0.f;
        const float b = sl * (float)(k0 - ri.pos[i]);
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float &x = sacc[j * 4 + i * 2 + e];
                const float bias = ALIBI ? fmaf(sl, (float)(j * 8 + e), b) : 0.f;
                x = cap ? fmaf(capl, tanh_fast(x * f), bias) : fmaf(x, f, bias);
            }
    }
}

// Scores into the domain the softmax works in, and masking. Without the
// pre-pass (no soft-cap, no ALiBi, a positive scale) the raw scores stay as
// they are: the scale is folded into the exponent (exp2(s * c - m * c), one
// FFMA per score) and the row maximum commutes with it. With it, every
// score maps into the log2 domain first (score_transform) and the exponent
// factor c is 1. `prepass` is fixed per launch, so the branches are uniform
// and taken once per tile, not per score. factors() gives the rows'
// row_factors: the 16-bit kernel computes them there, inside the branch,
// so that no register holds them through the key loop.
template <int BN, typename RF>
__device__ __forceinline__ void score_prep(float (&sacc)[BN / 2], const fa3_params &p,
                                           const row_info &ri, int n, bool prepass, RF &&factors,
                                           bool need_mask, int lane)
{
    if (prepass) {
        const row_factors rf = factors();
        if (p.alibi) score_transform<BN, true>(sacc, p, ri, n, rf, lane);
        else score_transform<BN, false>(sacc, p, ri, n, rf, lane);
    }
    if (need_mask) mask_tile<BN>(sacc, ri, n, lane);
}

// Does a launch need score_prep's pre-pass?
__device__ __forceinline__ bool needs_prepass(const fa3_params &p)
{
    return p.softcap > 0.f || p.alibi || !(p.scale_log2 > 0.f);
}

// The exponent factor c of online_softmax for rows whose scores are
// scaled by q: 1 after the pre-pass, else scale_log2 * q. Computed once per
// item, before the key loop.
__device__ __forceinline__ float exp_factor(const fa3_params &p, bool prepass, float q)
{
    return prepass ? 1.f : p.scale_log2 * q;
}

// ALiBi without soft-cap stays in the raw score domain plain scores keep
// (c folds the scale into the exponent): each score of tile n gains
// slope / c times its column's offset from the thread's first key, an
// immediate, so one FFMA; off[i] gets the rest of row i's bias, slope / c
// times (the thread's first key - the row's position), one value per row
// and tile, which online_softmax adds to the thread's row maximum and
// folds into the exponent's constant. The pre-pass form takes two FFMAs a
// score.
template <int BN>
__device__ __forceinline__ void alibi_raw(float (&sacc)[BN / 2], const row_info &ri, int n, float c,
                                          int lane, float (&off)[2])
{
    const int k0 = n * BN + 2 * (lane & 3); // key of this thread's first column
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float sl = ri.slope2[i] / c;
        off[i] = sl * (float)(k0 - ri.pos[i]);
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++)
                sacc[j * 4 + i * 2 + e] = fmaf(sl, (float)(j * 8 + e), sacc[j * 4 + i * 2 + e]);
    }
}

// Online softmax: update row maxima (in the score domain), turn scores into
// probabilities exp2(s * c - m * c), and return the factor by which the
// running O and l must be rescaled. OFF: row i's scores all lack off[i]
// (alibi_raw), added to the thread's maximum before the quad reduction.
template <int BN, bool OFF = false>
__device__ __forceinline__ void online_softmax(float (&sacc)[BN / 2], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], float c,
                                               const float *off = nullptr)
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = OFF ? -INFINITY : m[i];
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
            mx = fmaxf(mx, fmaxf(sacc[j * 4 + i * 2], sacc[j * 4 + i * 2 + 1]));
        mx = OFF ? fmaxf(quad_max(mx + off[i]), m[i]) : quad_max(mx);
        const float mu = mx == -INFINITY ? 0.f : mx * c;
        alpha[i] = exp2f(m[i] * c - mu);
        m[i] = mx;
        const float k = OFF ? fmaf(off[i], c, -mu) : -mu;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float pv = exp2f(fmaf(sacc[j * 4 + i * 2 + e], c, k));
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

template <int D> __device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2])
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
__device__ __forceinline__ bool tile_needs_mask(const fa3_params &p, const fa3_work &it, int n,
                                                int BN)
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

// l: per-lane partial row sums that normalise O and give the LSE (the
// FP8-compute kernel's are the sums of P as rounded to e4m3, which PV
// used). OS: stage O in
// this warp's out_stage rows (shared address stage); the bulk copies need
// the 16-byte aligned rows fa3_forward requires of out. The test must be
// visibly warp-uniform (parameters, not the stage address, which derives
// from the thread index): a branch the compiler takes for divergent moves
// the whole item loop's ring and descriptor arithmetic off the uniform
// datapath (measured 1-5% slower).
template <int D, typename T, bool OS = false>
__device__ __forceinline__ void epilogue(const fa3_params &p, const fa3_work &it,
                                         const row_info &ri, float (&o)[D / 2], const float (&m)[2],
                                         const float (&l)[2], int row_local0, int lane,
                                         float v_scale, uint32_t stage = 0)
{
    const float log2e = 1.4426950408889634f, ln2 = 0.6931471805599453f;
    const bool split = it.part_row >= 0;
    float os[2], lse[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float lt = quad_sum(l[i]);
        const float mu = m[i] == -INFINITY ? 0.f : m[i];
        if (!split && p.sinks && ri.valid[i]) {
            const float sk = exp2f(p.sinks[ri.head[i]] * log2e - mu);
            lt += sk;
        }
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        lse[i] = lt > 0.f ? (mu + log2f(lt)) * ln2 : -INFINITY;
        os[i] = inv * (split ? 1.f : v_scale);
    }
    if (!split && p.lse && (lane & 3) == 0) {
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (ri.valid[i]) p.lse[(size_t)ri.tok[i] * p.num_q_heads + ri.head[i]] = lse[i];
    }
    if (OS && !split) {
        // stmatrix j: matrix i (row addresses from lanes 8i..8i+7) is rows
        // 8 (i % 2) .. + 7 of column group j + i / 2, the accumulator's
        // fragment. First the previous item's rows must have left the stage.
        constexpr int PITCH = out_stage<D, T>::PITCH;
        const int w8 = lane >> 3;
        const uint32_t row_addr = stage + ((w8 & 1) * 8 + (lane & 7)) * PITCH + (w8 >> 1) * 16;
        bulk_wait_read<0>();
        __syncwarp();
#pragma unroll
        for (int j = 0; j < D / 8; j += 2) {
            uint32_t v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int jj = j + (k >> 1), i = k & 1;
                v[k] = elem<T>::pack(o[jj * 4 + i * 2] * os[i], o[jj * 4 + i * 2 + 1] * os[i]);
            }
            stsm_x4(row_addr + j * 16, v[0], v[1], v[2], v[3]);
        }
        fence_proxy_async(); // generic stores, then the copy engine reads
        __syncwarp();
        // Lane r < 16 stores the warp's row r.
        int t, head;
        if (lane < 16 && item_row(p, it, row_local0 - lane / 4 + lane, t, head)) {
            T *dst = reinterpret_cast<T *>(p.out) + (size_t)(it.q_tok0 + t) * p.out_tok_stride +
                     (size_t)head * p.out_head_stride;
            bulk_store(dst, stage + lane * PITCH, D * sizeof(T));
            bulk_commit();
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (!ri.valid[i]) continue;
        const int rl = row_local0 + i * 8; // row within the item's valid rows
        if (split) {
            float *dst = p.part_o + (size_t)(it.part_row + rl) * D;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                float2 v = make_float2(o[j * 4 + i * 2] * os[i], o[j * 4 + i * 2 + 1] * os[i]);
                *reinterpret_cast<float2 *>(dst + j * 8 + 2 * (lane & 3)) = v;
            }
            if ((lane & 3) == 0) p.part_lse[it.part_row + rl] = lse[i];
        } else {
            T *dst = reinterpret_cast<T *>(p.out) + (size_t)ri.tok[i] * p.out_tok_stride +
                     (size_t)ri.head[i] * p.out_head_stride;
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                uint32_t v = elem<T>::pack(o[j * 4 + i * 2] * os[i], o[j * 4 + i * 2 + 1] * os[i]);
                *reinterpret_cast<uint32_t *>(dst + j * 8 + 2 * (lane & 3)) = v;
            }
        }
    }
}

// KV is T (16-bit cache) or __nv_fp8_e4m3 (FP8 cache, SST staging stages).
// OS: the epilogue stages O in shared memory (out_stage). AR: the instance
// for ALiBi without soft-cap, which keeps scores in the raw domain
// (alibi_raw); a launch argument rather than a branch, so the other
// instances' code stays their own (in the shared kernel it cost plain
// prefill 3-9%, DECISIONS.md). 16-bit caches only (an FP8 cache's K scale
// may make the exponent factor 0), and not at head size 64, whose 160
// consumer registers it would spill. DV: the value head size (D but on
// ragged layers); RG: ragged K/V (load_kv_tile).
template <int D, int BN, int STAGES, typename T, typename KV, int SST, bool OS = false,
          bool AR = false, int DV = D, bool RG = false>
__global__ void __launch_bounds__(fwd_threads<D>, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
               const __grid_constant__ CUtensorMap tv, const fa3_params p)
{
    constexpr bool F8 = !std::is_same<KV, T>::value;
    static_assert(!F8 || (std::is_same<KV, __nv_fp8_e4m3>::value && SST > 0),
                  "FP8 KV needs staging");
    static_assert(!AR || (!F8 && D != 64), "the raw-ALiBi instance: 16-bit KV, not head size 64");
    static_assert(DV == D || (RG && !F8), "a value head size of its own: ragged 16-bit K/V only");
    extern __shared__ uint8_t smem_raw[];
    using Smem = fwd_smem<D, BN, STAGES, T, SST, OS, DV>;
    Smem &s = *reinterpret_cast<Smem *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                        ~uintptr_t(1023));
    const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;

    if (tid == 0) {
        mbar_init(&s.q_full, 1);
        mbar_init(&s.q_empty, consumer_warps<D>);
        for (int i = 0; i < STAGES; i++) {
            // FP8: the converter warps fill the 16-bit ring, one arrival each.
            mbar_init(&s.k_full[i], F8 ? kConvertWarps : 1);
            mbar_init(&s.v_full[i], F8 ? kConvertWarps : 1);
            mbar_init(&s.k_empty[i], consumer_warps<D>);
            mbar_init(&s.v_empty[i], consumer_warps<D>);
        }
        if constexpr (F8) {
            for (int i = 0; i < SST; i++) {
                mbar_init(&s.f8.k8_full[i], 1);
                mbar_init(&s.f8.v8_full[i], 1);
                mbar_init(&s.f8.k8_empty[i], kConvertWarps);
                mbar_init(&s.f8.v8_empty[i], kConvertWarps);
            }
        }
        mbar_fence_init();
    }
    __syncthreads();
    // this CTA's items (the host's list scheduling, fa3_order.h)
    const int w0 = p.counts->cta_work[blockIdx.x], n_mine = p.counts->cta_work[blockIdx.x + 1] - w0;

    // The launch's register pool (384 x 168, or 512 x 128 with three
    // consumers: the launch bounds' cap) split by setmaxnreg between the
    // producer warpgroup and NWG consumers: what the consumers add, the
    // producer gives up, or the increase never completes.
    constexpr int NWG = FA3_BLOCK_M(D) / 64;
    constexpr int kRegsProducer = NWG == 2 ? 40 : 32, kRegsConsumer = NWG == 2 ? 232 : 160;
    if (wg == 0) {
        regs_dealloc<kRegsProducer>();
        if constexpr (F8) {
            if (tid >= 32) {
                // Converter warps 1-3: staged e4m3 tile -> 16-bit ring stage.
                const int t = tid - 32;
                int pi = 0;
                for (int i = 0; i < n_mine; i++) {
                    const fa3_work it = p.work[w0 + i];
                    const int n_lo = tile_lo<BN>(it), n_hi = tile_hi<BN>(it);
                    for (int n = n_hi - 1; n >= n_lo; n--, pi++) {
                        const int st = pi % STAGES, si = pi % SST;
                        const uint32_t ph = (pi / STAGES) & 1, ph8 = (pi / SST) & 1;
                        mbar_wait(&s.f8.k8_full[si], ph8);
                        mbar_wait(&s.k_empty[st], ph ^ 1);
                        widen_tile<D, BN, T>(s.f8.k8[si], s.k[st], t);
                        fence_proxy_async(); // generic-proxy stores, then wgmma (async proxy) reads
                        __syncwarp();
                        if (lane == 0) {
                            mbar_arrive(&s.f8.k8_empty[si]);
                            mbar_arrive(&s.k_full[st]);
                        }
                        mbar_wait(&s.f8.v8_full[si], ph8);
                        mbar_wait(&s.v_empty[st], ph ^ 1);
                        widen_tile<D, BN, T>(s.f8.v8[si], s.v[st], t);
                        fence_proxy_async();
                        __syncwarp();
                        if (lane == 0) {
                            mbar_arrive(&s.f8.v8_empty[si]);
                            mbar_arrive(&s.v_full[st]);
                        }
                    }
                }
                return;
            }
        }
        if (tid >= 32) return;
        produce<D, BN, T, false>(
            s, &tq, &tk, &tv, p, w0, n_mine, lane, [&](const fa3_work &it, int n, int pi, int) {
                if constexpr (F8) {
                    const int si = pi % SST;
                    const uint32_t ph8 = (pi / SST) & 1;
                    mbar_wait(&s.f8.k8_empty[si], ph8 ^ 1);
                    load_kv_tile<BN, 1, D, 0>(&s.f8.k8[si][0][0], &tk, &s.f8.k8_full[si], BN * D, p,
                                              it, n, lane);
                    mbar_wait(&s.f8.v8_empty[si], ph8 ^ 1);
                    load_kv_tile<BN, 1, D, 0>(&s.f8.v8[si][0][0], &tv, &s.f8.v8_full[si], BN * D, p,
                                              it, n, lane);
                } else {
                    const int st = pi % STAGES;
                    const uint32_t ph = (pi / STAGES) & 1;
                    constexpr int tk_bytes = BN * D * (int)sizeof(T);
                    constexpr int tv_bytes = BN * DV * (int)sizeof(T);
                    mbar_wait(&s.k_empty[st], ph ^ 1);
                    load_kv_tile<BN, D / 64, 128, BN * 128, false, RG>(
                        reinterpret_cast<uint8_t *>(&s.k[st][0][0][0]), &tk, &s.k_full[st],
                        tk_bytes, p, it, n, lane);
                    mbar_wait(&s.v_empty[st], ph ^ 1);
                    load_kv_tile<BN, DV / 64, 128, BN * 128, false, RG>(
                        reinterpret_cast<uint8_t *>(&s.v[st][0][0][0]), &tv, &s.v_full[st],
                        tv_bytes, p, it, n, lane);
                }
            });
        return;
    }

    regs_alloc<kRegsConsumer>();
    // bar_self: this warpgroup's turn to issue GEMMs; bar_other: the next's.
    const int cw = wg - 1, warp = (tid % 128) / 32;
    const int bar_self = kBarPingPong + cw, bar_other = kBarPingPong + (cw + 1) % NWG;
    if (cw == NWG - 1) named_arrive(kBarPingPong, 256); // warpgroup 0 issues first
    uint32_t stage = 0;                                 // this warp's output staging, if any
    if constexpr (OS) stage = smem_addr(&s.o.rows[cw * 4 + warp][0][0]);
    int pi = 0, iter = 0;
    for (; iter < n_mine; iter++) {
        const fa3_work it = p.work[w0 + iter];
        if ((NWG > 2 || D == 128) && cw * 64 >= it.q_ntok * p.group) {
            // None of the item's rows is this warpgroup's (a decode's few
            // rows sit in the first): it computes nothing, only keeps its
            // turns and the stages' arrivals. Q first: its arrival then
            // belongs to this item. GEMMs on empty rows cost d64 decode
            // 20-25% and d128 decode at 8/1 heads 9%; at d256 this path
            // costs the instances 128 bytes of spills, so it is left out.
            mbar_wait(&s.q_full, iter & 1);
            const int nt = max(tile_hi<BN>(it) - tile_lo<BN>(it), 0);
            for (int k = 0; k < nt; k++, pi++) { // a turn per tile and one for the last PV
                const int st = pi % STAGES;
                const uint32_t ph = (pi / STAGES) & 1;
                mbar_wait(&s.k_full[st], ph);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                mbar_wait(&s.v_full[st], ph);
                if (lane == 0) mbar_arrive(&s.v_empty[st]);
                named_sync(bar_self, 256);
                named_arrive(bar_other, 256);
            }
            if (nt) {
                named_sync(bar_self, 256);
                named_arrive(bar_other, 256);
            }
            if (lane == 0) mbar_arrive(&s.q_empty);
            continue;
        }
        const int rl0 = cw * 64 + warp * 16 + lane / 4;
        const row_info ri = item_rows(p, it, rl0);
        // Scores stay raw (scale folded into the exponent) unless soft-cap,
        // ALiBi or a non-positive scale needs the pre-pass; see score_prep.
        // The item's scales (item_scales; a 16-bit cache has none, so
        // constants) are read where they are used: K's into the row factors
        // here, V's at the epilogue.
        // AR: ALiBi in the raw domain (alibi_raw), no pre-pass for it.
        const bool prepass = needs_prepass(p) && !AR;
        const float ks = F8 ? scales_of(p, it.kvh).k : 1.f;
        const float expc = exp_factor(p, prepass, ks);
        auto factors = [&] {
            const float f = prepass_factor(p, ks);
            return row_factors{{f, f}};
        };
        float o[DV / 2];
#pragma unroll
        for (int i = 0; i < DV / 2; i++) o[i] = 0.f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, alpha[2];
        float sacc[BN / 2];
        uint32_t pa[BN / 16][4];
        // Tile n's scores into probabilities (sacc), O's factor in alpha.
        auto softmax = [&](int n) {
            const bool mask = tile_needs_mask(p, it, n, BN);
            if constexpr (AR) {
                float off[2];
                alibi_raw<BN>(sacc, ri, n, expc, lane, off);
                if (mask) mask_tile<BN>(sacc, ri, n, lane);
                online_softmax<BN, true>(sacc, m, l, alpha, expc, off);
            } else {
                score_prep<BN>(sacc, p, ri, n, prepass, factors, mask, lane);
                online_softmax<BN>(sacc, m, l, alpha, expc);
            }
        };

        mbar_wait(&s.q_full, iter & 1);
        const int n_lo = tile_lo<BN>(it), n_hi = tile_hi<BN>(it);
        if (n_hi > n_lo) {
            // First tile: S only.
            int n = n_hi - 1;
            {
                const int st = pi % STAGES;
                mbar_wait(&s.k_full[st], (pi / STAGES) & 1);
                named_sync(bar_self, 256);
                wgmma_fence();
                gemm_qk<D, BN, STAGES, T, Smem>(s, cw, st, sacc);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<0>();
                reg_fence(sacc);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                softmax(n);
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
                gemm_qk<D, BN, STAGES, T, Smem>(s, cw, st, sacc);
                wgmma_commit();
                gemm_pv<DV, BN, STAGES, T, Smem>(s, pst, pa, o);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<1>();
                reg_fence(sacc);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                softmax(n);
                reg_fence(sacc);
                wgmma_wait<0>();
                reg_fence(o);
                if (lane == 0) mbar_arrive(&s.v_empty[pst]);
                rescale<DV>(o, alpha);
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
                gemm_pv<DV, BN, STAGES, T, Smem>(s, pst, pa, o);
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
            // The epilogue wants the row maxima in the log2 domain.
#pragma unroll
        for (int i = 0; i < 2; i++) m[i] = m[i] == -INFINITY ? -INFINITY : m[i] * expc;
        epilogue<DV, T, OS>(p, it, ri, o, m, l, rl0, lane, F8 ? scales_of(p, it.kvh).v : p.v_scale,
                            stage);
    }
    if (OS) bulk_wait(); // the last rows out before the block's shared memory goes
}

} // namespace fa3
