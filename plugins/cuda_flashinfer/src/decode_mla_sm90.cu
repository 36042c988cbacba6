/*
 * Hopper (sm_90a) decode for absorbed MLA (qk 576 / v 512, one latent KV
 * head; a 16-bit cache of the query's type, or FP8) from 16 query heads on
 * (DeepSeek's 128 at tensor parallel 1, 16 at 8): one CTA of three
 * warpgroups per (query token, block of 64 heads, KV partition), so a key
 * read from memory serves 64 heads where decode_mla_tc.cuh's mma.sync rows
 * serve 16, and S = Q K^T is computed once per 64 heads by wgmma instead of
 * once per warp. A block with fewer real heads (16, or the last of 96)
 * fills its other rows with zero queries and stores nothing for them: the
 * padding costs tensor work, no extra key reads (a 16-bit cache's 16 heads
 * stay bound by the read; an FP8 cache's decode steps at 16 heads run
 * decode_mla_fp8_sm90.cu instead, whose keys are the M side).
 * Absorbed MLA has no prefill kernel: a prefill or extend token is a row of
 * this one. Where the group divides 64 (16 or 32 heads, no window), a CTA
 * serves a block of a request's consecutive tokens instead
 * (mla_token_block: row = token-in-block x group + head), so their 64 rows
 * are all real: the CTA reads the keys of the block's last token, and each
 * row masks the keys past its own position in the tiles the first token
 * does not see whole. The CTAs of the other tokens of a block exit at once.
 *   - Warpgroup 0 copies 32-key tiles of the latent cache (1152-byte rows)
 *     with cp.async into a four-stage ring, each 64-channel chunk 128-byte
 *     swizzled as wgmma reads it. A warp covers 8 rows, 8 lanes a row
 *     (whole 128-byte lines per copy), one page lookup per row and tile, a
 *     tile ahead. Each thread's copies arrive on the
 *     stage's "full" mbarrier as they land (cp.async.mbarrier.arrive), so
 *     every stage's copies can be in flight at once.
 *   - Warpgroups 1 and 2 take the tiles in turn: the owner of a tile
 *     computes its S (64 heads x 32 keys, 36 k-steps of m64n32k16, Q and K
 *     from shared memory), the row maxima (its own and, through shared
 *     memory, those after the other's last tile), and P, which it publishes
 *     with the new maxima. Each warpgroup computes O += P V for its 256 of
 *     the 512 V channels on every tile, its own P from registers and the
 *     other's from shared memory, two tiles at a time: O takes the two
 *     tiles' rescales in one pass and the earlier tile's P the later one's.
 *     So one warpgroup's softmax runs while the other's GEMMs keep the
 *     tensor cores busy. V is each key row's first 512 channels, read
 *     MN-major by the descriptor. Each keeps its own tiles' row sums, added
 *     together at the end.
 * Both consumers release a stage ("empty", one arrival per warp) once their
 * P V on it retired. Shared memory: Q 72 KiB + 4 x 36 KiB of keys + the P
 * exchange, one CTA per SM.
 *
 * An FP8 cache (576-byte rows) runs the MMAs in fp16, which holds every
 * e4m3 and e5m2 value exactly, as decode_stream.cuh's tc_math does:
 *   - the consumers load Q themselves, each row scaled by a power of two
 *     into fp16's top binade; a row's logits take the inverse back;
 *   - the producer's cp.async fills two staging tiles of raw bytes, two
 *     tiles ahead; each thread widens the units it copied into the stage
 *     (one cvt per two values), fences them to the async proxy and
 *     arrives on "full". The staging takes the fourth stage's room: three
 *     stages of keys.
 */
#include <type_traits>

#include "fi_common.cuh"
#include "wgmma_sm90.cuh"

