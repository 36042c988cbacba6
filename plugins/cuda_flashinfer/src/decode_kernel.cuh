/*
 * Decode kernel for absorbed MLA (qk 576 / v 512), and the launch dispatch
 * of every decode instantiation (qk == v head sizes go to the streaming
 * kernel in decode_stream.cuh).
 *
 * One CTA per (query token, block of GB query heads sharing a KV head, KV
 * partition; a KV head's last block padded past the group when GB does not
 * divide it, decode_heads.h). Written for the memory-bound case of one or a
 * few query tokens per request, where the whole cost is reading K and V once.
 *
 * Shape of the work: a "row group" of TX threads owns one key at a time;
 * each thread holds 8 channels of the key (16 bytes for 16-bit caches, 8 for
 * FP8) and of the GB queries, so the GB dot products of one key come from one
 * read of it (GQA/MQA grouping). The 128/TX row groups walk the partition's
 * keys with a stride, U keys per step with all their loads issued before any
 * use (2*U 16-byte loads in flight per thread), and keep independent online-
 * softmax states that are merged through shared memory at the end. The
 * partition is a contiguous key range: num_splits > 1 (split-KV) spreads a
 * long sequence over several CTAs when the batch alone cannot fill the GPU,
 * and a merge kernel combines the partial states by their LSE.
 *
 * Masks are ranges per query (visible_range), so no per-key test is needed
 * beyond the partition end. MLA (D != DV) reads V from the K registers.
 */
#ifndef FI_DECODE_KERNEL_CUH
#define FI_DECODE_KERNEL_CUH

#include "fi_common.cuh"
#include "fi_dispatch.cuh"

namespace fi {

template <typename QT, typename KT, int D, int DV, int GB> struct decode_cfg {
    static constexpr int EPT = 8;       /* channels per thread per chunk */
    static constexpr int NCH = D / EPT; /* chunks per K row */
    static constexpr int NCHV = DV / EPT;
    static constexpr int TX = NCH >= 32 ? 32 : NCH;
    static constexpr int CPT = (NCH + TX - 1) / TX; /* chunks per thread */
    static constexpr int THREADS = 128;
    static constexpr int ROWS = THREADS / TX;
    static constexpr int U = 4;
    static constexpr bool MLA = D != DV;
    static_assert((TX & (TX - 1)) == 0, "row group must be a power of two");
};

/* Eight KV channels at p as floats. */
template <typename KT> __device__ __forceinline__ void load8(const KT *p, uint4 &raw)
{
    if constexpr (elem<KT>::fp8) {
        uint2 h = __ldg(reinterpret_cast<const uint2 *>(p));
        raw = make_uint4(h.x, h.y, 0, 0);
    } else {
        raw = ldg16(p);
    }
}
template <typename KT> __device__ __forceinline__ void cvt8(const uint4 &raw, float *f)
{
    if constexpr (elem<KT>::fp8) {
        float tmp[16];
        cvt16<KT>(raw, tmp); /* only the first 8 are meaningful */
#pragma unroll
        for (int i = 0; i < 8; i++) f[i] = tmp[i];
    } else {
        cvt16<KT>(raw, f);
    }
}

} // namespace fi

#include "decode_mla_tc.cuh"
#include "decode_stream.cuh"
#include "decode_regs.cuh"

