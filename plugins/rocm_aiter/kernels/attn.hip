/*
 * rocm_aiter's HIP kernels for CDNA (wave64, one wave per workgroup), built
 * without HIP headers or device libraries (-nogpuinc -nogpulib): clang
 * builtins only, so hipcc 5.2 (gfx90a) and clang-19 (gfx942) compile the
 * same source. The index logic is kernels/ra_layout.h's; the CPU model in
 * test/test_mfma_model.c runs these loops lane by lane.
 *
 *   ra_decode_<dt><kv>_d<D>    paged decode, one wave per (request, 16 query
 *                              heads of a KV head, 256-key partition); those
 *                              heads share each K/V read; S^T = K Q^T and
 *                              O^T += V^T P^T on v_mfma_f32_16x16x16
 *   ra_decode_<dt><kv>_mla     the same for absorbed MLA (qk 576, v 512, V
 *                              inside the key cache), which also serves MLA
 *                              prefill/extend a wave per query token
 *   ra_decode_reduce_<dt>_d<D> LSE merge of the partitions, sinks (_mla: 512)
 *   ra_prefill_<dt><kv>_d<D>   FA2-style prefill/extend over the paged cache
 *                              (causal or not: the causal flag),
 *                              one wave per (32 queries, head, request),
 *                              v_mfma_f32_32x32x8, online softmax, LSE
 *   ra_write_kv                new K/V into a 16-bit cache at slot_mapping
 *   ra_write_kv_<dt><kv>       the same into an FP8 cache: divided by the
 *                              scale, rounded to OCP FP8 (ra_f32_to_fp8)
 *   ra_merge_<dt>              merge_states (a part of LSE -inf is not read)
 * A decode request with seq_len 0 (AH_FEAT_EMPTY_KV) walks no key in either
 * attention kernel (ra_decode_keys, ra_prefill_keys): its block-table row
 * and the cache are never read, and its row ends as out 0, LSE -inf (the
 * sink's logit with a finite sink).
 * <dt>: bf16 (the _1k bf16 MFMAs) or fp16; D: 64, 128, 256; <kv>: empty for
 * a cache in the query's dtype, _e4m3 or _e5m2 for an OCP FP8 cache, whose
 * bytes the kernels decode exactly into the query's dtype
 * (ra_fp8_to_f32: no FP8 instruction, see ra_layout.h) before the same
 * 16-bit MFMAs. k_scale is folded into the logit scale, v_scale into the
 * output. The loops that read the cache, and the decode kernel's loops
 * over its Q and O fragments, are unrolled by pragma: the FP8 decode and
 * the MLA head sizes make them long enough that the unroller would stop
 * and leave the fragments in scratch; the prefill kernel's other loops are
 * left to the compiler, which unrolls them at fewer registers.
 */
typedef __INT64_TYPE__ int64_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT8_TYPE__ uint8_t;
#define expf __builtin_expf
#define logf __builtin_logf
#define fabsf __builtin_fabsf
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define RA_KERNEL \
    extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(64, 64)))
#define RA_DEV __attribute__((device)) static inline

#include "ra_layout.h"
#include "ra_params.h"

typedef short short4_t __attribute__((ext_vector_type(4)));
typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
typedef float float4_t __attribute__((ext_vector_type(4)));
typedef float float16_t __attribute__((ext_vector_type(16)));

RA_DEV int lane_id() { return (int)__builtin_amdgcn_workitem_id_x(); }

RA_DEV float shfl_xor(float v, int mask)
{
    const int src = (lane_id() ^ mask) << 2;
    return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src, __builtin_bit_cast(int, v)));
}

/* 16-bit element types: BF = 1 bf16, 0 fp16. */
template <int BF> struct elt;
template <> struct elt<1> {
    typedef short4_t v4;
    RA_DEV float to_f32(uint16_t b) { return ra_bf16_to_f32(b); }
    RA_DEV uint16_t from_f32(float f) { return ra_f32_to_bf16(f); }
    RA_DEV float4_t mfma16(v4 a, v4 b, float4_t c)
    {
        return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
    }
    RA_DEV float16_t mfma32(v4 a, v4 b, float16_t c)
    {
        return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
    }
};
template <> struct elt<0> {
    typedef half4_t v4;
    RA_DEV float to_f32(uint16_t b) { return (float)__builtin_bit_cast(_Float16, b); }
    RA_DEV uint16_t from_f32(float f) { return __builtin_bit_cast(uint16_t, (_Float16)f); }
    RA_DEV float4_t mfma16(v4 a, v4 b, float4_t c)
    {
        return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
    }
    RA_DEV float16_t mfma32(v4 a, v4 b, float16_t c)
    {
        return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
    }
};