namespace fi {

using ah_sm90::mbar_arrive;
using ah_sm90::mbar_wait;

namespace mla90 {
constexpr int D = 576, DV = 512, H = 64, BK = 32, THREADS = 384;
constexpr int CHUNKS = D / 64;              /* 64-channel chunks of a row: 9 */
constexpr int UNITS = D * 2 / 16;           /* 16-byte units of a 16-bit row: 72 */
constexpr uint32_t QCHUNK = H * 128;        /* bytes of one chunk of Q's 64 rows */
constexpr uint32_t KCHUNK = BK * 128;       /* bytes of one chunk of a tile's 32 rows */
constexpr uint32_t KTILE = CHUNKS * KCHUNK; /* one stage of keys: 36 KiB */
constexpr uint32_t K0 = CHUNKS * QCHUNK;    /* Q's 72 KiB, then stage s at K0 + s * KTILE */

/* The rest of shared memory: NST stages of keys; an FP8 cache's staging
 * tiles (rows as in memory); P published, 8 words per thread and
 * warpgroup; the row maxima published, 64 per warpgroup; the row sums at
 * the end (FP8: the rows' inverse query scales at the start). */
template <bool FP8> struct layout {
    static constexpr int NST = FP8 ? 3 : 4, NSG = FP8 ? 2 : 0;
    static constexpr uint32_t STILE = BK * D; /* one staging tile: 18 KiB */
    static constexpr uint32_t SG = K0 + NST * KTILE;
    static constexpr uint32_t PX = SG + NSG * STILE;
    static constexpr uint32_t MX = PX + 2 * 128 * 8 * 4;
    static constexpr uint32_t LX = MX + 2 * H * 4;
    static constexpr size_t SMEM = LX + 2 * H * 4 + 1024; /* + slack to align the base */
    /* with the barriers' static shared memory, padded to the dynamic part's
     * 1024-byte alignment: 232448 bytes, all a block may have on sm_90 */
    static_assert(SMEM + 1024 <= 232448, "one CTA's shared memory on sm_90");
};

/* Unit u of row r of a ROWS-row tile at base: chunk u / 8, 16-byte slot
 * u % 8 XOR r % 8 (the 128-byte swizzle; atoms of 8 rows x 128 B,
 * 1024-B aligned). */
template <int ROWS> __device__ __forceinline__ uint32_t unit_addr(uint32_t base, int r, int u)
{
    return base + (uint32_t)(u >> 3) * (ROWS * 128u) + (uint32_t)r * 128u +
           (uint32_t)(((u & 7) ^ (r & 7)) << 4);
}
/* Eight fp8 values (two words) widened to fp16: one 16-byte unit. */
template <typename KT> __device__ __forceinline__ uint4 widen8(uint32_t w0, uint32_t w1)
{
    const uint2 a = fp8x4_to_f16x2x2<KT>(w0), b = fp8x4_to_f16x2x2<KT>(w1);
    return make_uint4(a.x, a.y, b.x, b.y);
}
/* Named barriers (0 is __syncthreads): warpgroup w's tile published (1 + w,
 * its 128 threads arrive, the other's 128 wait), the row sums exchanged,
 * every consumer's Q copies. */
constexpr int BAR_PUB = 1, BAR_SUMS = 3, BAR_Q = 4;

/* P of one tile, packed as the A operand of its two k16 steps, scaled in
 * place: each row's values times its factor. */
template <typename QT>
__device__ __forceinline__ void scale_p(uint32_t (&pa)[BK / 16][4], const float (&f)[2])
{
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++)
#pragma unroll
        for (int j = 0; j < 4; j++) { /* words 0, 2: row r; 1, 3: row r + 8 */
            const float2 v = unpack2(pa[kk][j], (QT *)nullptr);
            pa[kk][j] = pack2<QT>(v.x * f[j & 1], v.y * f[j & 1]);
        }
}
} // namespace mla90