namespace fi {

/* CTAs per SM the registers are fitted for: 4 for FP8 caches at GB 2 (the
 * 128 registers ptxas chose unasked before head blocks could be padded;
 * without the bound it now picks 147-151, 3 CTAs per SM), else 0: no
 * bound, as before (an explicit 1 moves ptxas's choice too). */
template <typename KT, int GB> constexpr int decode_mla_minb()
{
    return elem<KT>::fp8 && GB == 2 ? 4 : 0;
}

template <typename QT, typename KT, int D, int DV, int GB>
__global__ void __launch_bounds__(128, decode_mla_minb<KT, GB>()) decode_kernel(const attn_params p)
{
    using C = decode_cfg<QT, KT, D, DV, GB>;
    __shared__ float sm_acc[C::ROWS][GB][DV];
    __shared__ float sm_m[C::ROWS][GB], sm_l[C::ROWS][GB];

    const decode_cta cta(p, GB); /* the launcher's grid is tokens-first */
    const int t = cta.t, split = cta.split, hk = cta.hk, h0 = cta.h0, nh = cta.nh;
    const int tx = threadIdx.x % C::TX, row = threadIdx.x / C::TX;

    const int r = p.plan.token_req[t], pos = p.plan.token_pos[t];
    const int32_t *pages = p.plan.kv_indices + p.plan.kv_indptr[r];
    const split_keys keys(p, pos, p.plan.seq_lens[r], split, 1);
    const int a = keys.a, b = keys.b;

    const KT *kc = static_cast<const KT *>(p.k_cache);
    const KT *vc = static_cast<const KT *>(p.v_cache);
    const QT *qbase = static_cast<const QT *>(p.q) + (int64_t)t * p.q_stride_t;

    /* The key dequantisation from the scale tensors folded into the query
     * (MLA's values take the key scale: v_scales = k_scales). */
    const kv_dequant dq = tensor_scales<KT>(p.var, hk);
    float q[GB][C::CPT * 8];
    float slope[GB];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        /* Heads from nh on are padding (decode_heads.h): they repeat the
         * last real head. */
        const int h = h0 + min(g, nh - 1);
        slope[g] = p.var.alibi ? p.var.slopes[h] : 0.f;
#pragma unroll
        for (int c = 0; c < C::CPT; c++) {
            const int ch = tx + c * C::TX;
            if (ch < C::NCH) {
                uint4 raw = ldg16(qbase + (int64_t)h * p.q_stride_h + ch * 8);
                cvt16<QT>(raw, &q[g][c * 8]);
                if constexpr (elem<KT>::fp8) {
#pragma unroll
                    for (int e = 0; e < 8; e++) q[g][c * 8 + e] *= dq.k;
                }
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) q[g][c * 8 + e] = 0.f;
            }
        }
    }

    float m[GB], l[GB], acc[GB][C::CPT * 8];
#pragma unroll
    for (int g = 0; g < GB; g++) {
        m[g] = -INFINITY;
        l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < C::CPT * 8; e++) acc[g][e] = 0.f;
    }

    /* The trip count is the same for every row group: two row groups share
     * a warp when TX < 32, and the shuffles below need all 32 lanes. */
    for (int jb = a; jb < b; jb += C::ROWS * C::U) {
        const int j0 = jb + row;
        uint4 kr[C::U][C::CPT], vr[C::MLA ? 1 : C::U][C::CPT];
        /* Issue every load of the step before using any. */
#pragma unroll
        for (int u = 0; u < C::U; u++) {
            const int j = j0 + u * C::ROWS;
            if (j < b) {
                const int64_t ko = kv_row(p.kg, pages, j, hk);
                const int64_t vo = C::MLA ? 0 : kv_row(p.vg, pages, j, hk);
#pragma unroll
                for (int c = 0; c < C::CPT; c++) {
                    const int ch = tx + c * C::TX;
                    if (ch < C::NCH) load8<KT>(kc + ko + ch * 8, kr[u][c]);
                    if constexpr (!C::MLA)
                        if (ch < C::NCHV) load8<KT>(vc + vo + ch * 8, vr[u][c]);
                }
            }
        }
        float s[C::U][GB];
#pragma unroll
        for (int u = 0; u < C::U; u++) {
            const int j = j0 + u * C::ROWS;
#pragma unroll
            for (int g = 0; g < GB; g++) s[u][g] = 0.f;
            if (j < b) {
#pragma unroll
                for (int c = 0; c < C::CPT; c++) {
                    const int ch = tx + c * C::TX;
                    if (ch < C::NCH) {
                        float kf[8];
                        cvt8<KT>(kr[u][c], kf);
#pragma unroll
                        for (int g = 0; g < GB; g++)
#pragma unroll
                            for (int e = 0; e < 8; e++) s[u][g] += q[g][c * 8 + e] * kf[e];
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < GB; g++) {
#pragma unroll
                for (int off = C::TX / 2; off > 0; off >>= 1)
                    s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
                s[u][g] = j < b ? logit2(p.var, s[u][g], slope[g], j, pos) : -INFINITY;
            }
        }
#pragma unroll
        for (int g = 0; g < GB; g++) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < C::U; u++) mx = fmaxf(mx, s[u][g]);
            if (mx == -INFINITY) continue;
            const float alpha = exp2f(m[g] - mx);
            m[g] = mx;
            l[g] *= alpha;
#pragma unroll
            for (int e = 0; e < C::CPT * 8; e++) acc[g][e] *= alpha;
#pragma unroll
            for (int u = 0; u < C::U; u++) {
                const float pu = exp2f(s[u][g] - mx);
                l[g] += pu;
                if (j0 + u * C::ROWS < b) {
#pragma unroll
                    for (int c = 0; c < C::CPT; c++) {
                        const int ch = tx + c * C::TX;
                        if (ch < C::NCHV) {
                            float vf[8];
                            if constexpr (C::MLA) cvt8<KT>(kr[u][c], vf);
                            else cvt8<KT>(vr[u][c], vf);
#pragma unroll
                            for (int e = 0; e < 8; e++) acc[g][c * 8 + e] += pu * vf[e];
                        }
                    }
                }
            }
        }
    }

    /* Merge the row groups' states. */