/* KV-cache elements (RA_KV_*) as MFMA operands of the query's type BF:
 * raw is the stored element; load4 reads 4 consecutive ones (aligned:
 * D % 4 == 0), bits1 one, both as the query type's bits, 0 when !ok. */
template <int BF, int KV> struct kvload {
    typedef uint8_t raw; /* FP8 (OCP or fnuz), decoded exactly (ra_fp8_to_f32) */
    RA_DEV short cvt(uint32_t b) { return (short)elt<BF>::from_f32(ra_fp8_to_f32(b, KV)); }
    RA_DEV typename elt<BF>::v4 load4(const raw *p, bool ok)
    {
        const uint32_t w = ok ? *(const uint32_t *)p : 0u;
        short4_t s;
        s.x = cvt(w & 0xffu);
        s.y = cvt((w >> 8) & 0xffu);
        s.z = cvt((w >> 16) & 0xffu);
        s.w = cvt(w >> 24);
        return __builtin_bit_cast(typename elt<BF>::v4, s);
    }
    RA_DEV short bits1(const raw *p, int64_t off, bool ok) { return ok ? cvt(p[off]) : (short)0; }
};
template <int BF> struct kvload<BF, RA_KV_16> {
    typedef uint16_t raw; /* the query's type: a bit copy */
    RA_DEV typename elt<BF>::v4 load4(const raw *p, bool ok)
    {
        typedef typename elt<BF>::v4 v4;
        if (!ok) return v4{};
        return __builtin_bit_cast(v4, *(const short4_t *)p);
    }
    RA_DEV short bits1(const raw *p, int64_t off, bool ok) { return ok ? (short)p[off] : (short)0; }
};
/* Element d of 4 rows (V^T operands): row pointers a lane, so d is an
 * immediate offset rather than a scalar base per channel step. */
template <int BF, int KV>
RA_DEV typename elt<BF>::v4 gather4(const typename kvload<BF, KV>::raw *const row[4], int d,
                                    const bool ok[4])
{
    short4_t s;
    s.x = kvload<BF, KV>::bits1(row[0], d, ok[0]);
    s.y = kvload<BF, KV>::bits1(row[1], d, ok[1]);
    s.z = kvload<BF, KV>::bits1(row[2], d, ok[2]);
    s.w = kvload<BF, KV>::bits1(row[3], d, ok[3]);
    return __builtin_bit_cast(typename elt<BF>::v4, s);
}
/* 4 consecutive query elements (16-bit), or zeros. */
template <int BF> RA_DEV typename elt<BF>::v4 load4(const uint16_t *p, bool ok)
{
    return kvload<BF, RA_KV_16>::load4(p, ok);
}
template <int BF> RA_DEV typename elt<BF>::v4 pack_p(float a, float b, float c, float d)
{
    short4_t s;
    s.x = (short)elt<BF>::from_f32(a);
    s.y = (short)elt<BF>::from_f32(b);
    s.z = (short)elt<BF>::from_f32(c);
    s.w = (short)elt<BF>::from_f32(d);
    return __builtin_bit_cast(typename elt<BF>::v4, s);
}

/* ---- paged decode ---------------------------------------------------------- */

/* Decode-style waves, DQK/DV the qk/v head sizes (absorbed MLA: 576/512, V
 * the first DV channels of the key cache, v_cache == k_cache, so V rows
 * are DQK apart too). Workgroup (x, y, z) = (row, 16-head group of a KV
 * head, partition). Split mode: row = request, its last token, partials
 * of 256-key partition z for the reduce. token_rows: row = query token,
 * one wave over every key it sees, writing out and lse (MLA
 * prefill/extend, for which there is no prefill kernel). */
