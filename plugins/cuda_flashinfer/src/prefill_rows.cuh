/*
 * Where a prefill CTA's rows come from, shared by the three prefill kernels
 * (prefill_kernel.cuh, prefill_fast.cuh, prefill_sm90.cu). Rows pack the GQA
 * group (row = token * group + head-in-group); a CTA covers BQ consecutive
 * rows of one request, found through the plan's work list (FI_TILE_ROWS rows
 * per plan tile, SUB = FI_TILE_ROWS / BQ CTAs each) or, in the cascade
 * prefix pass, of every token of the batch against request 0's first
 * prefix_len keys. Each row then sees one range of keys: its mask's range,
 * cut to this CTA's key chunk when keys are split over blockIdx.z.
 */
#ifndef FI_PREFILL_ROWS_CUH
#define FI_PREFILL_ROWS_CUH

#include "fi_common.cuh"

namespace fi {

/* Fields in the order the kernels once declared them as locals: it keeps
 * their PTX byte-identical (it sets the register numbering). */
struct cta_rows {
    int seq_len, tok0;    /* the request's key count and first token */
    int nrows, row0;      /* rows of the request; the CTA's first packed row */
    int kv_begin;         /* first key any row may see */
    const int32_t *pages; /* the request's page list */
};

/* This CTA's rows; false for a CTA with none (past the plan's tiles or its
 * request's rows): it exits. Two grid layouts: HEADS_FIRST, grid x = (tile
 * CTA, KV head) with the head fastest and the tiles (and the CTAs within
 * one) last first, so the longest causal CTAs start first; otherwise grid x
 * = tile CTA in order (the KV head on grid y). */
template <int BQ, int SUB, bool HEADS_FIRST>
__device__ __forceinline__ bool cta_rows_find(const attn_params &p, cta_rows *r)
{
    const int xi = HEADS_FIRST ? (int)blockIdx.x / p.num_kv_heads : (int)blockIdx.x;
    const int G = p.group;
    int req;
    if (p.shared_prefix) {
        req = 0;
        r->row0 = xi * BQ;
        r->nrows = p.num_tokens * G;
        r->tok0 = 0;
        r->seq_len = p.prefix_len;
    } else {
        const int nt = *p.plan.num_tiles, ti = xi / SUB,
                  sub = HEADS_FIRST ? SUB - 1 - xi % SUB : xi % SUB;
        if (ti >= nt) return false;
        req = p.plan.tile_req[HEADS_FIRST ? nt - 1 - ti : ti];
        r->row0 = p.plan.tile_row0[HEADS_FIRST ? nt - 1 - ti : ti] + sub * BQ;
        r->tok0 = p.plan.qo_indptr[req];
        r->nrows = (p.plan.qo_indptr[req + 1] - r->tok0) * G;
        r->seq_len = p.plan.seq_lens[req];
    }
    if (r->row0 >= r->nrows) return false;
    r->pages = p.plan.kv_indices + p.plan.kv_indptr[req];
    r->kv_begin = p.shared_prefix ? 0 : p.kv_begin;
    return true;
}

/* Keys [lo, hi) a row of the CTA at token position pos sees. */
__device__ __forceinline__ void row_keys(const attn_params &p, const cta_rows &r, int pos, int *lo,
                                         int *hi)
{
    visible_range(p.var, pos, r.seq_len, r.kv_begin, lo, hi);
    if (p.kv_chunk > 0) { /* split keys: this CTA's range only */
        const int zl = (int)blockIdx.z * p.kv_chunk;
        *lo = max(*lo, zl);
        *hi = min(*hi, zl + p.kv_chunk);
    }
}

/* For the kernels that mask tile by tile (fast and sm90): a row's keys
 * [lo, hi) folded into the CTA's bounds in shared memory, the union
 * [s_lo, s_hi) of its rows' ranges (the tiles to visit) and their
 * intersection [s_maxlo, s_minhi) (the tiles that need no mask). */
__device__ __forceinline__ void row_keys_fold(int lo, int hi, int *s_lo, int *s_hi, int *s_maxlo,
                                              int *s_minhi)
{
    atomicMax(s_maxlo, lo);
    atomicMin(s_minhi, hi);
    if (hi > lo) {
        atomicMin(s_lo, lo);
        atomicMax(s_hi, hi);
    }
}

} // namespace fi

#endif
