/*
 * Hopper (sm_90a) decode for absorbed MLA (qk 576 / v 512, one latent KV
 * head) on an FP8 cache with 16 query heads or fewer (DeepSeek's at tensor
 * parallel 8 and up), one query token a CTA. decode_mla_sm90.cu computes 64
 * query rows a CTA, so at 16 heads three quarters of its tensor work is on
 * zero queries, and its producer widens every key into shared memory: there
 * an FP8 cache is bound by that work, not by the read. Here the keys are
 * the M side of both GEMMs and the 16 heads the N side, and the widening
 * happens in the consumers' registers:
 *   - S^T = K Q^T: wgmma m64n16k16, A a 64-key tile of the raw cache
 *     widened in registers (e4m3 and e5m2 are exact in fp16), B Q in
 *     shared memory (fp16, each head scaled into fp16's top binade, as
 *     decode_mla_sm90.cu does);
 *   - the softmax runs down the columns: each warp reduces its 16 keys'
 *     maxima with shuffles, the four warps meet in shared memory;
 *   - O^T = V^T P^T: A is V^T widened in registers, where byte permutes pair
 *     two keys of one channel; B is P in shared memory (16 heads x 64 keys,
 *     2 KiB); O^T is 512 channels x 16 heads, 64 floats a thread.
 * Both GEMMs' K dimension (channels for S^T, keys for O^T) is permuted so a
 * thread's operands are whole words of one row (mla_fp8_order.h, which
 * fi_host_test checks): S^T's thread t takes channels 16t + 4j.. of each
 * 64-channel chunk in k-step j, and Q is stored in the same order; O^T's
 * thread t takes keys t, t + 4, t + 8, t + 12 of each 16, and P is stored
 * in that order. O^T's rows are channels in the
 * order the words give them (a thread's four rows of a 128-channel group are
 * four consecutive channels), so each thread writes 4 channels of a head
 * at once.
 * Warpgroup 0 copies 64-key tiles of raw rows (576 bytes) by cp.async into
 * five stages, one page lookup per row, each row's 16-byte units XOR 2 on
 * every other row pair so both GEMMs' loads are free of bank conflicts.
 * Warpgroups 1 and 2 take alternate tiles, each with its own softmax state
 * and O^T, added together at the end.
 */
#include "fi_common.cuh"
#include "mla_fp8_order.h"
#include "wgmma_sm90.cuh"

namespace fi {

using ah_sm90::mbar_arrive;
using ah_sm90::mbar_wait;

namespace mla16 {
constexpr int D = 576, DV = 512, N = FI_MLA_KEYS_M_HEADS, BK = 64, NST = 5;
static_assert(N == 16, "the GEMMs are m64n16k16");
/* consumer warpgroups, threads; registers of the producer and each consumer
 * (multiples of 8 within the SM's 64 K) */
constexpr int NC = 2, THREADS = 128 * (NC + 1);
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = ((512 - PRODUCER_REGS) / NC) & ~7;
constexpr uint32_t QCHUNK = N * 128;             /* one 64-channel chunk of Q's 16 rows */
constexpr uint32_t QB = 0;                       /* Q: 9 chunks, 18 KiB */
constexpr uint32_t PB = QB + (D / 64) * QCHUNK;  /* P of each consumer: 16 rows x 128 B */
constexpr uint32_t MX = PB + NC * N * 128;       /* tile maxima [consumer][parity][warp][head] */
constexpr uint32_t QI = MX + NC * 2 * 4 * N * 4; /* the heads' inverse query scales */
constexpr uint32_t LS = QI + N * 4;              /* row sums at the end [consumer][warp][head] */
constexpr uint32_t MS = LS + NC * 4 * N * 4;     /* the other consumers' maxima at the end */
constexpr uint32_t K0 = (MS + (NC - 1) * N * 4 + 1023) & ~1023; /* stage s at K0 + s * TILE */
constexpr uint32_t TILE = BK * D;                               /* 36 KiB of raw rows */
constexpr size_t SMEM = K0 + NST * TILE + 1024;                 /* + slack to align the base */
static_assert(SMEM + 1024 <= 232448, "one CTA's shared memory on sm_90");
static_assert(128 * 64 * 4 <= TILE && NC - 1 <= NST, "an O^T a stage at the end");
/* Named barriers (0 is __syncthreads): a consumer's tile maxima and its P
 * (its 128 threads, + c), the end and the hand-over (every consumer). */
constexpr int BAR_MX = 1, BAR_P = BAR_MX + NC, BAR_END = BAR_P + NC;

__device__ __forceinline__ uint32_t lds4(uint32_t a)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void sts2(uint32_t a, uint16_t v)
{
    asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(a), "h"(v) : "memory");
}
} // namespace mla16

