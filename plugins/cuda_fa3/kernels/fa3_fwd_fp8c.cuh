// The FP8-compute forward kernel (`fp8_compute = on`, head size 128, fp8
// e4m3 KV cache): both GEMMs run as e4m3 wgmma (k = 32 per instruction) at
// twice the 16-bit tensor rate, instead of widening the cache to 16 bits.
//
// Same skeleton as fa3_fwd_kernel.cuh (persistent CTA, TMA producer warp,
// two 64-row consumer warpgroups with ping-pong and intra-warpgroup
// overlap); what differs:
//   - Q: the 16-bit tile still lands in shared memory; each consumer thread
//     reads its own wgmma A-fragment of it, takes the row's absolute maximum
//     (a quad reduction: the four lanes of a row), quantizes the row to e4m3
//     with scale amax / 448 (or the engine's query scale, use_q_scale) and
//     keeps Q in registers (A from registers for
//     QK^T). The row's scale multiplies that row's softmax factor, so no
//     extra pass touches the scores. Q's shared memory is released at once.
//   - K: copied as stored (e4m3, 128-byte swizzle by the copy engine)
//     straight into the ring wgmma reads: QK^T's B operand is K-major.
//   - V: e4m3 wgmma takes B K-major only, so PV needs V^T ([D][BN], keys
//     contiguous). The copy engine lands V (128-byte swizzled) in a staging
//     ring and producer warps 1-3 transpose it into the swizzled V^T ring
//     (transpose_v), overlapped with the consumers' GEMMs. Where many
//     query tiles read the same KV tiles (prefill), the transpose is shared:
//     one item per request and KV head also stores each stage image to a
//     global scratch, and the others fill their stage with one bulk copy of
//     every image that is out when they start (vt_source below).
//   - P: converted to e4m3 in registers. The S accumulator gives a thread
//     columns {2t, 2t+1, 2t+8, 2t+9} of each 16-key group while the e4m3
//     A-fragment wants four consecutive k {4t..4t+3}; instead of shuffling P
//     between lanes, the transpose stores key pi(k) at V^T position k (pi
//     below), so P packs straight from the accumulator registers.
//   - Probabilities are exp2(...) * 256 (the exponent offset +8 is free in
//     the FFMA): P then spans e4m3's normal range instead of underflowing
//     below 2^-9; l carries the same factor and the epilogue's row maximum
//     is lowered by 8 so that the LSE and the sinks stay exact.
// k_scale folds into the softmax factor and v_scale into the output
// normalisation, both in fp32, as in the widening kernel.
#pragma once
#include "fa3_fwd_kernel.cuh"