template <int BF, int KV, int DQK, int DV> RA_DEV void decode(const ra_attn_params &p)
{
    typedef typename elt<BF>::v4 v4;
    typedef typename kvload<BF, KV>::raw raw;
    const int lane = lane_id(), row = (int)__builtin_amdgcn_workgroup_id_x();
    const int y = (int)__builtin_amdgcn_workgroup_id_y(),
              part = p.token_rows ? -1 : (int)__builtin_amdgcn_workgroup_id_z();
    const int H = p.num_q_heads, G = H / p.num_kv_heads, ng = ra_head_groups(G);
    const int hk = y / ng, g0 = (y % ng) * RA_DEC_GROUP;
    const int r = p.token_rows ? ra_request_of(p.query_start_loc, p.num_reqs, row) : row;
    const int q0 = p.query_start_loc[r], q1 = p.query_start_loc[r + 1];
    if (q1 <= q0) return; /* a padded request */
    const int t = p.token_rows ? row : q1 - 1, seq = p.seq_lens[r];
    const int qp = seq - (q1 - q0) + (t - q0);
    int kstart, k1; /* empty past the request's end and for seq 0 */
    ra_row_keys(part, qp, seq, p.window, p.causal, &kstart, &k1);
    const int32_t *tab = p.block_table + (int64_t)r * p.table_stride;
    const uint16_t *Q = (const uint16_t *)p.q;
    const raw *K = (const raw *)p.k_cache, *V = (const raw *)p.v_cache;

    const int g_b = g0 + ra_m16_ab_mn(lane);
    v4 bq[DQK / 16];
#pragma unroll
    for (int dt = 0; dt < DQK / 16; dt++)
        bq[dt] = load4<BF>(Q + t * p.stride_q_t + (int64_t)(hk * G + g_b) * p.stride_q_h + dt * 16 +
                               ra_m16_ab_k(lane, 0),
                           g_b < G);
    /* the lane's C column: query head g of the KV head, and its ALiBi slope */
    const int g = g0 + ra_m16_c_n(lane);
    const float slope = p.alibi && g < G ? p.alibi[hk * G + g] : 0.0f;
    float4_t o[DV / 16];
#pragma unroll
    for (int dt = 0; dt < DV / 16; dt++) o[dt] = float4_t{};
    float m = -INFINITY, l = 0.0f;
    for (int kc = kstart; kc < k1; kc += RA_DEC_KEYS) {
        float4_t s = float4_t{};
        const int key_a = kc + ra_m16_ab_mn(lane);
        const bool ka = key_a < k1;
        /* one address a lane; the head's channels are immediate offsets */
        const raw *kp = K + (ka ? ra_kv_offset(tab, key_a, p.block_size, p.num_kv_heads, DQK, hk,
                                               ra_m16_ab_k(lane, 0), p.kv_hnd)
                                : 0);
#pragma unroll
        for (int dt = 0; dt < DQK / 16; dt++)
            s = elt<BF>::mfma16(kvload<BF, KV>::load4(kp + dt * 16, ka), bq[dt], s);
        float mx = -INFINITY;
        for (int it = 0; it < 4; it++) {
            const int key = kc + ra_m16_c_m(lane, it);
            s[it] = key < k1 && ra_visible(key, qp, seq, p.window, p.causal)
                        ? ra_logit(s[it], p.scale, p.softcap, slope, key, qp)
                        : -INFINITY;
            mx = mx > s[it] ? mx : s[it];
        }
        mx = __builtin_fmaxf(mx, shfl_xor(mx, 16));
        mx = __builtin_fmaxf(mx, shfl_xor(mx, 32));
        const float mn = m > mx ? m : mx, al = ra_rescale(m, mn);
        float pr[4], ps = 0.0f;
        for (int it = 0; it < 4; it++) {
            pr[it] = elt<BF>::to_f32(elt<BF>::from_f32(ra_exp_shift(s[it], mn)));
            ps += pr[it];
        }
        ps += shfl_xor(ps, 16);
        ps += shfl_xor(ps, 32);
        l = l * al + ps;
        m = mn;
        const v4 pb = pack_p<BF>(pr[0], pr[1], pr[2], pr[3]);
        const raw *vp[4];
        bool ok[4];
        for (int it = 0; it < 4; it++) {
            const int key = kc + ra_m16_ab_k(lane, it);
            ok[it] = key < k1;
            vp[it] = V + (ok[it] ? ra_kv_offset(tab, key, p.block_size, p.num_kv_heads, DQK, hk,
                                                ra_m16_ab_mn(lane), p.kv_hnd)
                                 : 0);
        }
#pragma unroll
        for (int dt = 0; dt < DV / 16; dt++) {
            o[dt] *= al;
            o[dt] = elt<BF>::mfma16(gather4<BF, KV>(vp, dt * 16, ok), pb, o[dt]);
        }
    }
    if (g >= G) return;
    const int h = hk * G + g;
    if (p.token_rows) { /* the output itself, as the prefill kernel ends */
        ra_lse_acc acc;
        acc.m = m;
        acc.l = l;
        float os = 1.0f;
        if (p.use_sinks) ra_lse_add(&acc, p.sinks[h], 1.0f, &os);
        const float f = acc.l > 0.0f ? os / acc.l * (KV == RA_KV_16 ? 1.0f : p.v_scale) : 0.0f;
        uint16_t *O = (uint16_t *)p.out + (int64_t)t * p.stride_o_t + h * p.stride_o_h;
#pragma unroll
        for (int dt = 0; dt < DV / 16; dt++)
            for (int it = 0; it < 4; it++)
                O[dt * 16 + ra_m16_c_m(lane, it)] = elt<BF>::from_f32(o[dt][it] * f);
        if (p.lse && lane < 16) p.lse[(int64_t)t * H + h] = ra_lse_value(acc);
        return;
    }
    const int64_t prow = ((int64_t)r * H + h) * p.max_parts + part;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int dt = 0; dt < DV / 16; dt++)
        for (int it = 0; it < 4; it++)
            p.part_o[prow * DV + dt * 16 + ra_m16_c_m(lane, it)] = o[dt][it] * inv;
    if (lane < 16) {
        p.part_ml[prow * 2] = m;
        p.part_ml[prow * 2 + 1] = l;
    }
}