template <typename QT, typename KT>
__global__ void __launch_bounds__(384, 1) decode_mla_sm90_kernel(const attn_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace mla90;
    constexpr bool FP8 = elem<KT>::fp8;
    using L = layout<FP8>;
    constexpr int NST = L::NST;
    using MT = std::conditional_t<FP8, half, QT>; /* the MMAs' operand type */
    using S_MMA = ah_wgmma<MT, BK>;
    using O_MMA = ah_wgmma<MT, 256>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t sbase = (smem_addr(smem_raw) + 1023u) & ~1023u;
    __shared__ __align__(8) uint64_t s_bar[2 * NST]; /* full, empty */
    const uint32_t bar0 = smem_addr(s_bar);
    auto full = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto empty = [&](int s) { return bar0 + 8u * (uint32_t)(NST + s); };
    allow_dependent_launch(); /* the split merge may be scheduled now; it waits for us */

    const int hblocks = head_blocks_per_kv(p.group, H);
    const int h0 = ((int)blockIdx.x % hblocks) * H;
    const int split = blockIdx.z;
    /* a request's tokens from its last (mla_token_at) */
    const int nth = (int)blockIdx.x / hblocks, r = p.plan.token_req[nth];
    const int t = mla_token_at(nth, p.plan.qo_indptr[r], p.plan.qo_indptr[r + 1]);
    const int pos = p.plan.token_pos[t];
    /* Token blocks (mla_token_block, mla_cta): the CTA of a request's
     * query token i with i % tb == 0 serves it and the next tb - 1 (rows =
     * token-in-block x heads); the others' CTAs exit. tb 1: rows are heads
     * h0.. */
    const mla_cta cta(H, p.group, mla_token_block(H, p.group, p.var.window), h0, t,
                      p.plan.qo_indptr[r], p.plan.qo_indptr[r + 1]);
    if (!cta.ntok) return;
    const int ntok = cta.ntok, nh = cta.nh; /* rows nh.. are zero queries */
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    /* the keys of the block's last token, which sees the most */
    const split_keys keys(p, pos + ntok - 1, p.plan.seq_lens[r], split, BK);
    const int a = keys.a, b = keys.b, ntiles = keys.ntiles;
    /* keys a tile may show without a mask: those of the first token */
    const int bfirst = p.var.attn == FI_ATTN_CAUSAL ? min(b, pos + 1) : b;

    /* An FP8 cache's instances keep the index non-uniform: with it uniform
     * they took 1.02-1.04x the time (DECISIONS.md) */
    const int tid = threadIdx.x, wg = FP8 ? tid / 128 : warpgroup_index(), ct = tid % 128;
    const int warp = ct / 32, lane = tid % 32, g8 = lane / 4, t4 = lane % 4;
    if (tid == 0) mbar_ring_init(bar0, NST, 128, 8);
    const QT *qt = static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t;
    auto q_row = [&](int row) { /* a real row's query */
                                return qt + (int64_t)cta.tok(row) * p.q_stride_t +
                                       (int64_t)cta.head(h0, row) * p.q_stride_h;
    };
    if (wg > 0 && !FP8) { /* Q: 64 rows x 72 units, 18 per consumer thread */
        for (int i = tid - 128; i < H * UNITS; i += 256) {
            const int row = i / UNITS, u = i % UNITS;
            copy16(unit_addr<H>(sbase, row, u), row < nh ? q_row(row) + u * 8 : qt, row < nh);
        }
        commit();
    } else if (wg > 0) {
        /* Q in fp16: consumer warp w scales rows 8w.. by a power of two each
         * (units lane, lane + 32, lane + 64 of a row) and publishes the
         * inverse */
        float *qinv = reinterpret_cast<float *>(smem_raw + L::LX + (sbase - smem_addr(smem_raw)));
        for (int row = (tid - 128) / 32 * 8, r8 = 0; r8 < 8; r8++, row++) {
            float v[3][8];
            float amax = 0.f;
#pragma unroll
            for (int k = 0; k < 3; k++) {
                const int u = lane + 32 * k;
                const uint4 raw = row < nh && u < UNITS
                                      ? __ldg(reinterpret_cast<const uint4 *>(q_row(row) + u * 8))
                                      : make_uint4(0u, 0u, 0u, 0u);
                cvt16<QT>(raw, v[k]);
#pragma unroll
                for (int e = 0; e < 8; e++) amax = fmaxf(amax, fabsf(v[k][e]));
            }
#pragma unroll
            for (int x = 16; x > 0; x /= 2)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, x));
            const int sh = f16_top_shift(amax);
            const float qs = ldexpf(1.f, sh);
#pragma unroll
            for (int k = 0; k < 3; k++) {
                const int u = lane + 32 * k;
                if (u < UNITS)
                    sts16(unit_addr<H>(sbase, row, u),
                          make_uint4(pack2<half>(v[k][0] * qs, v[k][1] * qs),
                                     pack2<half>(v[k][2] * qs, v[k][3] * qs),
                                     pack2<half>(v[k][4] * qs, v[k][5] * qs),
                                     pack2<half>(v[k][6] * qs, v[k][7] * qs)));
            }
            if (lane == 0) qinv[row] = ldexpf(1.f, -sh);
        }
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        const int row0 = warp * (BK / 4); /* this warp's 8 rows of every tile */
        /* Row row0 + r of tile `it`: its element offset in the cache, or -1
         * past the range (those rows are zero: P V reads them). */
        auto row_offset = [&](int it, int r) -> int64_t {
            const int j = a + it * BK + row0 + r;
            return j < b ? kv_row_in(p.kg, __ldg(pages + (j >> p.kg.page_shift)), j, 0) : -1;
        };
        if constexpr (FP8) {
            /* Lane l copies and widens row row0 + l / 4's units l % 4 + 4k
             * (k < 9): 64 bytes of the row per k, so its shared-memory
             * addresses are constants plus k times a stride, and it waits
             * for its own copies only. The stage's unit 2u sits in chunk k
             * at slot 2 (l % 4) ^ row % 8, and unit 2u + 1 one slot over: a
             * quarter warp's two rows take complementary slots, no bank
             * conflicts. Tiles are copied two ahead. */
            const int rr = lane / 4, q = lane % 4, r = row0 + rr;
            const unsigned char *kc8 = static_cast<const unsigned char *>(p.k_cache) + q * 16;
            const uint32_t sg0 = sbase + L::SG + (uint32_t)r * D + (uint32_t)q * 16u;
            const uint32_t dst0 = (uint32_t)r * 128u + (uint32_t)(((2 * q) ^ (r & 7)) << 4);
            auto stage_copy = [&](int it, int64_t o) {
                if (it < ntiles) {
                    const uint32_t sg = sg0 + (uint32_t)(it % L::NSG) * L::STILE;
                    const unsigned char *src = kc8 + (o >= 0 ? o : 0);
#pragma unroll
                    for (int k = 0; k < 9; k++) copy16(sg + 64u * k, src + 64 * k, o >= 0);
                }
                commit(); /* one group per tile, empty past the last */
            };
            stage_copy(0, row_offset(0, rr));
            stage_copy(1, row_offset(1, rr));
            for (int it = 0; it < ntiles; it++) {
                const int s = it % NST;
                const int64_t next = row_offset(it + 2, rr);
                if (it >= NST) mbar_wait(empty(s), (uint32_t)((it / NST - 1) & 1));
                wait_copies<1>(); /* this tile's; the next one's may be in flight */
                const uint32_t sg = sg0 + (uint32_t)(it % L::NSG) * L::STILE;
                const uint32_t dst = sbase + K0 + (uint32_t)s * KTILE + dst0;
#pragma unroll
                for (int k = 0; k < 9; k++) {
                    const uint4 w = lds16(sg + 64u * k);
                    sts16(dst + k * KCHUNK, widen8<KT>(w.x, w.y));
                    sts16((dst + k * KCHUNK) ^ 16u, widen8<KT>(w.z, w.w));
                }
                fence_async_smem(); /* these writes, to wgmma's proxy */
                mbar_arrive(full(s));
                stage_copy(it + 2, next);
            }
        } else {
            /* Lane l copies unit l % 8 of each 64-channel chunk of rows
             * rr = l / 8 and rr + 4: a copy instruction reads four whole
             * 128-byte lines, its shared-memory address a per-lane constant
             * plus the chunk's stride (row0 is a multiple of 8, so a row's
             * swizzle slot is q ^ its rr); each lane looks up its two rows'
             * pages, no shuffles. */
            const int rr = lane >> 3, q = lane & 7;
            const QT *kq = static_cast<const QT *>(p.k_cache) + q * 8;
            const uint32_t dst0 = (uint32_t)(row0 + rr) * 128u + (uint32_t)((q ^ rr) << 4);
            const uint32_t dst1 =
                (uint32_t)(row0 + rr + 4) * 128u + (uint32_t)((q ^ (rr + 4)) << 4);
            int64_t off0 = row_offset(0, rr), off1 = row_offset(0, rr + 4);
            for (int it = 0; it < ntiles; it++) {
                const int s = it % NST;
                /* the next tile's page lookups are in flight while this one waits */
                const int64_t next0 = row_offset(it + 1, rr), next1 = row_offset(it + 1, rr + 4);
                if (it >= NST) mbar_wait(empty(s), (uint32_t)((it / NST - 1) & 1));
                const uint32_t st = sbase + K0 + (uint32_t)s * KTILE;
                const QT *src0 = kq + (off0 >= 0 ? off0 : 0), *src1 = kq + (off1 >= 0 ? off1 : 0);
#pragma unroll
                for (int k = 0; k < CHUNKS; k++) {
                    copy16(st + dst0 + (uint32_t)k * KCHUNK, src0 + 64 * k, off0 >= 0);
                    copy16(st + dst1 + (uint32_t)k * KCHUNK, src1 + 64 * k, off1 >= 0);
                }
                /* "full" counts this thread's arrival once its copies landed, so
                 * the next tiles' copies go out without waiting for these */
                copies_arrive(full(s));
                off0 = next0;
                off1 = next1;
            }
        }
        wait_all_copies(); /* none in flight when the warp exits */
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = wg - 1;            /* owns tiles c, c + 2, ...; O channels 256c.. */
    const int lrow = warp * 16 + g8; /* this thread's rows lrow and lrow + 8 */
    const uint32_t obase = sbase - smem_addr(smem_raw);
    /* what warpgroup w publishes: P in thread ct's slot (both warpgroups'
     * threads ct hold the same rows), the rows' new maxima */
    auto p_slot = [&](int w) {
        return reinterpret_cast<uint4 *>(smem_raw + L::PX + obase) + (w * 128 + ct) * 2;
    };
    auto m_pub = [&](int w) { return reinterpret_cast<float *>(smem_raw + L::MX + obase) + w * H; };
    float *l_pub = reinterpret_cast<float *>(smem_raw + L::LX + obase);
    wait_copies<0>(); /* this thread's Q copies */
    fence_async_smem();
    named_sync(BAR_Q, 256); /* every consumer's Q */
    /* A row's score scale: the softmax scale, the key dequantisation, and
     * (FP8) the inverse of the row's query scale */
    const kv_dequant dq = tensor_scales<KT>(p.var, 0);
    float qk[2] = {p.var.qk_scale * dq.k, p.var.qk_scale * dq.k};
    if constexpr (FP8) {
        qk[0] *= l_pub[lrow], qk[1] *= l_pub[lrow + 8];
        named_sync(BAR_Q, 256); /* read before the row sums take their place */
    }
    const float qk2[2] = {qk[0] * FI_LOG2E, qk[1] * FI_LOG2E}; /* logit2's when plain */

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.f;
    /* m: the row maxima after the last tile this warpgroup saw (its own or
     * received); l: its own tiles' row sums, under m */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl[2] = {p.var.alibi && lrow < nh ? p.var.slopes[cta.head(h0, lrow)] : 0.f,
                         p.var.alibi && lrow + 8 < nh ? p.var.slopes[cta.head(h0, lrow + 8)] : 0.f};
    /* each row's query position and its end of the keys (a token block's
     * rows see one key more per token) */
    const int rpos[2] = {pos + cta.tok(lrow), pos + cta.tok(lrow + 8)};
    const int rb[2] = {p.var.attn == FI_ATTN_CAUSAL ? min(b, rpos[0] + 1) : b,
                       p.var.attn == FI_ATTN_CAUSAL ? min(b, rpos[1] + 1) : b};
    const uint32_t vbase = (uint32_t)(c * 4) * KCHUNK; /* this warpgroup's 256 V channels */
    const uint64_t qdesc = wgmma_desc(sbase, 16, 1024);
    const bool plain = !(p.var.softcap > 0.f) && !p.var.alibi;
    auto stage = [&](int it) { return sbase + K0 + (uint32_t)(it % NST) * KTILE; };
    float sc[16];
    /* S of tile it into sc: issued and committed, not waited for */
    auto issue_s = [&](int it) {
        mbar_wait(full(it % NST), (uint32_t)((it / NST) & 1));
        fence_async_smem(); /* the producer's copies, seen through the barrier, to wgmma */
        const uint64_t kdesc = wgmma_desc(stage(it), 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kd = 0; kd < D / 16; kd++) {
            const uint32_t step = (uint32_t)(kd >> 2) * QCHUNK + (uint32_t)(kd & 3) * 32u;
            const uint32_t kstep = (uint32_t)(kd >> 2) * KCHUNK + (uint32_t)(kd & 3) * 32u;
            S_MMA::ss(sc, desc_plus(qdesc, step), desc_plus(kdesc, kstep), kd > 0 ? 1 : 0);
        }
        wgmma_commit();
    };
    /* The other warpgroup's tile: its new maxima (m moves to them; the
     * factor for what came before returned) and its P. */
    auto receive = [&](uint32_t(&pr)[BK / 16][4], float(&alpha)[2]) {
        named_sync(BAR_PUB + (1 - c), 256);
        const float *mp = m_pub(1 - c);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float mn = mp[lrow + 8 * i];
            alpha[i] = ex2(m[i] - (mn == -INFINITY ? 0.f : mn));
            m[i] = mn;
            l[i] *= alpha[i];
        }
        const uint4 *ps = p_slot(1 - c);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            const uint4 w = ps[kk];
            pr[kk][0] = w.x, pr[kk][1] = w.y, pr[kk][2] = w.z, pr[kk][3] = w.w;
        }
    };
    /* O += P V over one tile's two k16 steps, this warpgroup's channels */
    auto pv = [&](const uint32_t(&pk)[BK / 16][4], int it) {
        const uint64_t vdesc = wgmma_desc(stage(it) + vbase, KCHUNK, 1024);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            O_MMA::rs(o, pk[kk], desc_plus(vdesc, (uint32_t)kk * 2048u), 1);
    };
    auto release = [&](int it) {
        if (lane == 0) mbar_arrive(empty(it % NST));
    };

    /* The first S is waited for here: one in flight into the loop's first
     * pass makes ptxas serialize every wgmma (C7515). */
    if (c < ntiles) issue_s(c);
    wgmma_wait<0>();
    int it = c;
    for (; it < ntiles; it += 2) {
        /* the other's tile before this one, if any */
        uint32_t pr[BK / 16][4] = {}; /* the first tile's: zeros, so its P V adds nothing */
        float ar[2] = {1.f, 1.f};
        if (it > 0) receive(pr, ar);
        wgmma_wait<0>(); /* S of this tile */
#pragma unroll
        for (int i = 0; i < 16; i++) reg_fence(sc[i]);
        const int kb = a + it * BK;
        float mx[2];
        /* Scores (base-2 logits) and row maxima. Only a tile that runs past
         * the range masks; a layer without soft-cap or ALiBi scales by one
         * multiply (MASKED, PLAIN: std::bool_constant). */
        auto logits = [&](auto masked_t, auto plain_t) {
            constexpr bool MASKED = decltype(masked_t)::value, PLAIN = decltype(plain_t)::value;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = -INFINITY;
#pragma unroll
                for (int n = 0; n < BK / 8; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int j = kb + n * 8 + 2 * t4 + e;
                        float &v = sc[4 * n + 2 * i + e];
                        if (MASKED && j >= rb[i]) v = -INFINITY;
                        else v = PLAIN ? v * qk2[i] : logit2_at(p.var, qk[i], v, sl[i], j, rpos[i]);
                        mx[i] = fmaxf(mx[i], v);
                    }
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            }
        };
        using yes = std::true_type;
        using no = std::false_type;
        if (kb + BK <= bfirst) plain ? logits(no{}, yes{}) : logits(no{}, no{});
        else plain ? logits(yes{}, yes{}) : logits(yes{}, no{});
        float ao[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const float mn = fmaxf(m[i], mx[i]);
            const float mu = mn == -INFINITY ? 0.f : mn;
            ao[i] = ex2(m[i] - mu);
            m[i] = mn;
            float rs = 0.f;
#pragma unroll
            for (int n = 0; n < BK / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &v = sc[4 * n + 2 * i + e];
                    v = ex2(v - mu);
                    rs += v;
                }
            l[i] = l[i] * ao[i] + rs;
        }
        uint32_t po[BK / 16][4];
        acc_to_a<MT>(po, sc);
        /* publish P and the maxima; the other warpgroup reads them before it
         * publishes its next tile, and this one writes again only after */
        {
            uint4 *ps = p_slot(c);
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
                ps[kk] = make_uint4(po[kk][0], po[kk][1], po[kk][2], po[kk][3]);
            if (t4 == 0) m_pub(c)[lrow] = m[0], m_pub(c)[lrow + 8] = m[1];
        }
        named_arrive(BAR_PUB + c, 256);
        /* O (under the maxima before the received tile) takes both factors;
         * the received tile's P, under the maxima between, takes this one's */
        const float f[2] = {ar[0] * ao[0], ar[1] * ao[1]};
        scale_rows(o, f);
        scale_p<MT>(pr, ao);
        wgmma_fence(); /* both P V unconditional: a wgmma on a branch is serialized */
        pv(pr, it > 0 ? it - 1 : it);
        pv(po, it);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 128; i++) reg_fence(o[i]);
        if (it > 0) release(it - 1);
        release(it);
        if (it + 2 < ntiles) issue_s(it + 2);
    }
    wgmma_wait<0>(); /* none in flight (the last pass issued no S); says so to ptxas */
    /* the other's last tile, after this warpgroup's last (it - 1 is the
     * other's: it runs over this warpgroup's tiles) */
    if (it - 1 >= 0 && it - 1 < ntiles) {
        uint32_t pr[BK / 16][4];
        float ar[2];
        receive(pr, ar);
        scale_rows(o, ar);
        wgmma_fence();
        pv(pr, it - 1);
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 128; i++) reg_fence(o[i]);
        release(it - 1);
    }

    /* Row sums: each warpgroup's tiles, then both (both end under the
     * maxima after the last tile). */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    if (t4 == 0) l_pub[c * H + lrow] = l[0], l_pub[c * H + lrow + 8] = l[1];
    named_sync(BAR_SUMS, 256);
    l[0] += l_pub[(1 - c) * H + lrow];
    l[1] += l_pub[(1 - c) * H + lrow + 8];
    const bool final_out = p.num_splits == 1 && !p.partial;
    const int d0 = c * 256;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (lrow + 8 * i >= nh) continue;
        const int h = cta.head(h0, lrow + 8 * i), tok = t + cta.tok(lrow + 8 * i);
        const float M = m[i], L = l[i];
        if (final_out) {
            float f, lse2;
            finish_state(p.var, h, L, M, &f, &lse2);
            f *= p.var.v_scale * dq.v;
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)tok * p.o.out_stride_t +
                       (int64_t)h * p.o.out_stride_h + d0;