namespace fa3 {

// 128 keys per tile (FA3_VT_KEYS): a V^T row of one channel is exactly one
// 128-byte swizzle row, and a tile is one slab of the V^T scratch.
template <int D, int STAGES, int SST, typename T, bool OS = false>
struct fp8c_smem : with_out_stage<D, T, OS> {
    static constexpr int BN = FA3_VT_KEYS;
    static_assert(D == 128, "the FP8-compute kernel is built for head size 128");
    alignas(1024)
        T q[D / 64][FA3_BLOCK_M(D)][64]; // 16-bit, 128-byte swizzled, as the copy engine lands it
    alignas(1024) uint8_t k[STAGES][BN][D]; // e4m3 as stored, 128-byte swizzled
    // e4m3 V^T, keys permuted (pi), 128-byte swizzled; rows D..D+7 are a
    // constant block (row D all ones, the rest zeros) that PV (n = D + 8)
    // turns into the row sums of P, so the softmax adds nothing.
    alignas(1024) uint8_t vt[STAGES][D + 8][BN];
    alignas(1024) uint8_t v8[SST][BN][D]; // staged e4m3 V, 128-byte swizzled
    uint64_t q_full, q_empty;
    uint64_t k_full[STAGES], k_empty[STAGES], v_full[STAGES], v_empty[STAGES];
    uint64_t v8_full[SST], v8_empty[SST];
    int32_t
        v8_copied[SST]; // kVtShared: a slot without V, giving the first tile the producer copies
};

// Byte offset of (row, byte col) in a tile of 128-byte rows with the
// 128-byte swizzle: 16-byte unit u of row r sits at u ^ (r % 8).
__device__ __forceinline__ int sw128(int r, int c)
{
    return r * 128 + ((((c >> 4) ^ r) & 7) << 4) + (c & 15);
}

// pi: V^T position 8h + j (h = 0/1 within a 16-key group) holds key
// 4h + kOff[j]; i.e. position 4t + e holds key 2t + (e & 1) + 8 (e >> 1),
// the accumulator column that thread t's byte e of the P fragment carries.
__device__ __forceinline__ int pi_off(int j) { return (j & 1) + ((j >> 1) & 1) * 8 + (j >> 2) * 2; }

// Where an item's V^T tiles come from (p.vt: the shared scratch, 128-key
// tiles):
//   kVtTranspose  the transposing warps, as for any item;
//   kVtPublish    the same, and each stage image is also stored to the
//                 scratch; the slab's flag says down to which tile the
//                 images are out (the item walks its tiles downwards);
//   kVtShared     a reader: when the item starts, the producer reads the
//                 flag once (vt_published) and copies the tiles that are
//                 out; the transposing warps do the rest.
enum { kVtTranspose, kVtPublish, kVtShared };
template <bool VT> __device__ __forceinline__ int vt_source(const fa3_params &p, const fa3_work &it)
{
    if (!VT || !p.vt || it.vt_base < 0) return kVtTranspose;
    return it.vt_pub ? kVtPublish : kVtShared;
}
// A publisher raises its flag every kVtEvery tiles (measured level with
// 16; publishing only after the last tile cost causal 8k ~4%).
constexpr int kVtEvery = 4;
// Tile n's V^T stage image for the item's KV head.
template <int D>
__device__ __forceinline__ uint8_t *vt_slab(const fa3_params &p, const fa3_work &it, int n)
{
    return p.vt +
           ((size_t)(it.vt_base + n - it.vt_lo) * p.num_kv_heads + it.kvh) * (D * FA3_VT_KEYS);
}
// A slab's flag: (epoch << 32) | the lowest tile whose image is out, every
// tile above it included. A flag of another epoch is an older forward's.
__device__ __forceinline__ uint64_t *vt_flag(const fa3_params &p, const fa3_work &it)
{
    return p.vt_flags + (size_t)it.vt_base * p.num_kv_heads + it.kvh;
}
__device__ __forceinline__ void vt_publish(const fa3_params &p, const fa3_work &it, int lowest)
{
    fence_proxy_async_global(); // the copy engine's writes, then the flag
    st_release_gpu(vt_flag(p, it), (uint64_t)p.vt_epoch << 32 | (uint32_t)lowest);
}
// A reader's first copied tile, from the flag lane 0 loaded when the item
// started (the warp gets it). One flag load per item, not per tile: a round
// trip per tile in the producer warp costs more than the transpose it
// saves. The load is relaxed and issued before the producer waits for a
// free K stage, so its latency hides under that wait; the copies it allows
// are issued only after the value is seen (a control dependency, the proxy
// fence between), and the publisher raised it only after its images were
// written (vt_publish). A reader never waits for a publisher: the tiles not
// yet out are transposed as in any item.
__device__ __forceinline__ int vt_published(const fa3_params &p, uint64_t flag, int lane)
{
    int lowest = 0x7fffffff;
    if (lane == 0) {
        if ((uint32_t)(flag >> 32) == p.vt_epoch) lowest = (int)(uint32_t)flag;
        if (lowest != 0x7fffffff)
            fence_proxy_async_global(); // the flag, then the copy engine's reads
    }
    // A warp reduction, not a shuffle: its result is provably warp-uniform,
    // so the tile counters that depend on it stay on the uniform datapath.
    return __reduce_min_sync(0xffffffffu, lane == 0 ? lowest : 0x7fffffff);
}

// Shared-memory loads and stores by 32-bit shared address: the tile
// pointers come from an aligned integer, so plain C++ would compile to
// generic LD/ST (an address-space check per access).
__device__ __forceinline__ uint32_t lds32(uint32_t a)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t a)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ void sts64(uint32_t a, uint2 v)
{
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(a), "r"(v.x), "r"(v.y) : "memory");
}

// Four words a, b, c, d of bytes [x0 x1 x2 x3] -> word i = [a_i b_i c_i d_i].
__device__ __forceinline__ void tr4(uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t &o0,
                                    uint32_t &o1, uint32_t &o2, uint32_t &o3)
{
    const uint32_t t0 = __byte_perm(a, b, 0x5140), t1 = __byte_perm(a, b, 0x7362);
    const uint32_t t2 = __byte_perm(c, d, 0x5140), t3 = __byte_perm(c, d, 0x7362);
    o0 = __byte_perm(t0, t2, 0x5410);
    o1 = __byte_perm(t0, t2, 0x7632);
    o2 = __byte_perm(t1, t3, 0x5410);
    o3 = __byte_perm(t1, t3, 0x7632);
}