/* One wave per (query head, request): merge the partitions by LSE, then the sink. */
template <int BF, int D> RA_DEV void decode_reduce(const ra_attn_params &p)
{
    const int lane = lane_id(), h = (int)__builtin_amdgcn_workgroup_id_x(),
              r = (int)__builtin_amdgcn_workgroup_id_y();
    const int q0 = p.query_start_loc[r], q1 = p.query_start_loc[r + 1];
    if (q1 <= q0) return;
    const int np = ra_num_partitions(p.seq_lens[r]), t = q1 - 1;
    const int64_t row0 = ((int64_t)r * p.num_q_heads + h) * p.max_parts;
    ra_lse_acc acc = ra_lse_init();
    float o[D / 64];
    for (int i = 0; i < D / 64; i++) o[i] = 0.0f;
    for (int part = 0; part < np; part++) {
        float os;
        const float w =
            ra_lse_add(&acc, p.part_ml[(row0 + part) * 2], p.part_ml[(row0 + part) * 2 + 1], &os);
        for (int i = 0; i < D / 64; i++)
            o[i] = o[i] * os + w * p.part_o[(row0 + part) * D + i * 64 + lane];
    }
    if (p.use_sinks) {
        float os;
        ra_lse_add(&acc, p.sinks[h], 1.0f, &os);
        for (int i = 0; i < D / 64; i++) o[i] *= os;
    }
    const float inv = acc.l > 0.0f ? 1.0f / acc.l : 0.0f;
    uint16_t *O = (uint16_t *)p.out + t * p.stride_o_t + h * p.stride_o_h;
    for (int i = 0; i < D / 64; i++) O[i * 64 + lane] = elt<BF>::from_f32(o[i] * inv * p.v_scale);
    if (p.lse && lane == 0) p.lse[(int64_t)t * p.num_q_heads + h] = ra_lse_value(acc);
}

/* ---- prefill / extend ------------------------------------------------------- */