#pragma unroll
    for (int g = 0; g < GB; g++) {
#pragma unroll
        for (int c = 0; c < C::CPT; c++) {
            const int ch = tx + c * C::TX;
            if (ch < C::NCHV)
#pragma unroll
                for (int e = 0; e < 8; e++) sm_acc[row][g][ch * 8 + e] = acc[g][c * 8 + e];
        }
        if (tx == 0) {
            sm_m[row][g] = m[g];
            sm_l[row][g] = l[g];
        }
    }
    __syncthreads();

    merge_cta_states<QT, C::ROWS, GB, DV, C::THREADS>(p, &sm_acc[0][0][0], sm_m, sm_l, t, h0, split,
                                                      p.var.v_scale * dq.v);
}

/* Every decode kernel's launch: at state creation (occupancy set, outside
 * any capture) allow its dynamic shared memory (smem; 0 for kernels
 * without stages) and count its resident CTAs; otherwise launch it. */
template <typename Kern>
static cudaError_t occupancy_or_launch(Kern kern, int threads, int smem, const dim3 &grid,
                                       const attn_params &q, cudaStream_t st, int *occupancy)
{
    if (occupancy) {
        cudaError_t e =
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, kern, threads, smem);
    }
    kern<<<grid, threads, smem, st>>>(q);
    return cudaPeekAtLastError();
}

/* The register-load kernel with HPC head blocks per CTA (HPC divides the
 * grid's head blocks); the occupancy it reports counts head blocks, the
 * plan's unit of work. */
template <typename QT, int D, int GB, int HPC>
static cudaError_t regs_launch(dim3 grid, const attn_params &q, cudaStream_t st, int *occupancy)
{
    unsigned &blocks = q.head_fastest ? grid.x : grid.y;
    blocks /= HPC;
    const cudaError_t e =
        occupancy_or_launch(decode_regs_kernel<QT, D, GB, HPC>, regs_cfg<D, GB, HPC>::THREADS, 0,
                            grid, q, st, occupancy);
    if (occupancy) *occupancy *= HPC;
    return e;
}

/* The streaming kernel. */
template <typename QT, typename KT, int D, int GB>
static cudaError_t stream_launch(const dim3 &grid, const attn_params &q, cudaStream_t st,
                                 int *occupancy)
{
    using SC = stream_cfg<KT, D, GB>;
    return occupancy_or_launch(decode_stream_kernel<QT, KT, D, GB, tc_fits<QT, KT, D, GB>()>,
                               SC::THREADS, SC::SMEM, grid, q, st, occupancy);
}