// V (staged [BN][D], swizzled) -> V^T ([D][BN], swizzled, positions pi).
// Work unit: V^T positions [8kq, 8kq+8) x channels [8dq, 8dq+8). Half-warp
// hw (0..5) of the three converter warps, lane l: kq = l, dq = (l + it) % 16
// for it = hw, hw + 6, hw + 12. Within a half-warp the 16 lanes then hit 16
// distinct 8-byte slots on both the loads (the staging swizzle spreads the
// key rows) and the stores (kq spreads the positions): no bank conflicts.
// The swizzled addresses are taken apart so that their lane-dependent
// parts are computed once per kernel (tr_lane): load row key0 + pi(j) has
// (row & 7) = 4 (l & 1) ^ (pi(j) & 7), with pi(j) & 7 in {0, 1, 2, 3}, so
// the eight loads of an iteration need four 16-byte unit offsets
// ((U ^ k) << 4, k = 0..3) plus compile-time row offsets 128 pi(j); store
// row 8 dq + i has (row & 7) = i, so its lane part 128 i + (((l >> 1) ^ i)
// << 4) + 8 (l & 1) is loop-invariant (so[]).
struct tr_lane {
    uint32_t so[8];
    int key0;
};
__device__ __forceinline__ tr_lane transpose_lane(int l)
{
    tr_lane t;
#pragma unroll
    for (int i = 0; i < 8; i++) t.so[i] = 128 * i + (((l >> 1) ^ i) << 4) + 8 * (l & 1);
    t.key0 = 16 * (l >> 1) + 4 * (l & 1);
    return t;
}
__device__ __forceinline__ void transpose_v(uint32_t src, uint32_t dst, int hw, int l,
                                            const tr_lane &t)
{
    const uint32_t a0 = src + 128 * t.key0;
    for (int it = hw; it < 16; it += 6) {
        const int dq = (l + it) & 15;
        const uint32_t u = ((dq >> 1) ^ (4 * (l & 1))) & 7, a = a0 + 8 * (dq & 1);
        const uint32_t b0 = a + (u << 4), b1 = a + ((u ^ 1) << 4), b2 = a + ((u ^ 2) << 4),
                       b3 = a + ((u ^ 3) << 4);
        uint32_t lo[8], hi[8];
        const uint32_t ba[8] = {b0, b1, b0, b1, b2, b3, b2, b3};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint2 w = lds64(ba[j] + 128 * pi_off(j));
            lo[j] = w.x;
            hi[j] = w.y;
        }
        uint32_t x[8], y[8];
        tr4(lo[0], lo[1], lo[2], lo[3], x[0], x[1], x[2], x[3]);
        tr4(lo[4], lo[5], lo[6], lo[7], y[0], y[1], y[2], y[3]);
        tr4(hi[0], hi[1], hi[2], hi[3], x[4], x[5], x[6], x[7]);
        tr4(hi[4], hi[5], hi[6], hi[7], y[4], y[5], y[6], y[7]);
        const uint32_t d = dst + 1024 * dq;
#pragma unroll
        for (int i = 0; i < 8; i++) sts64(d + t.so[i], make_uint2(x[i], y[i]));
    }
}

// The three transposing warps' part (threads 32..127 of their block, lane
// constants computed once): staged V -> V^T stage rows 0..D-1.
struct v_transposer {
    tr_lane trl;
    int hw, l;
    __device__ __forceinline__ v_transposer(int tid, int lane)
        : trl(transpose_lane(lane & 15)), hw((tid - 32) >> 4), l(lane & 15)
    {
    }
    __device__ __forceinline__ void operator()(uint32_t src, uint32_t dst) const
    {
        transpose_v(src, dst, hw, l, trl);
    }
};

// Four floats -> four e4m3 bytes (first in the low byte), nearest-even,
// saturating to +-448.
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d)
{
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    return lo | (hi << 16);
}

template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t w);
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t w)
{
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 unpack2<__half>(uint32_t w)
{
    return __half22float2(*reinterpret_cast<const __half2 *>(&w));
}

// This thread's e4m3 A-fragments of Q (rows r0 and r0 + 8 of the tile) for
// every k32 step, and each row's quantization scale (real = q8 * qs): the
// engine's query scale where it gives one (use_q_scale: q8 = fp8(q * qinv),
// qinv the correctly rounded 1 / q_scale, saturating), else the row's
// |max| / 448. The query scale is read here, per item, so that it holds no
// register through the key loop.
template <int D, typename T, typename S>
__device__ __forceinline__ void load_q8(const S &s, const fa3_params &p, int r0, int t,
                                        uint32_t (&qa)[D / 32][4], float (&qs)[2])
{
    const float qscale = p.q_scale_t ? *p.q_scale_t : p.q_scale;
    const float qinv = qscale > 0.f ? __frcp_rn(qscale) : 1.f;
    uint2 raw[D / 32][4];
    float amax[2] = {0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++)
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int r = r0 + (g & 1) * 8, col = 32 * kk + (g >> 1) * 16 + 4 * t;
            raw[kk][g] = lds64(smem_addr(&s.q[col / 64][0][0]) + sw128(r, (col % 64) * 2));
            const float2 x = unpack2<T>(raw[kk][g].x), y = unpack2<T>(raw[kk][g].y);
            amax[g & 1] = fmaxf(
                amax[g & 1], fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(y.x), fabsf(y.y))));
        }
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float a = quad_max(amax[i]);
        qs[i] = qscale > 0.f ? qscale : a > 0.f ? a * (1.f / 448.f) : 1.f;
        inv[i] = qscale > 0.f ? qinv : a > 0.f ? 448.f / a : 1.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++)
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const float f = inv[g & 1];
            const float2 x = unpack2<T>(raw[kk][g].x), y = unpack2<T>(raw[kk][g].y);
            qa[kk][g] = e4m3x4(x.x * f, x.y * f, y.x * f, y.y * f);
        }
}