#pragma unroll
            for (int n = 0; n < 32; n++)
                *reinterpret_cast<uint32_t *>(orow + n * 8 + 2 * t4) =
                    pack2<QT>(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
            if (c == 0 && t4 == 0 && p.o.lse)
                p.o.lse[(int64_t)tok * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + split) * p.num_tokens + tok;
            const float f = L > 0.f ? p.var.v_scale * dq.v / L : 0.f;
            float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * DV + d0;
#pragma unroll
            for (int n = 0; n < 32; n++)
                *reinterpret_cast<float2 *>(prow + n * 8 + 2 * t4) =
                    make_float2(o[4 * n + 2 * i] * f, o[4 * n + 2 * i + 1] * f);
            if (c == 0 && t4 == 0)
                p.o.part_lse[slot * p.num_qo_heads + h] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
#endif
}

template <typename QT, typename KT>
static cudaError_t launch_mla(const attn_params &p, cudaStream_t st, int *occupancy)
{
    auto kern = decode_mla_sm90_kernel<QT, KT>;
    constexpr size_t smem = mla90::layout<elem<KT>::fp8>::SMEM;
    if (occupancy) {
        cudaError_t e =
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kern, mla90::THREADS, smem);
    }
    const dim3 grid((unsigned)(p.num_tokens * head_blocks_per_kv(p.group, mla90::H)), 1,
                    p.num_splits > 1 ? p.num_splits : 1);
    kern<<<grid, mla90::THREADS, smem, st>>>(p);
    return cudaPeekAtLastError();
}