template <typename QT, typename KT>
__global__ void __launch_bounds__(mla16::THREADS, 1) decode_mla_fp8_sm90_kernel(const attn_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace mla16;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t sbase = (smem_addr(smem_raw) + 1023u) & ~1023u;
    unsigned char *sgen = smem_raw + (sbase - smem_addr(smem_raw)); /* sbase, generic */
    __shared__ __align__(8) uint64_t s_bar[2 * NST];                /* full, empty */
    const uint32_t bar0 = smem_addr(s_bar);
    auto full = [&](int s) { return bar0 + 8u * (uint32_t)s; };
    auto empty = [&](int s) { return bar0 + 8u * (uint32_t)(NST + s); };
    allow_dependent_launch(); /* the split merge may be scheduled now; it waits for us */

    const int t = blockIdx.x, split = blockIdx.z, nh = p.group;
    const int r = p.plan.token_req[t], pos = p.plan.token_pos[t];
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    const split_keys keys(p, pos, p.plan.seq_lens[r], split, BK);
    const int a = keys.a, b = keys.b, ntiles = keys.ntiles;
    auto stage = [&](int it) { return sbase + K0 + (uint32_t)(it % NST) * TILE; };

    const int tid = threadIdx.x, wg = warpgroup_index(), ct = tid % 128;
    const int warp = ct / 32, lane = tid % 32, g8 = lane / 4, t4 = lane % 4;
    if (tid == 0) mbar_ring_init(bar0, NST, 128, 4);
    float *qinv = reinterpret_cast<float *>(sgen + QI);
    if (wg > 0) {
        /* Q: head n = (tid - 128) / 16, its 16 threads; scaled by a power of
         * two into fp16's top binade, the channels in S^T's k order: unit
         * (chunk c, k-step j, half hf) of a head holds channels 64c + 16u +
         * 4j + 2hf, +1 for u = 0..3 */
        const int n = (tid - 128) / 16, sub = tid % 16;
        const QT *qrow = static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t +
                         (int64_t)(n < nh ? n : 0) * p.q_stride_h;
        const uint32_t *qw = reinterpret_cast<const uint32_t *>(qrow);
        float amax = 0.f;
        for (int w = sub; w < D / 2 && n < nh; w += 16) {
            const float2 v = unpack2(__ldg(qw + w), (QT *)nullptr);
            amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
        }
#pragma unroll
        for (int x = 8; x > 0; x /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, x));
        const int sh = f16_top_shift(amax);
        const float qs = ldexpf(1.f, sh);
        for (int u = sub; u < (D / 64) * 8; u += 16) {
            const int c = u / 8, j = (u % 8) / 2, hf = u % 2;
            uint32_t w4[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 v =
                    n < nh ? unpack2(__ldg(qw + mla8_q_channel(c, j, hf, k) / 2), (QT *)nullptr)
                           : make_float2(0.f, 0.f);
                w4[k] = pack2<half>(v.x * qs, v.y * qs);
            }
            sts16(sbase + QB + (uint32_t)c * QCHUNK + (uint32_t)n * 128u +
                      ((uint32_t)((2 * j + hf) ^ (n & 7)) << 4),
                  make_uint4(w4[0], w4[1], w4[2], w4[3]));
        }
        if (sub == 0) qinv[n] = ldexpf(1.f, -sh);
        fence_async_smem(); /* Q, to wgmma's proxy */
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer ---- Lane l copies units l % 4 + 4k (k < 9) of rows
         * 8 warp + l / 4 and 32 more: 64 bytes of each row per copy, so each
         * shared-memory address is a per-lane constant plus 64k. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        const int q = lane % 4, rr[2] = {warp * 8 + lane / 4, warp * 8 + lane / 4 + 32};
        auto row_offset = [&](int it, int row) -> int64_t {
            const int j = a + it * BK + row;
            return j < b ? kv_row_in(p.kg, __ldg(pages + (j >> p.kg.page_shift)), j, 0) : -1;
        };
        const unsigned char *kc = static_cast<const unsigned char *>(p.k_cache) + q * 16;
        uint32_t dst[2];
        int64_t off[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            dst[i] = (uint32_t)rr[i] * D + (((uint32_t)q ^ mla8_swizzle(rr[i])) << 4);
            off[i] = row_offset(0, rr[i]);
        }
        for (int it = 0; it < ntiles; it++) {
            const int s = it % NST;
            const int64_t next[2] = {row_offset(it + 1, rr[0]), row_offset(it + 1, rr[1])};
            if (it >= NST) mbar_wait(empty(s), (uint32_t)((it / NST - 1) & 1));
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const unsigned char *src = kc + (off[i] >= 0 ? off[i] : 0);
#pragma unroll
                for (int k = 0; k < D / 64; k++)
                    copy16(stage(it) + dst[i] + 64u * k, src + 64 * k, off[i] >= 0);
            }
            copies_arrive(full(s));
            off[0] = next[0], off[1] = next[1];
        }
        wait_all_copies(); /* none in flight when the warp exits */
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
    const int c = wg - 1; /* owns tiles c, c + NC, ... */
    const kv_dequant dq = tensor_scales<KT>(p.var, 0);
    const bool plain = !(p.var.softcap > 0.f) && !p.var.alibi;
    /* this thread's S^T columns (heads) 8nb + 2t4 + e, as [2nb + e] */
    int head[4];
    float qk[4], qk2[4], sl[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        head[i] = 8 * (i / 2) + 2 * t4 + i % 2;
        qk[i] = p.var.qk_scale * dq.k * qinv[head[i]];
        qk2[i] = qk[i] * FI_LOG2E;
        sl[i] = p.var.alibi && head[i] < nh ? p.var.slopes[head[i]] : 0.f;
    }
    float m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; i++) m[i] = -INFINITY, l[i] = 0.f;
    float o[8][8]; /* O^T: m64 block 2 grp + bb, accumulator layout */
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) o[i][k] = 0.f;

    const uint64_t qdesc = wgmma_desc(sbase + QB, 16, 1024);
    const uint32_t pbuf = sbase + PB + (uint32_t)c * (N * 128);
    const uint64_t pdesc = wgmma_desc(pbuf, 16, 1024);
    float *mx_pub = reinterpret_cast<float *>(sgen + MX) + c * (2 * 4 * N);
    /* S^T rows (keys) of this thread: 16 warp + g8 and + 8 */
    const int kr0 = 16 * warp + g8, kr1 = kr0 + 8;
    const uint32_t sa0 = (uint32_t)kr0 * D, sa1 = (uint32_t)kr1 * D;
    const uint32_t su0 = mla8_swizzle(kr0), su1 = mla8_swizzle(kr1);
    /* O^T: key rows 16 ks + mla8_v_key(t4, k) (their swizzle is t4's),
     * channels mla8_o_channel(grp, warp, g8) .. + 3 (unit 8 grp + vu, byte vb) */
    const uint32_t va = (uint32_t)t4 * D, vsw = mla8_swizzle(t4);
    const uint32_t vu = (uint32_t)(2 * warp + g8 / 4), vb = (uint32_t)(4 * (g8 % 4));

    for (int it = c; it < ntiles; it += NC) {
        const uint32_t st = stage(it);
        mbar_wait(full(it % NST), (uint32_t)((it / NST) & 1));
        /* S^T: 9 chunks of 4 k-steps, A widened from two 16-byte loads a
         * chunk; a chunk's registers are rewritten only after its wgmma
         * retired (two buffers, one group in flight) */
        float sc[8];
#pragma unroll
        for (int i = 0; i < 8; i++) sc[i] = 0.f;
        uint32_t sa[2][4][4];
        /* a chunk's words are loaded while the one before is widened */
        auto s_words = [&](int ch, uint4 &w0, uint4 &w1) {
            w0 = lds16(st + sa0 + (((uint32_t)mla8_s_unit(ch, t4) ^ su0) << 4));
            w1 = lds16(st + sa1 + (((uint32_t)mla8_s_unit(ch, t4) ^ su1) << 4));
        };
        uint4 w0, w1;
        s_words(0, w0, w1);
#pragma unroll
        for (int ch = 0; ch < D / 64; ch++) {
            const uint32_t r0[4] = {w0.x, w0.y, w0.z, w0.w}, r1[4] = {w1.x, w1.y, w1.z, w1.w};
            if (ch + 1 < D / 64) s_words(ch + 1, w0, w1);
            if (ch >= 2) wgmma_wait<1>();
            uint32_t(&A)[4][4] = sa[ch % 2];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint2 h0 = fp8x4_to_f16x2x2<KT>(r0[j]), h1 = fp8x4_to_f16x2x2<KT>(r1[j]);
                A[j][0] = h0.x, A[j][1] = h1.x, A[j][2] = h0.y, A[j][3] = h1.y;
            }
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < 4; j++)
                ah_wgmma_rk_f16_n16(sc, A[j],
                                    desc_plus(qdesc, (uint32_t)ch * QCHUNK + (uint32_t)j * 32u), 1);
            wgmma_commit();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 8; i++) reg_fence(sc[i]);

        /* logits; sc[4nb + 2h + e]: key kr0 + 8h, head 8nb + 2t4 + e */
        const int kb = a + it * BK;
        const bool masked = kb + BK > b;
        float mx[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            mx[i] = -INFINITY;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float &v = sc[4 * (i / 2) + 2 * h + i % 2];
                const int j = kb + kr0 + 8 * h;
                if (masked && j >= b) v = -INFINITY;
                else v = plain ? v * qk2[i] : logit2_at(p.var, qk[i], v, sl[i], j, pos);
                mx[i] = fmaxf(mx[i], v);
            }