/* Launch for one head size; instantiated per head size in decode_d*.cu.
 * stream: the streaming kernel in place of the register loads, where it is
 * their alternative (a 16-bit cache at d128; elsewhere an invalid value,
 * so the occupancy query reports none). */
template <int D, int DV>
cudaError_t decode_launch_hd(int q_dtype, int kv_dtype, int gb, int hpc, bool stream,
                             const attn_params &p, cudaStream_t st, int *occupancy)
{
    FI_DISPATCH_QTYPE(
        q_dtype, QT,
        {FI_DISPATCH_KVTYPE(
            kv_dtype, QT, KT, {FI_DISPATCH_GROUP_BLOCK(gb, GB, {
                constexpr bool has_alt = regs_fits<QT, KT, D, GB>() && tc_fits<QT, KT, D, GB>();
                if (stream && !has_alt) return cudaErrorInvalidValue;
                if constexpr (GB == 16) {
                    if constexpr (D == mla_tc_cfg::D && DV == mla_tc_cfg::DV &&
                                  std::is_same<QT, KT>::value) {
                        using MC = mla_tc_cfg;
                        const dim3 grid(p.num_tokens, head_blocks_per_kv(p.group, GB),
                                        p.num_splits);
                        return occupancy_or_launch(decode_mla_tc_kernel<QT>, MC::THREADS, MC::SMEM,
                                                   grid, p, st, occupancy);
                    } else {
                        FI_UNSUPPORTED("decode head-group block of 16 (MLA, 16-bit cache)", GB,
                                       "1, 2, 4, 8");
                    }
                } else if constexpr (D != DV && GB > 2) {
                    FI_UNSUPPORTED("MLA decode head-group block", GB, "1, 2");
                } else if constexpr (D == DV && GB * D > 1024) {
                    FI_UNSUPPORTED("decode head-group block at this head size", GB,
                                   "GB x D <= 1024");
                } else if constexpr (D == DV) {
                    /* Head blocks fastest in the grid: the CTAs running together
                     * read the same pages. Tokens go to grid y, so only up to
                     * its limit; beyond, the tokens-first grid. */
                    attn_params q = p;
                    const int hblocks = p.num_kv_heads * head_blocks_per_kv(p.group, GB);
                    q.head_fastest = p.num_tokens <= 65535;
                    const dim3 grid = q.head_fastest ? dim3(hblocks, p.num_tokens, p.num_splits)
                                                     : dim3(p.num_tokens, hblocks, p.num_splits);
                    if constexpr (has_alt)
                        if (stream) return stream_launch<QT, KT, D, GB>(grid, q, st, occupancy);
                    if constexpr (regs_fits<QT, KT, D, GB>()) {
                        /* Four or two head blocks per CTA where the plan
                         * asks for them (scheduler.h, where they fit): the
                         * CTA reads neighbouring heads of each slot together. */
                        if constexpr (regs_hpc_fits(D, GB, 4))
                            if (hpc == 4) return regs_launch<QT, D, GB, 4>(grid, q, st, occupancy);
                        if constexpr (regs_hpc_fits(D, GB, 2))
                            if (hpc == 2) return regs_launch<QT, D, GB, 2>(grid, q, st, occupancy);
                        return regs_launch<QT, D, GB, 1>(grid, q, st, occupancy);
                    } else {
                        return stream_launch<QT, KT, D, GB>(grid, q, st, occupancy);
                    }
                } else {
                    attn_params q = p;
                    q.head_fastest = 0;
                    const dim3 grid(p.num_tokens, p.num_kv_heads * head_blocks_per_kv(p.group, GB),
                                    p.num_splits);
                    return occupancy_or_launch(decode_kernel<QT, KT, D, DV, GB>, 128, 0, grid, q,
                                               st, occupancy);
                }
            })})})
    return cudaSuccess;
}

} // namespace fi

#endif
