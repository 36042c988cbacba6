/*
 * Head blocks of the decode grid, shared by the plan (host), the launchers
 * and the kernels (device), and by fi_host_test, which runs on any machine.
 *
 * A decode CTA serves a block of GB query heads of one KV head, so one read
 * of the KV rows serves all of them. GB is a power of two (the kernels'
 * instantiations), chosen by decode_group_block; it need not divide the
 * group G = Hq / Hk. Each KV head then has ceil(G / GB) blocks, and the last
 * one may run past the group: its heads from G on are padding. A kernel
 * loads no query, slope or sink of a padding head and stores nothing for it
 * (output, LSE, split partial); the merge of split partials runs over the
 * real heads only. Where GB divides G, no block has padding and the grid is
 * the one of G / GB blocks per KV head.
 */
#ifndef FI_DECODE_HEADS_H
#define FI_DECODE_HEADS_H

#ifdef __CUDACC__
#define FI_HD __host__ __device__ __forceinline__
#else
#define FI_HD inline
#endif

namespace fi {

/* Warps per SM the register-load decode kernel (decode_regs.cuh) fits its
 * registers to: a warp's step holds 16 x D bytes of K and V, so 16 warps at
 * 128 registers keep 64 KiB in flight at head size 128, 8 at 255 the same at
 * 256, and at 64, whose warps need 80 registers, 24 keep 48 KiB. */
constexpr int regs_warps_per_sm(int d) { return d == 256 ? 8 : d == 64 ? 24 : 16; }

/* Can one of its CTAs serve hpc head blocks of gb heads (4 warps each): do
 * their merge buffers fit in static shared memory, and do such CTAs fill
 * the SM's warps exactly? */
constexpr bool regs_hpc_fits(int d, int gb, int hpc)
{
    return 4 * hpc * gb * (d + 2) * 4 <= 48 * 1024 && regs_warps_per_sm(d) % (4 * hpc) == 0;
}

/* Head blocks per KV head for group size g and block gb. */
FI_HD int head_blocks_per_kv(int g, int gb) { return (g + gb - 1) / gb; }

/* The real heads of the block of gb heads that starts at query head h0:
 * gb, or fewer in the last block of a KV head when gb does not divide g.
 * (Kernels call it after their key loop rather than keep the count live
 * through it.) */
FI_HD int head_block_real(int g, int gb, int h0)
{
    const int left = g - h0 % g;
    return left < gb ? left : gb;
}

/* Head block hb of the grid (KV-head-major): its KV head hk, its first
 * query head h0 and nh = head_block_real, the real heads it serves. */
struct head_block {
    int hk, h0, nh;
    FI_HD head_block(int g, int gb, int hb)
    {
        const int per_kv = head_blocks_per_kv(g, gb);
        hk = hb / per_kv;
        h0 = hk * g + (hb % per_kv) * gb;
        nh = head_block_real(g, gb, h0);
    }
};

/* Query tokens of one request that an absorbed-MLA CTA of `rows` query
 * rows serves (decode_mla_sm90.cu): where the group divides the rows, the
 * request's next tokens fill the rows its heads leave (16 heads in 64
 * rows: 4 tokens), so a prefill, extend or multi-token decode costs the
 * tensor work of its real heads only; else 1 (rows are heads). Under a
 * sliding window, 1: the rows' keys would start at different places. */
FI_HD int mla_token_block(int rows, int g, int window)
{
    return g < rows && rows % g == 0 && window <= 0 ? rows / g : 1;
}

/* The query token the MLA CTA at grid place nth of a request whose tokens
 * are [q0, q1) plays: the request's tokens from its last, so under a
 * causal mask, where the last sees the most keys, the longest CTAs start
 * first and the short ones fill the wave's end. */
FI_HD int mla_token_at(int nth, int q0, int q1) { return q0 + q1 - 1 - nth; }

/* What the MLA CTA of query token t (of a request whose tokens are
 * [q0, q1)) and head block h0 serves, with token blocks of tb: ntok tokens
 * from t on (0: t is not a block's first, and its CTA exits), nh real rows,
 * and row `row` as a token offset and a head: row / rg and h0 + row % rg. */
struct mla_cta {
    int ntok, nh, rg;
    FI_HD mla_cta(int rows, int g, int tb, int h0, int t, int q0, int q1)
    {
        ntok = (t - q0) % tb ? 0 : (q1 - t < tb ? q1 - t : tb);
        rg = tb > 1 ? g : rows;
        nh = tb > 1 ? ntok * g : head_block_real(g, rows, h0);
    }
    FI_HD int tok(int row) const { return row / rg; }
    FI_HD int head(int h0, int row) const { return h0 + row % rg; }
};

/* The largest power-of-two head-group block a decode kernel takes: 8 (at
 * head size 256, 4: GB x D <= 1024 and the CUDA-core policy's GB x D/32 <=
 * 32 registers of query), MLA on CUDA cores 2. */
FI_HD int decode_group_cap(bool mla, int d) { return mla ? 2 : d >= 256 ? 4 : 8; }

/* The decode kernel's head-group block for group size g: MLA on a 16-bit
 * cache with a group below 16 or a multiple of it, 16 (the tensor-core MLA
 * kernel, decode_mla_tc.cuh); otherwise the power of two up to
 * decode_group_cap that reads the KV cache the fewest times
 * (ceil(g / GB) per KV head), and of those the one with the fewest padding
 * heads. A power-of-two g, or one the cap divides, gets the block it always
 * had (no padding); 3 -> 4, 5, 6, 7 -> 8 (4 at head size 256). */
FI_HD int decode_group_block(int g, bool mla, bool kv16, int d)
{
    if (mla && kv16 && (g % 16 == 0 || g < 16)) return 16;
    const int cap = decode_group_cap(mla, d);
    int best = 1;
    for (int gb = 2; gb <= cap; gb *= 2) {
        const int reads = head_blocks_per_kv(g, gb), best_reads = head_blocks_per_kv(g, best);
        if (reads < best_reads || (reads == best_reads && reads * gb < best_reads * best))
            best = gb;
    }
    return best;
}

} // namespace fi

#endif