#pragma unroll
            for (int x = 4; x < 32; x *= 2)
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], x));
        }
        float *mp = mx_pub + ((it / NC) & 1) * (4 * N);
        if (g8 == 0)
#pragma unroll
            for (int i = 0; i < 4; i++) mp[warp * N + head[i]] = mx[i];
        named_sync(BAR_MX + c, 128);
        float alpha[4], mu[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float tm = fmaxf(fmaxf(mp[head[i]], mp[N + head[i]]),
                                   fmaxf(mp[2 * N + head[i]], mp[3 * N + head[i]]));
            const float mn = fmaxf(m[i], tm);
            mu[i] = mn == -INFINITY ? 0.f : mn;
            alpha[i] = ex2(m[i] - mu[i]);
            m[i] = mn;
            l[i] *= alpha[i];
        }
        /* P into its B operand: row = head, column = the key's place in
         * O^T's k order (key t + 4e of each 8 at column 2t + e) */
        const int col0 = mla8_p_col(g8);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float &v = sc[4 * (i / 2) + 2 * h + i % 2];
                v = ex2(v - mu[i]);
                l[i] += v;
                const int col = 16 * warp + 8 * h + col0;
                const uint32_t byte = (uint32_t)col * 2u;
                sts2(pbuf + (uint32_t)head[i] * 128u +
                         ((((byte >> 4) ^ (uint32_t)(head[i] & 7)) << 4) | (byte & 15u)),
                     __half_as_ushort(__float2half_rn(v)));
            }
        fence_async_smem(); /* P, to wgmma's proxy */
        named_sync(BAR_P + c, 128);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) o[i][k] *= alpha[(k / 4) * 2 + k % 2];

        /* O^T: 4 k-steps of 16 keys; per 128-channel group 4 words (keys t4
         * + 4k), byte-permuted into key pairs, widened: two m64 blocks */
        uint32_t va2[2][4][2][4];
        /* a k-step's words are loaded while the one before is widened */
        auto v_words = [&](int ks, uint32_t(&w)[4][4]) {
#pragma unroll
            for (int g = 0; g < 4; g++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    w[g][k] = lds4(st + va + (uint32_t)(16 * ks + 4 * k) * D +
                                   (((uint32_t)(8 * g) + vu) ^ vsw) * 16u + vb);
        };
        uint32_t vw[2][4][4];
        v_words(0, vw[0]);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint32_t(&w)[4][4] = vw[ks % 2];
            if (ks + 1 < 4) v_words(ks + 1, vw[(ks + 1) % 2]);
            if (ks >= 2) wgmma_wait<1>();
            uint32_t(&A)[4][2][4] = va2[ks % 2];
#pragma unroll
            for (int g = 0; g < 4; g++) {
                const uint32_t x01a = __byte_perm(w[g][0], w[g][1], 0x5140),
                               x01b = __byte_perm(w[g][0], w[g][1], 0x7362),
                               x23a = __byte_perm(w[g][2], w[g][3], 0x5140),
                               x23b = __byte_perm(w[g][2], w[g][3], 0x7362);
                const uint2 a01 = fp8x4_to_f16x2x2<KT>(x01a), a23 = fp8x4_to_f16x2x2<KT>(x23a),
                            b01 = fp8x4_to_f16x2x2<KT>(x01b), b23 = fp8x4_to_f16x2x2<KT>(x23b);
                A[g][0][0] = a01.x, A[g][0][1] = a01.y, A[g][0][2] = a23.x, A[g][0][3] = a23.y;
                A[g][1][0] = b01.x, A[g][1][1] = b01.y, A[g][1][2] = b23.x, A[g][1][3] = b23.y;
            }
            if (ks == 3) { /* the stage's last read */
                __syncwarp();
                if (lane == 0) mbar_arrive(empty(it % NST));
            }
            wgmma_fence();
#pragma unroll
            for (int g = 0; g < 4; g++)
#pragma unroll
                for (int bb = 0; bb < 2; bb++)
                    ah_wgmma_rk_f16_n16(o[2 * g + bb], A[g][bb],
                                        desc_plus(pdesc, (uint32_t)ks * 32u), 1);
            wgmma_commit();
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int k = 0; k < 8; k++) reg_fence(o[i][k]);
    }

    /* The end: each head's row sum over this consumer's threads; the other
     * consumers hand their maxima, sums and O^T to consumer 0 through shared
     * memory (consumer c's O^T in stage c - 1, free once every tile is read). */
    float *lsum = reinterpret_cast<float *>(sgen + LS);
    float *mpub = reinterpret_cast<float *>(sgen + MS);
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int x = 4; x < 32; x *= 2) l[i] += __shfl_xor_sync(0xffffffffu, l[i], x);
        if (g8 == 0) lsum[(c * 4 + warp) * N + head[i]] = l[i];
        if (c > 0 && warp == 0 && g8 == 0) mpub[(c - 1) * N + head[i]] = m[i];
    }
    named_sync(BAR_END, 128 * NC); /* every tile read: the stages are free */
    auto xo = [&](int k) {
        return reinterpret_cast<float4 *>(sgen + K0 + (uint32_t)(k - 1) * TILE) + ct * 16;
    };
    if (c > 0) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            xo(c)[2 * i] = make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
            xo(c)[2 * i + 1] = make_float4(o[i][4], o[i][5], o[i][6], o[i][7]);
        }
        named_arrive(BAR_END + 1, 128 * NC);
        return;
    }
    named_sync(BAR_END + 1, 128 * NC);
    float f[NC][4], L[4], M[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int h = head[i];
        float mm = m[i];
#pragma unroll
        for (int k = 1; k < NC; k++) mm = fmaxf(mm, mpub[(k - 1) * N + h]);
        const float mz = mm == -INFINITY ? 0.f : mm;
        L[i] = 0.f;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            f[k][i] = ex2((k ? mpub[(k - 1) * N + h] : m[i]) - mz);
            float lk = 0.f;
#pragma unroll
            for (int w = 0; w < 4; w++) lk += lsum[(k * 4 + w) * N + h];
            L[i] += lk * f[k][i];
        }
        M[i] = mm;
    }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) o[i][k] *= f[0][(k / 4) * 2 + k % 2];