template <int BF, int KV, int D> RA_DEV void prefill(const ra_attn_params &p)
{
    typedef typename elt<BF>::v4 v4;
    typedef typename kvload<BF, KV>::raw raw;
    const int lane = lane_id(), qtile = (int)__builtin_amdgcn_workgroup_id_x();
    const int h = (int)__builtin_amdgcn_workgroup_id_y(),
              r = (int)__builtin_amdgcn_workgroup_id_z();
    const int t0 = p.query_start_loc[r], ql = p.query_start_loc[r + 1] - t0, seq = p.seq_lens[r];
    const int q0 = qtile * RA_PRE_QUERIES;
    if (q0 >= ql) return;
    const int hk = h / (p.num_q_heads / p.num_kv_heads);
    int kstart, kend; /* empty for seq 0 */
    ra_prefill_keys(q0, ql, seq, p.window, p.causal, &kstart, &kend);
    const float slope = p.alibi ? p.alibi[h] : 0.0f;
    const int32_t *tab = p.block_table + (int64_t)r * p.table_stride;
    const uint16_t *Q = (const uint16_t *)p.q;
    const raw *K = (const raw *)p.k_cache, *V = (const raw *)p.v_cache;

    const int qi_b = q0 + ra_m32_ab_mn(lane);
    v4 bq[D / 8];
    for (int dt = 0; dt < D / 8; dt++)
        bq[dt] = load4<BF>(Q + (int64_t)(t0 + (qi_b < ql ? qi_b : 0)) * p.stride_q_t +
                               h * p.stride_q_h + dt * 8 + ra_m32_ab_k(lane, 0),
                           qi_b < ql);
    float16_t o[D / 32];
    for (int dt = 0; dt < D / 32; dt++) o[dt] = float16_t{};
    float m = -INFINITY, l = 0.0f;
    const int qp = seq - ql + q0 + ra_m32_c_n(lane);
    for (int kc = kstart; kc < kend; kc += RA_PRE_KEYS) {
        float16_t s = float16_t{};
        const int key_a = kc + ra_m32_ab_mn(lane);
        const bool ka = key_a < kend;
        const raw *kp = K + (ka ? ra_kv_offset(tab, key_a, p.block_size, p.num_kv_heads, D, hk,
                                               ra_m32_ab_k(lane, 0), p.kv_hnd)
                                : 0);
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++)
            s = elt<BF>::mfma32(kvload<BF, KV>::load4(kp + dt * 8, ka), bq[dt], s);
        float mx = -INFINITY;
        for (int it = 0; it < 16; it++) {
            const int key = kc + ra_m32_c_m(lane, it);
            s[it] = key < kend && ra_visible(key, qp, seq, p.window, p.causal)
                        ? ra_logit(s[it], p.scale, p.softcap, slope, key, qp)
                        : -INFINITY;
            mx = mx > s[it] ? mx : s[it];
        }
        mx = __builtin_fmaxf(mx, shfl_xor(mx, 32));
        const float mn = m > mx ? m : mx, al = ra_rescale(m, mn);
        float ps = 0.0f;
        for (int it = 0; it < 16; it++) {
            s[it] = elt<BF>::to_f32(elt<BF>::from_f32(ra_exp_shift(s[it], mn)));
            ps += s[it];
        }
        ps += shfl_xor(ps, 32);
        l = l * al + ps;
        m = mn;
        for (int dt = 0; dt < D / 32; dt++) o[dt] *= al;
        /* 8 keys per MFMA: C items 4kk..4kk+3 are P^T's B operand */
        for (int kk = 0; kk < 4; kk++) {
            const v4 pb = pack_p<BF>(s[4 * kk], s[4 * kk + 1], s[4 * kk + 2], s[4 * kk + 3]);
            const raw *vp[4];
            bool ok[4];
            for (int it = 0; it < 4; it++) {
                const int key = kc + 8 * kk + ra_m32_ab_k(lane, it);
                ok[it] = key < kend;
                vp[it] = V + (ok[it] ? ra_kv_offset(tab, key, p.block_size, p.num_kv_heads, D, hk,
                                                    ra_m32_ab_mn(lane), p.kv_hnd)
                                     : 0);
            }
#pragma unroll
            for (int dt = 0; dt < D / 32; dt++)
                o[dt] = elt<BF>::mfma32(gather4<BF, KV>(vp, dt * 32, ok), pb, o[dt]);
        }
    }
    const int qi = q0 + ra_m32_c_n(lane);
    if (qi >= ql) return;
    ra_lse_acc acc;
    acc.m = m;
    acc.l = l;
    float os = 1.0f;
    if (p.use_sinks) ra_lse_add(&acc, p.sinks[h], 1.0f, &os);
    const float f = acc.l > 0.0f ? os / acc.l * (KV == RA_KV_16 ? 1.0f : p.v_scale) : 0.0f;
    uint16_t *O = (uint16_t *)p.out + (int64_t)(t0 + qi) * p.stride_o_t + h * p.stride_o_h;
    for (int dt = 0; dt < D / 32; dt++)
        for (int it = 0; it < 16; it++)
            O[dt * 32 + ra_m32_c_m(lane, it)] = elt<BF>::from_f32(o[dt][it] * f);
    if (p.lse && lane < 32) p.lse[(int64_t)(t0 + qi) * p.num_q_heads + h] = ra_lse_value(acc);
}