template <int N> struct mma8;
#define FA3_MMA8(N) \
    template <> struct mma8<N> { \
        static __device__ __forceinline__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], \
                                                  uint64_t b, int s) \
        { \
            ah_wgmma_rs_e4m3_n##N(d, a, b, s); \
        } \
    };
FA3_MMA8(128)
#undef FA3_MMA8

// S(64 x BN) = Q8 K8^T: A (Q) from registers, B (K, K-major) from the ring.
template <int D, int BN, typename S>
__device__ __forceinline__ void gemm_qk8(S &s, int st, const uint32_t (&qa)[D / 32][4],
                                         float (&sacc)[BN / 2])
{
    // One descriptor per GEMM; each k32 step moves the start address by 32
    // bytes = 2 units of the descriptor's 16-byte address field (no carry:
    // shared addresses stay below 2^18), so the issue loop is one add per
    // wgmma instead of a mask-and-shift chain.
    const uint64_t d0 = desc_sw128(smem_addr(&s.k[st][0][0]), 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 32; kk++) mma8<BN>::rs(sacc, qa[kk], d0 + 2 * kk, kk > 0);
}

// O(64 x (D + 8)) += P8 [V | 1 | 0]: A (P) from registers, B (V^T plus the
// constant rows, K-major) from the ring. Column D of the result is the row
// sum of P as rounded to e4m3 (thread t = 0 of each quad holds it in
// o[D / 2] and o[D / 2 + 2]; the other columns past D are zero).
template <int D, int BN, typename S>
__device__ __forceinline__ void gemm_pv8(S &s, int st, const uint32_t (&pa)[BN / 32][4],
                                         float (&o)[D / 2 + 4])
{
    static_assert(D == 128, "PV with the row-sum columns is m64n136");
    static_assert(BN == 128, "a V^T stage is one 128-byte swizzle row per channel");
    const uint32_t a = smem_addr(&s.vt[st][0][0]);
    const uint64_t d0 = desc_sw128(a, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++) ah_wgmma_rs_e4m3_n136(o, pa[kk], d0 + 2 * kk, 1);
}

// O and its row-sum columns times the per-row factors alpha.
template <int D>
__device__ __forceinline__ void rescale8(float (&o)[D / 2 + 4], const float (&alpha)[2])
{
#pragma unroll
    for (int j = 0; j < D / 8 + 1; j++) {
        o[j * 4 + 0] *= alpha[0];
        o[j * 4 + 1] *= alpha[0];
        o[j * 4 + 2] *= alpha[1];
        o[j * 4 + 3] *= alpha[1];
    }
}

// P (accumulator layout) -> e4m3 A-fragments, in the position order pi.
template <int BN>
__device__ __forceinline__ void to_operand8(const float (&p)[BN / 2], uint32_t (&pa)[BN / 32][4])
{
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++) {
        const int j = 4 * kk;
#pragma unroll
        for (int h = 0; h < 2; h++) { // k 0-15 from column groups j, j+1; k 16-31 from j+2, j+3
            const int a = j + 2 * h, b = a + 1;
            pa[kk][2 * h] = e4m3x4(p[a * 4 + 0], p[a * 4 + 1], p[b * 4 + 0], p[b * 4 + 1]);
            pa[kk][2 * h + 1] = e4m3x4(p[a * 4 + 2], p[a * 4 + 3], p[b * 4 + 2], p[b * 4 + 3]);
        }
    }
}

// 2^x without the MUFU: x = j + f with j = rint(x) (the 1.5 * 2^23 add
// leaves j in the low mantissa bits of t), 2^f on [-0.5, 0.5] by a degree-2
// polynomial (relative error 1.7e-3, 36x below e4m3's half step, so P's
// rounding to e4m3 barely changes), and j added to the exponent field
// (t << 23 is j << 23 mod 2^32). x is clamped at -127, where the result
// is 0; P never exceeds 2^8. Five FMA-pipe and two ALU instructions.
__device__ __forceinline__ float exp2_fma(float x)
{
    x = fmaxf(x, -127.f);
    const float t = __fadd_rn(x, 12582912.f);
    const float f = __fsub_rn(x, __fsub_rn(t, 12582912.f));
    const float q = fmaf(fmaf(2.384257325e-01f, f, 7.034428692e-01f), f, 1.000442967e+00f);
    return __int_as_float(__float_as_int(q) + (__float_as_int(t) << 23));
}