#pragma unroll
    for (int k = 1; k < NC; k++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 x0 = xo(k)[2 * i], x1 = xo(k)[2 * i + 1];
            const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int e = 0; e < 8; e++) o[i][e] += x[e] * f[k][(e / 4) * 2 + e % 2];
        }

    /* O^T row of block 2g + bb, half h: channel 128g + 32 warp + 4 g8 + 2bb
     * + h; so head i's channels 128g + 32 warp + 4 g8 .. + 3 are
     * o[2g][hk], o[2g][hk + 2], o[2g + 1][hk], o[2g + 1][hk + 2] with hk =
     * 4nb + e */
    const bool final_out = p.num_splits == 1 && !p.partial;
    const int cw = mla8_o_channel(0, warp, g8);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int h = head[i], hk = 4 * (i / 2) + i % 2;
        if (h >= nh) continue;
        if (final_out) {
            float f, lse2;
            finish_state(p.var, h, L[i], M[i], &f, &lse2);
            f *= p.var.v_scale * dq.v;
            QT *orow = static_cast<QT *>(p.o.out) + (int64_t)t * p.o.out_stride_t +
                       (int64_t)h * p.o.out_stride_h;
#pragma unroll
            for (int g = 0; g < 4; g++)
                *reinterpret_cast<uint2 *>(orow + 128 * g + cw) =
                    make_uint2(pack2<QT>(o[2 * g][hk] * f, o[2 * g][hk + 2] * f),
                               pack2<QT>(o[2 * g + 1][hk] * f, o[2 * g + 1][hk + 2] * f));
            if (warp == 0 && g8 == 0 && p.o.lse)
                p.o.lse[(int64_t)t * p.o.lse_stride_t + h] = lse2 * FI_LN2;
        } else {
            const int64_t slot = (int64_t)(p.o.part_slot + split) * p.num_tokens + t;
            const float f = L[i] > 0.f ? p.var.v_scale * dq.v / L[i] : 0.f;
            float *prow = p.o.part_o + (slot * p.num_qo_heads + h) * DV;
#pragma unroll
            for (int g = 0; g < 4; g++)
                *reinterpret_cast<float4 *>(prow + 128 * g + cw) =
                    make_float4(o[2 * g][hk] * f, o[2 * g][hk + 2] * f, o[2 * g + 1][hk] * f,
                                o[2 * g + 1][hk + 2] * f);
            if (warp == 0 && g8 == 0)
                p.o.part_lse[slot * p.num_qo_heads + h] =
                    L[i] > 0.f ? M[i] + log2f(L[i]) : -INFINITY;
        }
    }