/* ---- KV write and merge_states ----------------------------------------------- */

/* One wave per token: a bit copy (the cache has the query's 16-bit dtype).
 * value NULL: absorbed MLA, whose cache holds the keys alone. */
RA_KERNEL void ra_write_kv(ra_kv_params p)
{
    const int t = (int)__builtin_amdgcn_workgroup_id_x(), lane = lane_id();
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) return;
    const uint16_t *k = (const uint16_t *)p.key, *v = (const uint16_t *)p.value;
    uint16_t *kc = (uint16_t *)p.k_cache, *vc = (uint16_t *)p.v_cache;
    for (int i = lane; i < p.num_kv_heads * p.head_size; i += 64) {
        const int h = i / p.head_size, d = i % p.head_size;
        const int64_t dst =
            ra_slot_offset(slot, p.block_size, p.num_kv_heads, p.head_size, h, d, p.kv_hnd);
        kc[dst] = k[t * p.stride_k_t + h * p.stride_k_h + d];
        if (v) vc[dst] = v[t * p.stride_v_t + h * p.stride_v_h + d];
    }
}

/* One wave per token into an FP8 cache: real / scale (a correctly rounded
 * float division, as the oracle's writer does it), rounded to the cache's
 * FP8 format (ra_f32_to_fp8). */
template <int BF, int KV> RA_DEV void write_kv_fp8(const ra_kv_params &p)
{
    const int t = (int)__builtin_amdgcn_workgroup_id_x(), lane = lane_id();
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) return;
    const uint16_t *k = (const uint16_t *)p.key, *v = (const uint16_t *)p.value;
    uint8_t *kc = (uint8_t *)p.k_cache, *vc = (uint8_t *)p.v_cache;
    for (int i = lane; i < p.num_kv_heads * p.head_size; i += 64) {
        const int h = i / p.head_size, d = i % p.head_size;
        const int64_t dst =
            ra_slot_offset(slot, p.block_size, p.num_kv_heads, p.head_size, h, d, p.kv_hnd);
        const float kx = elt<BF>::to_f32(k[t * p.stride_k_t + h * p.stride_k_h + d]);
        kc[dst] = (uint8_t)ra_f32_to_fp8(kx / p.k_scale, KV);
        if (!v) continue;
        const float vx = elt<BF>::to_f32(v[t * p.stride_v_t + h * p.stride_v_h + d]);
        vc[dst] = (uint8_t)ra_f32_to_fp8(vx / p.v_scale, KV);
    }
}

template <int BF> RA_DEV void merge(const ra_merge_params &p)
{
    const int row = (int)__builtin_amdgcn_workgroup_id_x(), lane = lane_id();
    float wa, wb;
    const float lse = ra_merge2(p.lse_a[row], p.lse_b[row], &wa, &wb);
    const uint16_t *a = (const uint16_t *)p.v_a + (int64_t)row * p.head_size;
    const uint16_t *b = (const uint16_t *)p.v_b + (int64_t)row * p.head_size;
    uint16_t *o = (uint16_t *)p.out + (int64_t)row * p.head_size;
    for (int d = lane; d < p.head_size; d += 64)
        o[d] =
            elt<BF>::from_f32(RA_MERGE_VALUE(wa, elt<BF>::to_f32(a[d]), wb, elt<BF>::to_f32(b[d])));
    if (p.lse_out && lane == 0) p.lse_out[row] = lse;
}