// Tiles that need masking, as two bounds per item: tile n needs it iff
// n >= top or n <= bot (tile_needs_mask's conditions, each monotone in n),
// so the loop tests two integers instead of re-deriving the conditions.
__device__ __forceinline__ void mask_bounds(const fa3_params &p, const fa3_work &it, int BN,
                                            int &top, int &bot)
{
    top = it.kv_hi / BN;                // reaches past kv_hi
    bot = (it.kv_lo + BN - 1) / BN - 1; // starts before kv_lo
    if (p.cross) return;
    const int pmin = it.pos0, pmax = it.pos0 + it.q_ntok - 1;
    if (p.causal) {
        top = min(top, (pmin + 1) / BN); // some key after the first query
        if (p.window && pmax - p.window >= 0) bot = max(bot, (pmax - p.window) / BN);
    } else if (p.window) {
        top = min(top, (pmin + p.window) / BN);
        if (pmax - p.window >= 0) bot = max(bot, (pmax - p.window) / BN);
    }
}

// Online softmax with a per-row exponent factor c[i]; probabilities carry
// the factor 256 (exp2 offset +8), see the header. No row sums: PV's extra
// column accumulates them (gemm_pv8), and rescale8 scales them with O.
// EMU of the BN / 8 column groups (spread evenly) take exp2_fma instead of MUFU.EX2: the
// MUFU goes through the MIO queue that the V transpose's shared-memory
// traffic also fills, and it is the longest part of the softmax.
template <int BN, int EMU>
__device__ __forceinline__ void online_softmax8(float (&sacc)[BN / 2], float (&m)[2],
                                                float (&alpha)[2], const float (&c)[2])
{
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float mx = m[i];
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
            mx = fmaxf(mx, fmaxf(sacc[j * 4 + i * 2], sacc[j * 4 + i * 2 + 1]));
        mx = quad_max(mx);
        const float mu = mx == -INFINITY ? 0.f : mx * c[i];
        alpha[i] = exp2f(m[i] * c[i] - mu);
        m[i] = mx;
        const float off = 8.f - mu;
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float x = fmaf(sacc[j * 4 + i * 2 + e], c[i], off);
                sacc[j * 4 + i * 2 + e] =
                    ((j + 1) * EMU / (BN / 8) > j * EMU / (BN / 8)) ? exp2_fma(x) : exp2f(x);
            }
    }
}