#endif
}

template <typename QT, typename KT>
static cudaError_t launch_mla_fp8(const attn_params &p, cudaStream_t st, int *occupancy)
{
    auto kern = decode_mla_fp8_sm90_kernel<QT, KT>;
    constexpr size_t smem = mla16::SMEM;
    if (occupancy) {
        cudaError_t e =
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kern, mla16::THREADS, smem);
    }
    const dim3 grid((unsigned)p.num_tokens, 1, p.num_splits > 1 ? p.num_splits : 1);
    kern<<<grid, mla16::THREADS, smem, st>>>(p);
    return cudaPeekAtLastError();
}

/* occupancy != NULL: raise the shared-memory limit and report the resident
 * CTAs per SM; otherwise launch over (tokens, 1, splits). */
cudaError_t launch_decode_mla_fp8_sm90(int q_dtype, int kv_dtype, const attn_params &p,
                                       cudaStream_t st, int *occupancy)
{
    if (q_dtype == FI_BF16)
        return kv_dtype == FI_E4M3 ? launch_mla_fp8<__nv_bfloat16, e4m3>(p, st, occupancy)
                                   : launch_mla_fp8<__nv_bfloat16, e5m2>(p, st, occupancy);
    return kv_dtype == FI_E4M3 ? launch_mla_fp8<half, e4m3>(p, st, occupancy)
                               : launch_mla_fp8<half, e5m2>(p, st, occupancy);
}

} // namespace fi