/* NAME: the query dtype and the cache's suffix; KV: RA_KV_*. */
#define RA_ATTN(NAME, BF, KV, D) \
    RA_KERNEL void ra_decode_##NAME##_d##D(ra_attn_params p) { decode<BF, KV, D, D>(p); } \
    RA_KERNEL void ra_prefill_##NAME##_d##D(ra_attn_params p) { prefill<BF, KV, D>(p); }
#define RA_DTYPE(DT, BF, D) \
    RA_ATTN(DT, BF, RA_KV_16, D) \
    RA_ATTN(DT##_e4m3, BF, RA_KV_E4M3, D) \
    RA_ATTN(DT##_e5m2, BF, RA_KV_E5M2, D) \
    RA_ATTN(DT##_e4m3fnuz, BF, RA_KV_E4M3_FNUZ, D) \
    RA_ATTN(DT##_e5m2fnuz, BF, RA_KV_E5M2_FNUZ, D) \
    RA_KERNEL void ra_decode_reduce_##DT##_d##D(ra_attn_params p) { decode_reduce<BF, D>(p); }
RA_DTYPE(bf16, 1, 64)
RA_DTYPE(bf16, 1, 128)
RA_DTYPE(bf16, 1, 256)
RA_DTYPE(fp16, 0, 64)
RA_DTYPE(fp16, 0, 128)
RA_DTYPE(fp16, 0, 256)
/* Absorbed MLA (qk 576, v 512, one KV head): decode and, with token_rows,
 * prefill/extend; the reduce of 512-channel partials. */
#define RA_MLA(NAME, BF, KV) \
    RA_KERNEL void ra_decode_##NAME##_mla(ra_attn_params p) { decode<BF, KV, 576, 512>(p); }
RA_MLA(bf16, 1, RA_KV_16)
RA_MLA(bf16_e4m3, 1, RA_KV_E4M3)
RA_MLA(bf16_e5m2, 1, RA_KV_E5M2)
RA_MLA(bf16_e4m3fnuz, 1, RA_KV_E4M3_FNUZ)
RA_MLA(bf16_e5m2fnuz, 1, RA_KV_E5M2_FNUZ)
RA_MLA(fp16, 0, RA_KV_16)
RA_MLA(fp16_e4m3, 0, RA_KV_E4M3)
RA_MLA(fp16_e5m2, 0, RA_KV_E5M2)
RA_MLA(fp16_e4m3fnuz, 0, RA_KV_E4M3_FNUZ)
RA_MLA(fp16_e5m2fnuz, 0, RA_KV_E5M2_FNUZ)
RA_KERNEL void ra_decode_reduce_bf16_mla(ra_attn_params p) { decode_reduce<1, 512>(p); }
RA_KERNEL void ra_decode_reduce_fp16_mla(ra_attn_params p) { decode_reduce<0, 512>(p); }
RA_KERNEL void ra_write_kv_bf16_e4m3(ra_kv_params p) { write_kv_fp8<1, RA_KV_E4M3>(p); }
RA_KERNEL void ra_write_kv_bf16_e5m2(ra_kv_params p) { write_kv_fp8<1, RA_KV_E5M2>(p); }
RA_KERNEL void ra_write_kv_fp16_e4m3(ra_kv_params p) { write_kv_fp8<0, RA_KV_E4M3>(p); }
RA_KERNEL void ra_write_kv_fp16_e5m2(ra_kv_params p) { write_kv_fp8<0, RA_KV_E5M2>(p); }
RA_KERNEL void ra_write_kv_bf16_e4m3fnuz(ra_kv_params p) { write_kv_fp8<1, RA_KV_E4M3_FNUZ>(p); }
RA_KERNEL void ra_write_kv_bf16_e5m2fnuz(ra_kv_params p) { write_kv_fp8<1, RA_KV_E5M2_FNUZ>(p); }
RA_KERNEL void ra_write_kv_fp16_e4m3fnuz(ra_kv_params p) { write_kv_fp8<0, RA_KV_E4M3_FNUZ>(p); }
RA_KERNEL void ra_write_kv_fp16_e5m2fnuz(ra_kv_params p) { write_kv_fp8<0, RA_KV_E5M2_FNUZ>(p); }
RA_KERNEL void ra_merge_bf16(ra_merge_params p) { merge<1>(p); }
RA_KERNEL void ra_merge_fp16(ra_merge_params p) { merge<0>(p); }