// One instance per use, with 128-key tiles (fp8c_smem::BN):
//   - decode (OS false): output stored straight from registers, STAGES K /
//     V^T stages, every item transposes its own V; it reads each tile's
//     page numbers a tile ahead (AHEAD, produce: 13-14% faster than at
//     each copy). The shared V^T paths are not compiled in: the
//     transposers and the producer pace this instance, and with those paths
//     present (never taken) it ran 4-6% slower.
//   - prefill (OS true): output staged in shared memory for bulk stores
//     (one K / V^T stage fewer), the shared V^T paths (VT, vt_source), page
//     numbers read at each copy (reading them ahead cost ~2% here).
// EMU: column groups whose exp2 runs on the FMA pipe (online_softmax8).
// The two consumer warpgroups take turns issuing their GEMMs (named-barrier
// ping-pong). The LSE comes from the e4m3-rounded row sums that PV produces
// (one e4m3 step of error in rows dominated by a few keys; fp32 sums of the
// unrounded P cost 5-9%).
template <int D, int STAGES, int SST, typename T, int EMU, bool OS = false>
__global__ void __launch_bounds__(384, 1)
    fwd_fp8c_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                    const __grid_constant__ CUtensorMap tv, const fa3_params p)
{
    constexpr bool VT = OS, AHEAD = !OS;
    extern __shared__ uint8_t smem_raw[];
    using Smem = fp8c_smem<D, STAGES, SST, T, OS>;
    constexpr int BN = Smem::BN;
    // Register split (setmaxnreg). The pool is what the launch allocated,
    // 384 x 168, not 65536: what the consumers add, the producer warpgroup
    // must give up ((224 - 168) x 256 = (168 - 56) x 128), or the increase
    // never completes.
    constexpr int kRegsConsumer = 224;
    constexpr int kRegsProducer = 56;
    // Named barrier 5 (1 and 2: the ping-pong): the three transposing warps'
    // V^T stage written.
    constexpr int kBarTranspose = kBarPingPong + 4;
    Smem &s = *reinterpret_cast<Smem *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                        ~uintptr_t(1023));
    const int tid = threadIdx.x, wg = tid / 128, lane = tid & 31;

    if (tid == 0) {
        mbar_init(&s.q_full, 1);
        mbar_init(&s.q_empty, consumer_warps<D>);
        for (int i = 0; i < STAGES; i++) {
            mbar_init(&s.k_full[i], 1);
            mbar_init(&s.v_full[i], 1); // the bulk copy, or the transposers' last thread
            mbar_init(&s.k_empty[i], consumer_warps<D>);
            // The consumer warps, and whoever filled the stage: the copying
            // producer at once, a publisher once its store has read it.
            mbar_init(&s.v_empty[i], consumer_warps<D> + 1);
        }
        for (int i = 0; i < SST; i++) {
            mbar_init(&s.v8_full[i], 1);
            mbar_init(&s.v8_empty[i], 1);
        }
        mbar_fence_init();
    }
    // The constant rows of every V^T stage (see fp8c_smem): e4m3 1.0 is
    // 0x38. The transposers and the bulk copies write rows 0..D-1 only, so
    // this lasts.
    for (int i = tid; i < STAGES * 8 * BN / 4; i += blockDim.x) {
        const int st = i / (8 * BN / 4), r = i / (BN / 4) % 8, c = i % (BN / 4);
        reinterpret_cast<uint32_t *>(&s.vt[st][D + r][0])[c] = r == 0 ? 0x38383838u : 0u;
    }
    fence_proxy_async(); // generic stores, read by wgmma (async proxy)
    __syncthreads();
    // this CTA's items (the host's list scheduling, fa3_order.h)
    const int w0 = p.counts->cta_work[blockIdx.x], n_mine = p.counts->cta_work[blockIdx.x + 1] - w0;

    if (wg == 0) {
        // 56 registers: the transposing warps hold a whole 8x8-byte block
        // pair (32 words) plus addresses; the consumers keep 224.
        regs_dealloc<kRegsProducer>();
        if (tid >= 32) {
            // Warps 1-3: staged V -> V^T ring stage.
            const v_transposer transpose(tid, lane);
            int pi = 0, qi = 0; // qi: staging slots
            for (int i = 0; i < n_mine; i++) {
                const fa3_work it = p.work[w0 + i];
                const int n_lo = tile_lo<BN>(it), n_hi = tile_hi<BN>(it);
                const int src = vt_source<VT>(p, it);
                if (n_hi <= n_lo) continue;
                int copied = n_hi; // tiles n >= copied: the producer copies their V^T
                if (src == kVtShared) {
                    // The producer's first slot of the item says which.
                    const int si = qi % SST;
                    mbar_wait(&s.v8_full[si], (qi / SST) & 1);
                    copied = __reduce_min_sync(0xffffffffu,
                                               (int)lds32(smem_addr(&s.v8_copied[si]))); // uniform
                    named_sync(kBarTranspose, 96); // all three have read it
                    if (tid == 32) mbar_arrive(&s.v8_empty[si]);
                    qi++;
                }
                // One loop per role, so that a publisher's state (its slab
                // addresses, the store bookkeeping) does not take the
                // registers of the common loop's hoisted lane constants:
                // with it live there, ptxas recomputed them per tile and the
                // FP8 decode, which the transposers pace, lost 4-6%.
                auto tiles = [&](auto publish) {
                    for (int n = n_hi - 1; n >= n_lo; n--, pi++) {
                        if (n >= copied) continue;
                        const int st = pi % STAGES, si = qi % SST;
                        mbar_wait(&s.v8_full[si], (qi / SST) & 1);
                        mbar_wait(&s.v_empty[st], ((pi / STAGES) & 1) ^ 1);
                        transpose(smem_addr(&s.v8[si][0][0]), smem_addr(&s.vt[st][0][0]));
                        // Generic-proxy stores, then wgmma (and a publisher's
                        // bulk store, async proxy) read them; all three warps'
                        // stores before the one arrival.
                        fence_proxy_async();
                        named_sync(kBarTranspose, 96);
                        if (tid == 32) {
                            mbar_arrive(&s.v8_empty[si]);
                            if constexpr (!decltype(publish)::value) {
                                mbar_arrive(&s.v_full[st]);
                                mbar_arrive(&s.v_empty[st]);
                            } else {
                                // The image out, then the stage to the
                                // consumers. The stage is freed for its next
                                // fill once the store has read it: tile n +
                                // 1's now, tile n's a tile later (or at the
                                // item's end).
                                bulk_store(vt_slab<D>(p, it, n), smem_addr(&s.vt[st][0][0]),
                                           D * FA3_VT_KEYS);
                                bulk_commit();
                                mbar_arrive(&s.v_full[st]);
                                if (n + 1 < n_hi) {
                                    bulk_wait_read<1>();
                                    mbar_arrive(&s.v_empty[(pi - 1) % STAGES]);
                                }
                                // Every kVtEvery tiles the flag follows: the
                                // images down to tile n + 1 are written once
                                // at most one store (tile n's) is pending.
                                if (n > n_lo && (n + 1) % kVtEvery == 0 && n + 1 < n_hi) {
                                    bulk_wait<1>();
                                    vt_publish(p, it, n + 1);
                                }
                            }
                        }
                        qi++;
                    }
                };
                if (src != kVtPublish) {
                    tiles(std::false_type{});
                } else {
                    tiles(std::true_type{});
                    if (tid == 32) {
                        bulk_wait<0>(); // every image written and read
                        mbar_arrive(&s.v_empty[(pi - 1) % STAGES]);
                        vt_publish(p, it, n_lo);
                    }
                }
            }
            return;
        }
        int qi = 0, copied = 0; // qi: staging slots, as the transposers count them
        produce<D, BN, T, AHEAD>(
            s, &tq, &tk, &tv, p, w0, n_mine, lane, [&](const fa3_work &it, int n, int pi, int pg) {
                const int st = pi % STAGES;
                const bool first = n == tile_hi<BN>(it) - 1; // the item's first tile: its V source
                const int src = first ? vt_source<VT>(p, it) : kVtTranspose;
                uint64_t flag = 0;
                if (src == kVtShared && lane == 0) flag = ld_relaxed_gpu(vt_flag(p, it));
                mbar_wait(&s.k_empty[st], ((pi / STAGES) & 1) ^ 1);
                load_kv_tile<BN, 1, D, 0, AHEAD>(&s.k[st][0][0], &tk, &s.k_full[st], BN * D, p, it,
                                                 n, lane, pg);
                if (first) {
                    const int n_lo = tile_lo<BN>(it);
                    copied = n + 1;
                    if (src ==
                        kVtShared) { // what is out; the transposers learn it from a slot without V
                        copied = max(vt_published(p, flag, lane), n_lo);
                        const int si = qi % SST;
                        mbar_wait(&s.v8_empty[si], ((qi / SST) & 1) ^ 1);
                        if (lane == 0) {
                            s.v8_copied[si] = copied; // published by the arrival
                            mbar_arrive(&s.v8_full[si]);
                        }
                        qi++;
                    }
                }
                if (n >= copied) {
                    mbar_wait(&s.v_empty[st], ((pi / STAGES) & 1) ^ 1);
                    if (lane == 0) {
                        mbar_arrive_tx(&s.v_full[st], D * FA3_VT_KEYS);
                        bulk_load(&s.vt[st][0][0], vt_slab<D>(p, it, n), D * FA3_VT_KEYS,
                                  &s.v_full[st]);
                        mbar_arrive(&s.v_empty[st]); // the filler's part (see the barriers' setup)
                    }
                    return;
                }
                const int si = qi % SST;
                mbar_wait(&s.v8_empty[si], ((qi / SST) & 1) ^ 1);
                load_kv_tile<BN, 1, D, 0, AHEAD>(&s.v8[si][0][0], &tv, &s.v8_full[si], BN * D, p,
                                                 it, n, lane, pg);
                qi++;
            });
        return;
    }

    regs_alloc<kRegsConsumer>();
    const int cw = wg - 1, warp = (tid % 128) / 32;
    const int bar_self = kBarPingPong + cw, bar_other = kBarPingPong + (1 - cw);
    if (cw == 1) named_arrive(kBarPingPong, 256); // warpgroup 0 issues first
    uint32_t stage = 0; // this warp's output staging, if any (see out_stage)
    if constexpr (OS) stage = smem_addr(&s.o.rows[cw * 4 + warp][0][0]);
    int pi = 0, iter = 0;
    for (; iter < n_mine; iter++) {
        const fa3_work it = p.work[w0 + iter];
        const int rl0 = cw * 64 + warp * 16 + lane / 4;
        const row_info ri = item_rows(p, it, rl0);
        // Q: quantize this thread's fragments, then hand the tile back.
        uint32_t qa[D / 32][4];
        float qs[2];
        mbar_wait(&s.q_full, iter & 1);
        load_q8<D, T, Smem>(s, p, rl0, lane & 3, qa, qs);
        __syncwarp();
        if (lane == 0) mbar_arrive(&s.q_empty);

        const bool prepass = needs_prepass(p);
        const float ks = scales_of(p, it.kvh).k; // V's: at the epilogue
        float expc[2];
        row_factors rf;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            expc[i] = exp_factor(p, prepass, qs[i] * ks);
            rf.f[i] = prepass_factor(p, qs[i] * ks);
        }
        // O with the row-sum columns (gemm_pv8): o[D / 2 + 2i] of quad lane 0
        // is row i's sum of P.
        float o[D / 2 + 4];