template <typename QT>
static cudaError_t launch_mla_kv(int kv_dtype, const attn_params &p, cudaStream_t st, int *occ)
{
    if (kv_dtype == FI_E4M3) return launch_mla<QT, e4m3>(p, st, occ);
    if (kv_dtype == FI_E5M2) return launch_mla<QT, e5m2>(p, st, occ);
    return launch_mla<QT, QT>(p, st, occ);
}

/* occupancy != NULL: raise the shared-memory limit and report the resident
 * CTAs per SM (state creation); otherwise launch over (tokens x head
 * blocks, 1, splits), a token's head blocks side by side, so both read its
 * pages while they are in L2. */
cudaError_t launch_decode_mla_sm90(int q_dtype, int kv_dtype, const attn_params &p, cudaStream_t st,
                                   int *occupancy)
{
    /* The decode steps schedule_mla_keys_m gives decode_mla_fp8_sm90.cu;
     * at state creation (occupancy) its shared-memory limit is raised with
     * this kernel's and the fewer resident CTAs count. */
    if (!occupancy && schedule_mla_keys_m(kv_dtype, p.group, p.one_token_reqs))
        return launch_decode_mla_fp8_sm90(q_dtype, kv_dtype, p, st, nullptr);
    int own = 0, keys_m = 0;
    int *occ = occupancy ? &own : nullptr;
    cudaError_t e = q_dtype == FI_BF16 ? launch_mla_kv<__nv_bfloat16>(kv_dtype, p, st, occ)
                                       : launch_mla_kv<half>(kv_dtype, p, st, occ);
    if (!occupancy) return e;
    const bool keys_m_layer = schedule_mla_keys_m(kv_dtype, p.group, true);
    if (e == cudaSuccess && keys_m_layer)
        e = launch_decode_mla_fp8_sm90(q_dtype, kv_dtype, p, st, &keys_m);
    *occupancy = keys_m_layer && keys_m < own ? keys_m : own;
    return e;
}

} // namespace fi