#pragma unroll
        for (int i = 0; i < D / 2 + 4; i++) o[i] = 0.f;
        float m[2] = {-INFINITY, -INFINITY}, alpha[2] = {1.f, 1.f};
        float sacc[BN / 2];
        // P double-buffered: PV of tile j reads one buffer while the softmax
        // of tile j + 1 fills the other, so nothing waits for PV until the
        // next tile's GEMM issue (see the loop below).
        uint32_t pa0[BN / 32][4], pa1[BN / 32][4];

        // Pipeline per 128-key tile j (this warpgroup), steady state:
        //   [ping-pong turn] issue QK^T(j+1); wait<1> retires PV(j-1);
        //   rescale O by alpha(j); issue PV(j); [pass the turn];
        //   wait<1> retires QK^T(j+1); softmax(j+1) -> P(j+1) in the other
        //   buffer, while PV(j) runs.
        // The only waits sit right after a GEMM issue, which ptxas cannot
        // hoist above the softmax that frees the registers the issue
        // overwrites (sacc), so PV(j) overlaps the whole softmax of j + 1.
        // pi: ring index of the tile whose P is pending; had_pv: a PV of
        // this item is in flight (its stage is pi - 1).
        int mtop, mbot;
        mask_bounds(p, it, BN, mtop, mbot);
        bool had_pv = false;
        auto release_prev_v = [&]() {
            if (had_pv && lane == 0) mbar_arrive(&s.v_empty[(pi - 1) % STAGES]);
        };
        auto rescale_if_moved = [&]() {
            // Once the row maxima settle most tiles leave every alpha at 1:
            // skip the multiplies (a warp-uniform test).
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale8<D>(o, alpha);
        };
        auto softmax_tile = [&](int n, auto &pnext) {
            score_prep<BN>(
                sacc, p, ri, n, prepass, [&] { return rf; }, n >= mtop || n <= mbot, lane);
            online_softmax8<BN, EMU>(sacc, m, alpha, expc);
            to_operand8<BN>(sacc, pnext);
        };
        // With the previous PV done: free its V stage, rescale O if the
        // maximum moved, issue PV(pi) of pcur and hand the GEMM turn over.
        auto issue_pv = [&](int pst, auto &pcur) {
            reg_fence(o);
            release_prev_v();
            rescale_if_moved();
            reg_fence(o);
            reg_fence(pcur);
            wgmma_fence();
            gemm_pv8<D, BN, Smem>(s, pst, pcur, o);
            wgmma_commit();
            named_arrive(bar_other, 256);
        };
        // QK^T(n) while PV(pi) of pcur runs; P(n) lands in pnext.
        auto step = [&](int n, auto &pcur, auto &pnext) {
            const int cur = pi + 1;
            const int st = cur % STAGES, pst = pi % STAGES;
            mbar_wait(&s.k_full[st], (cur / STAGES) & 1);
            mbar_wait(&s.v_full[pst], (pi / STAGES) & 1);
            named_sync(bar_self, 256);
            reg_fence(sacc);
            wgmma_fence();
            gemm_qk8<D, BN, Smem>(s, st, qa, sacc);
            wgmma_commit();
            wgmma_wait<1>(); // PV(pi - 1), issued a whole softmax ago
            issue_pv(pst, pcur);
            wgmma_wait<1>(); // QK^T(n); PV(pi) stays in flight
            reg_fence(sacc);
            if (lane == 0) mbar_arrive(&s.k_empty[st]);
            softmax_tile(n, pnext);
            had_pv = true;
            pi = cur;
        };
        // PV of the item's last tile.
        auto tail = [&](auto &pcur) {
            const int pst = pi % STAGES;
            mbar_wait(&s.v_full[pst], (pi / STAGES) & 1);
            named_sync(bar_self, 256);
            wgmma_wait<0>();
            issue_pv(pst, pcur);
            wgmma_wait<0>();
            reg_fence(o);
            if (lane == 0) mbar_arrive(&s.v_empty[pst]);
            pi++;
        };

        const int n_lo = tile_lo<BN>(it), n_hi = tile_hi<BN>(it);
        if (n_hi > n_lo) {
            int n = n_hi - 1;
            {
                const int st = pi % STAGES;
                mbar_wait(&s.k_full[st], (pi / STAGES) & 1);
                named_sync(bar_self, 256);
                reg_fence(qa);
                wgmma_fence();
                gemm_qk8<D, BN, Smem>(s, st, qa, sacc);
                wgmma_commit();
                named_arrive(bar_other, 256);
                wgmma_wait<0>();
                reg_fence(sacc);
                if (lane == 0) mbar_arrive(&s.k_empty[st]);
                softmax_tile(n, pa0);
            }
            // Two steps per trip keep the P buffers' roles compile-time.
            for (;;) {
                if (n == n_lo) {
                    tail(pa0);
                    break;
                }
                step(--n, pa0, pa1);
                if (n == n_lo) {
                    tail(pa1);
                    break;
                }
                step(--n, pa1, pa0);
            }
        }
        // Row maxima into the log2 domain, less the 8 of the P offset (l
        // and O carry the factor 256; the LSE and the sinks must not).
        float l[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            m[i] = m[i] == -INFINITY ? -INFINITY : m[i] * expc[i] - 8.f;
            l[i] = o[D / 2 + 2 * i]; // quad lane 0 only; the epilogue sums the quad
        }
        epilogue<D, T, OS>(p, it, ri, reinterpret_cast<float(&)[D / 2]>(o), m, l, rl0, lane,
                           scales_of(p, it.kvh).v, stage);
    }
    if (OS) bulk_wait(); // the last rows out before the block's shared memory goes
}

} // namespace fa3
