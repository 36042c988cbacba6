/*
 * The plan's host-side decisions, on any machine, GPU or not: the decode
 * grid's head blocks (src/decode_heads.h) and the scheduler's choices
 * (src/scheduler.h).
 *   - decode_group_block picks, within each kernel's cap, the power of two
 *     that reads the KV cache the fewest times, then wastes the fewest
 *     heads; every group a power-of-two block divides without beating its
 *     read count keeps the block it had before padding existed (the tuned
 *     shapes 1, 2, 4, 8 and the cap's multiples), and the models' groups
 *     3, 5, 6, 7 get the blocks the plan is meant to give them.
 *   - head_block: over a grid of Hk x ceil(G / GB) blocks, every query head
 *     is served exactly once, by a block of its own KV head, each block's
 *     real heads lie inside the group, and only a KV head's last block has
 *     padding. The kernels load, and merge_cta_states stores, exactly the
 *     heads [h0, h0 + nh), so this is what keeps them inside the real heads.
 *   - the scheduler: a decode's splits are cut from the keys a row can see
 *     (a 128-key window at 8k context is not split into 32 partitions of
 *     nothing), are the fewest that fill the last wave, stay within the
 *     workspace and 256 keys a partition; four head blocks per CTA only
 *     without a split and where they divide the grid; the tensor-core kernel
 *     family follows dtype, soft-cap, ALiBi and the device; the cascade's
 *     prefix ranges cover the prefix in multiples of 64 keys.
 *   - the FP8 MLA kernel's operand orders (src/mla_fp8_order.h): its loads
 *     and Q, P and O^T's rows agree, cover every channel and key once, and
 *     its shared-memory loads are free of bank conflicts.
 *
 *   fi_host_test      exit 0 when every check holds (tests/unit/check.h)
 */
#include <stdio.h>

#include <vector>

#include "check.h"
#include "decode_heads.h"
#include "mla_fp8_order.h"
#include "scheduler.h"

using namespace fi;


/* The rule before padding: the largest power-of-two divisor of g up to the cap. */
static int divisor_block(int g, bool mla, bool kv16, int d)
{
    if (mla && kv16 && (g % 16 == 0 || g < 16)) return 16;
    for (int gb = decode_group_cap(mla, d); gb > 1; gb /= 2)
        if (g % gb == 0) return gb;
    return 1;
}

static void check_choice(int g, bool mla, bool kv16, int d)
{
    const int gb = decode_group_block(g, mla, kv16, d), old = divisor_block(g, mla, kv16, d);
    if (mla && kv16 && (g % 16 == 0 || g < 16)) {
        CHECK_MSG(gb == 16, "mla g=%d: gb %d, want 16 (tensor-core MLA)", g, gb);
        return;
    }
    const int cap = decode_group_cap(mla, d);
    CHECK_MSG(gb >= 1 && gb <= cap && (gb & (gb - 1)) == 0,
              "g=%d d=%d mla=%d: gb %d not a power of two <= %d", g, d, mla, gb, cap);
    /* Fewest reads, then fewest padding heads, over every candidate. */
    for (int c = 1; c <= cap; c *= 2) {
        const int rc = head_blocks_per_kv(g, c), rg = head_blocks_per_kv(g, gb);
        CHECK_MSG(rg < rc || (rg == rc && rg * gb <= rc * c),
                  "g=%d d=%d mla=%d: gb %d (%d reads) loses to %d (%d reads)", g, d, mla, gb, rg, c,
                  rc);
    }
    /* Where the old block already read the fewest times, nothing changes. */
    if (head_blocks_per_kv(g, old) == head_blocks_per_kv(g, gb))
        CHECK_MSG(gb == old, "g=%d d=%d mla=%d: gb %d, was %d with as few reads", g, d, mla, gb,
                  old);
    if ((g & (g - 1)) == 0 || g % cap == 0)
        CHECK_MSG(gb == old, "g=%d d=%d mla=%d: divisible group moved from %d to %d", g, d, mla,
                  old, gb);
}

static void check_grid(int hk_count, int g, int gb)
{
    const int per_kv = head_blocks_per_kv(g, gb), hq = hk_count * g;
    std::vector<int> served(hq, 0);
    for (int hb = 0; hb < hk_count * per_kv; hb++) {
        const head_block b(g, gb, hb);
        CHECK_MSG(b.hk >= 0 && b.hk < hk_count, "Hk=%d g=%d gb=%d block %d: KV head %d", hk_count,
                  g, gb, hb, b.hk);
        CHECK_MSG(b.nh >= 1 && b.nh <= gb, "Hk=%d g=%d gb=%d block %d: %d real heads", hk_count, g,
                  gb, hb, b.nh);
        CHECK_MSG(b.h0 >= b.hk * g && b.h0 + b.nh <= (b.hk + 1) * g,
                  "Hk=%d g=%d gb=%d block %d: heads [%d, %d) outside KV head %d's group", hk_count,
                  g, gb, hb, b.h0, b.h0 + b.nh, b.hk);
        const bool last = hb % per_kv == per_kv - 1;
        CHECK_MSG(last || b.nh == gb, "Hk=%d g=%d gb=%d block %d: padding before the last block",
                  hk_count, g, gb, hb);
        if (g % gb == 0)
            CHECK_MSG(b.nh == gb && b.h0 == hb * gb,
                      "Hk=%d g=%d gb=%d block %d: divisible grid changed", hk_count, g, gb, hb);
        for (int h = b.h0; h < b.h0 + b.nh && h < hq; h++) served[h]++;
    }
    for (int h = 0; h < hq; h++)
        CHECK_MSG(served[h] == 1, "Hk=%d g=%d gb=%d: head %d served %d times", hk_count, g, gb, h,
                  served[h]);
}

/* An H100's 132 SMs reading at 3.35 TB/s, 4 decode CTAs per SM at 3 stages
 * of either kernel (a 16-bit d128 layer's); an H200's at 4.9. */
static const sched_device h100 = {132, 90, true, 3.35}, h200 = {132, 90, true, 4.9};
static const decode_occ h100_occ = {4, 4};
static const sched_device no90x = {132, 90, false}, a100x = {108, 80, true};

static void check_decode(const sched_device &dev, int tokens, int hk, int g, int64_t keys,
                         int64_t ws_rows)
{
    const int gb = decode_group_block(g, false, true, 128);
    const decode_choice c = schedule_decode(dev, h100_occ, tokens, hk, g, gb, 128, keys, ws_rows);
    const int64_t base = (int64_t)tokens * hk * head_blocks_per_kv(g, gb);
    CHECK_MSG(c.stream == (dev.hbm_tbps >= decode_stream_tbps &&
                           base >= (int64_t)decode_stream_grid * dev.sms),
              "T=%d Hk=%d g=%d at %.2f TB/s: streaming kernel %d", tokens, hk, g, dev.hbm_tbps,
              c.stream);
    CHECK_MSG(!c.stream || c.heads_per_cta == 1, "T=%d: the streaming kernel with %d head blocks",
              tokens, c.heads_per_cta);
    const int occ = c.stream ? h100_occ.stream : h100_occ.own;
    CHECK_MSG(c.splits >= 1 && c.splits <= FI_MAX_DECODE_SPLITS, "T=%d keys=%lld: %d splits",
              tokens, (long long)keys, c.splits);
    CHECK_MSG(c.splits == 1 || c.splits <= (keys + 255) / 256,
              "T=%d keys=%lld: %d splits leave partitions under 256 keys", tokens, (long long)keys,
              c.splits);
    CHECK_MSG(c.splits == 1 || (int64_t)c.splits * tokens <= ws_rows,
              "T=%d: %d splits overflow %lld workspace rows", tokens, c.splits, (long long)ws_rows);
    CHECK_MSG(c.splits == 1 || wave_fill(dev.sms, base, occ) < decode_fill - 1e-9,
              "T=%d: a batch that fills its wave split %d ways", tokens, c.splits);
    const double fill = wave_fill(dev.sms, base * c.splits, occ);
    for (int s = 1; s < c.splits; s++)
        CHECK_MSG(wave_fill(dev.sms, base * s, occ) < decode_fill - 1e-9 &&
                      wave_fill(dev.sms, base * s, occ) <= fill + 1e-9,
                  "T=%d keys=%lld: %d splits chosen, %d fill as well", tokens, (long long)keys,
                  c.splits, s);
    const int hpc = c.heads_per_cta;
    CHECK_MSG(hpc == 1 ||
                  ((hpc == 4 || hpc == 2) && c.splits == 1 &&
                   (hk * head_blocks_per_kv(g, gb)) % hpc == 0 && regs_hpc_fits(128, gb, hpc)),
              "T=%d Hk=%d g=%d: %d heads per CTA with %d splits", tokens, hk, g, c.heads_per_cta,
              c.splits);
}

/* Request 0's block k may be released (plugin.h, ah_kv_group) when its
 * window hides the whole block from its first query p0: (k + 1) x bs - 1
 * <= p0 - window. */
static bool releasable(int64_t k, int64_t p0, int window, int bs)
{
    return (k + 1) * bs - 1 <= p0 - window;
}

/* The cascade under a window: planned only when no key a row of the batch
 * sees (from max(0, p - window + 1) on, p >= min_p0) lies in a block
 * request 0 may have released, and refused only when the earliest row
 * sees one (so windowed cascades are not given up without need). */
static void check_cascade_window(void)
{
    CHECK_MSG(schedule_cascade_window(0, 5000, 0, 16), "no window: nothing released");
    CHECK_MSG(schedule_cascade_window(128, 100, 0, 16), "window past request 0's start");
    CHECK_MSG(!schedule_cascade_window(128, 4000, 100, 16),
              "a short request sees blocks request 0 released");
    /* fi_check's two windowed cascades */
    CHECK_MSG(!schedule_cascade_window(37, 299, 99, 16), "fi_check: prefix still seen");
    CHECK_MSG(schedule_cascade_window(100, 199, 199, 16), "fi_check: every window past");
    for (int window : {1, 7, 16, 37, 128})
        for (int bs : {1, 4, 16, 64})
            for (int64_t p0 = 0; p0 < 300; p0 += 7)
                for (int64_t minp = 0; minp <= p0; minp += 3) {
                    const int64_t lo = minp - window + 1 > 0 ? minp - window + 1 : 0;
                    bool hits = false; /* a block of the keys [lo, minp] the earliest row
                                          sees is releasable (later rows start later) */
                    for (int64_t j = lo; j <= minp && !hits; j++)
                        hits = releasable(j / bs, p0, window, bs);
                    CHECK_MSG(schedule_cascade_window(window, p0, minp, bs) == !hits,
                              "window %d bs %d p0 %lld min %lld: cascade %d, a released block "
                              "seen %d",
                              window, bs, (long long)p0, (long long)minp,
                              schedule_cascade_window(window, p0, minp, bs), hits);
                }
}

/* The Hopper MLA kernel's grid over (token, head block): for a batch of
 * requests of 1 to 9 query tokens, every (token, head) of every request is
 * a real row of exactly one working CTA, of that token's request; a
 * block's rows are its tokens in order (the kernel gives row k of a block
 * position pos + k, so the keys a row masks past are its own token's). */
static void check_mla_cover(void)
{
    const int H = FI_MLA_SM90_HEADS;
    const std::vector<int> qlens = {1, 7, 4, 1, 9, 2, 3, 5, 8, 1};
    std::vector<int> q0 = {0};
    for (int q : qlens) q0.push_back(q0.back() + q);
    const int T = q0.back();
    for (int g : {3, 8, 16, 32, 64, 96, 128}) /* FP8 takes the 64-row kernel below 16 */
        for (int window : {0, 100}) {
            const int tb = mla_token_block(H, g, window), hblocks = head_blocks_per_kv(g, H);
            std::vector<int> served((size_t)T * g, 0);
            int last = -1; /* the latest working CTA's token */
            for (int nth = 0, r = 0; nth < T; nth++) {
                while (q0[r + 1] <= nth) r++;
                if (nth == q0[r]) last = q0[r + 1];
                const int t = mla_token_at(nth, q0[r], q0[r + 1]);
                CHECK_MSG(t >= q0[r] && t < q0[r + 1], "grid place %d plays token %d of [%d, %d)",
                          nth, t, q0[r], q0[r + 1]);
                if (mla_cta(H, g, tb, 0, t, q0[r], q0[r + 1]).ntok) {
                    CHECK_MSG(t < last, "g=%d: request %d's working CTAs not from its last", g, r);
                    last = t;
                }
                for (int hb = 0; hb < hblocks; hb++) {
                    const int h0 = hb * H;
                    const mla_cta c(H, g, tb, h0, t, q0[r], q0[r + 1]);
                    CHECK_MSG(c.nh <= H, "g=%d: %d real rows in a CTA of %d", g, c.nh, H);
                    for (int row = 0; row < c.nh; row++) {
                        const int tok = t + c.tok(row), head = c.head(h0, row);
                        const bool inside = tok < q0[r + 1] && head >= 0 && head < g;
                        CHECK_MSG(inside, "g=%d tb=%d: token %d's row %d serves (%d, %d)", g, tb, t,
                                  row, tok, head);
                        if (inside) served[(size_t)tok * g + head]++;
                    }
                }
            }
            for (int i = 0; i < T * g; i++)
                CHECK_MSG(served[i] == 1, "g=%d window=%d: token %d head %d served %d times", g,
                          window, i / g, i % g, served[i]);
        }
}

/* Shared-memory banks a warp's loads touch in one pass: true when no two
 * addresses in a pass share a bank with different words (a 16-byte load
 * runs in passes of 8 lanes, a 4-byte load in one of 32). */
static bool conflict_free(const std::vector<uint32_t> &addr, int bytes)
{
    const int lanes = bytes == 16 ? 8 : 32;
    for (size_t p0 = 0; p0 < addr.size(); p0 += lanes) {
        uint32_t word_at[32];
        for (int b = 0; b < 32; b++) word_at[b] = ~0u;
        for (size_t l = p0; l < p0 + lanes; l++)
            for (int w = 0; w < bytes / 4; w++) {
                const uint32_t word = addr[l] / 4 + (uint32_t)w, bank = word % 32;
                if (word_at[bank] != ~0u && word_at[bank] != word) return false;
                word_at[bank] = word;
            }
    }
    return true;
}

/* The FP8 MLA kernel's operand orders (src/mla_fp8_order.h): what the
 * S^T loads give a lane is where Q holds the same channels; O^T's key
 * order and P's columns agree; O^T's rows cover the 512 channels once; the
 * producer writes each unit where the consumers read it; and both GEMMs'
 * loads are free of bank conflicts. */
static void check_mla8_order(void)
{
    const int D = 576;
    for (int c = 0; c < D / 64; c++) {
        std::vector<int> seen(64, 0);
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 4; j++)
                for (int hf = 0; hf < 2; hf++)
                    for (int e = 0; e < 2; e++) {
                        const int ch = mla8_q_channel(c, j, hf, t) + e;
                        const int loaded = 16 * mla8_s_unit(c, t) + 4 * j + 2 * hf + e;
                        CHECK_MSG(ch == loaded,
                                  "S^T chunk %d lane %d word %d: Q channel %d, load %d", c, t, j,
                                  ch, loaded);
                        if (ch >= 64 * c && ch < 64 * c + 64) seen[ch - 64 * c]++;
                    }
        for (int i = 0; i < 64; i++)
            CHECK_MSG(seen[i] == 1, "chunk %d channel %d: %d", c, i, seen[i]);
    }
    std::vector<int> cols(16, 0);
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 4; k++) { /* register pair k: columns 2t + k, or 8 + 2t + k - 2 */
            const int key = mla8_v_key(t, k), col = k < 2 ? 2 * t + k : 8 + 2 * t + k - 2;
            const int pcol = key < 8 ? mla8_p_col(key) : 8 + mla8_p_col(key - 8);
            CHECK_MSG(key >= 0 && key < 16 && pcol == col,
                      "O^T lane %d pair %d: key %d in P column %d, A column %d", t, k, key, pcol,
                      col);
            cols[col]++;
        }
    for (int i = 0; i < 16; i++) CHECK_MSG(cols[i] == 1, "O^T column %d: %d", i, cols[i]);
    std::vector<int> chans(512, 0);
    for (int grp = 0; grp < 4; grp++)
        for (int w = 0; w < 4; w++)
            for (int g = 0; g < 8; g++)
                for (int r = 0; r < 4; r++) chans[mla8_o_channel(grp, w, g) + r]++;
    for (int i = 0; i < 512; i++) CHECK_MSG(chans[i] == 1, "O^T channel %d: %d rows", i, chans[i]);
    for (int row = 0; row < 64; row++)
        for (int q = 0; q < 4; q++)
            for (int k = 0; k < D / 64; k++) /* the producer's unit q + 4k at (q ^ s) + 4k */
                CHECK_MSG((int)((unsigned)(q + 4 * k) ^ mla8_swizzle(row)) ==
                              (int)((unsigned)q ^ mla8_swizzle(row)) + 4 * k,
                          "row %d unit %d placed apart from its reads", row, q + 4 * k);
    for (int ks = 0; ks < 4; ks++)
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++)
                CHECK_MSG(mla8_swizzle(16 * ks + mla8_v_key(t, k)) == mla8_swizzle(t),
                          "O^T row %d's swizzle is not its lane's", 16 * ks + mla8_v_key(t, k));
    /* Bank conflicts: S^T's 16-byte loads (rows 16 w + g and + 8, unit
     * mla8_s_unit(c, t)), O^T's 4-byte loads (row mla8_v_key(t, k), the
     * channel word mla8_o_channel(grp, w, g)). */
    for (int w = 0; w < 4; w++)
        for (int c = 0; c < D / 64; c++)
            for (int h = 0; h < 2; h++) {
                std::vector<uint32_t> a;
                for (int lane = 0; lane < 32; lane++) {
                    const int row = 16 * w + lane / 4 + 8 * h;
                    a.push_back((uint32_t)(row * D) +
                                (((unsigned)mla8_s_unit(c, lane % 4) ^ mla8_swizzle(row)) << 4));
                }
                CHECK_MSG(conflict_free(a, 16), "S^T loads, warp %d chunk %d: bank conflicts", w,
                          c);
            }
    for (int w = 0; w < 4; w++)
        for (int grp = 0; grp < 4; grp++)
            for (int k = 0; k < 4; k++) {
                std::vector<uint32_t> a;
                for (int lane = 0; lane < 32; lane++) {
                    const int t = lane % 4, row = mla8_v_key(t, k);
                    const int ch = mla8_o_channel(grp, w, lane / 4);
                    a.push_back((uint32_t)(row * D) +
                                (((unsigned)(ch / 16) ^ mla8_swizzle(row)) << 4) +
                                (uint32_t)(ch % 16));
                }
                CHECK_MSG(conflict_free(a, 4),
                          "O^T loads, warp %d group %d pair %d: bank conflicts", w, grp, k);
            }
}

static void check_scheduler(void)
{
    CHECK_MSG(decode_visible_keys(8192, true, 0) == 8192, "no window: every key");
    CHECK_MSG(decode_visible_keys(8192, true, 128) == 128, "causal window 128: 128 keys");
    CHECK_MSG(decode_visible_keys(100, true, 128) == 100, "window past the sequence");
    CHECK_MSG(decode_visible_keys(8192, false, 128) == 255, "bidirectional window 128: 255 keys");

    /* gpt-oss's windowed layers (64/8, window 128) at 16 x 4096: the 128
     * visible keys are one partition; the full layers split. */
    const decode_choice win = schedule_decode(h100, h100_occ, 16, 8, 8, 8, 128,
                                              decode_visible_keys(4096, true, 128), 1 << 16);
    CHECK_MSG(win.splits == 1, "windowed decode split into %d", win.splits);
    const decode_choice full = schedule_decode(h100, h100_occ, 16, 8, 8, 8, 128, 4096, 1 << 16);
    CHECK_MSG(full.splits > 1, "16 x 4096 decode of 128 CTAs not split (%d)", full.splits);
    /* A batch that fills its waves alone: no split, 4 heads a CTA. */
    const decode_choice big = schedule_decode(h100, h100_occ, 1056, 8, 4, 4, 128, 8192, 1 << 16);
    CHECK_MSG(big.splits == 1 && big.heads_per_cta == 4,
              "1056 x 8 CTAs: %d splits, %d heads per CTA", big.splits, big.heads_per_cta);
    /* Head blocks a register-load CTA serves: four of Llama-3-8B's (d128,
     * blocks of 4 heads); two of Qwen2.5-7B's (blocks of 8: the merge
     * buffers of four overflow), of Gemma's (d256, blocks of 2: eight
     * warps an SM) and of gpt-oss's (d64, blocks of 8: 24 warps an SM, in
     * CTAs of 8); one where the keys split or the blocks are odd. */
    CHECK_MSG(schedule_heads_per_cta(8, 4, 4, 128, 1) == 4 &&
                  schedule_heads_per_cta(4, 7, 8, 128, 1) == 2 &&
                  schedule_heads_per_cta(8, 2, 2, 256, 1) == 2 &&
                  schedule_heads_per_cta(8, 8, 8, 64, 1) == 2 &&
                  schedule_heads_per_cta(8, 4, 4, 128, 3) == 1 &&
                  schedule_heads_per_cta(1, 8, 8, 128, 1) == 1,
              "register-load head blocks per CTA: %d %d %d %d %d %d",
              schedule_heads_per_cta(8, 4, 4, 128, 1), schedule_heads_per_cta(4, 7, 8, 128, 1),
              schedule_heads_per_cta(8, 2, 2, 256, 1), schedule_heads_per_cta(8, 8, 8, 64, 1),
              schedule_heads_per_cta(8, 4, 4, 128, 3), schedule_heads_per_cta(1, 8, 8, 128, 1));
    /* A lone long request fills the GPU when the workspace holds
     * FI_MAX_DECODE_SPLITS rows a token: 8 KV heads at 32k split until the
     * last wave is 95% full (63 ways, 504 of 528 slots), one up to the cap. */
    const decode_choice lone8 =
        schedule_decode(h100, h100_occ, 1, 8, 4, 4, 128, 32768, FI_MAX_DECODE_SPLITS);
    CHECK_MSG(lone8.splits == 63, "1 x 32k, 8 KV heads: %d splits", lone8.splits);
    const decode_choice lone1 =
        schedule_decode(h100, h100_occ, 1, 1, 8, 8, 128, 32768, FI_MAX_DECODE_SPLITS);
    CHECK_MSG(lone1.splits == FI_MAX_DECODE_SPLITS, "1 x 32k, 1 KV head: %d splits", lone1.splits);
    /* MLA: the Hopper kernel from 16 heads on a cache of the query's type,
     * at any group on FP8. */
    CHECK_MSG(schedule_mla_sm90(h100, 128, FI_BF16, FI_BF16) &&
                  schedule_mla_sm90(h100, 96, FI_F16, FI_F16) &&
                  schedule_mla_sm90(h100, 16, FI_BF16, FI_BF16) &&
                  schedule_mla_sm90(h100, 128, FI_BF16, FI_E4M3) &&
                  schedule_mla_sm90(h100, 16, FI_F16, FI_E5M2) &&
                  schedule_mla_sm90(h100, 8, FI_BF16, FI_E4M3) &&
                  schedule_mla_sm90(h100, 3, FI_F16, FI_E5M2),
              "MLA 128 / 96 / 16 heads, or FP8 at 8 and 3, not on the Hopper kernel");
    /* ... and of those, an FP8 cache's decode steps at up to 16 heads on
     * the kernel with the keys as M */
    CHECK_MSG(schedule_mla_keys_m(FI_E4M3, 16, true) && schedule_mla_keys_m(FI_E5M2, 8, true) &&
                  schedule_mla_keys_m(FI_E4M3, 3, true),
              "FP8 MLA decode steps at 16 / 8 / 3 heads not on the keys-as-M kernel");
    CHECK_MSG(!schedule_mla_keys_m(FI_E4M3, 16, false) && !schedule_mla_keys_m(FI_E4M3, 32, true) &&
                  !schedule_mla_keys_m(FI_BF16, 16, true),
              "the keys-as-M kernel takes a mixed step, 32 heads or a 16-bit cache");
    CHECK_MSG(!schedule_mla_sm90(h100, 8, FI_BF16, FI_BF16) &&
                  !schedule_mla_sm90(h100, 128, FI_BF16, FI_F16) &&
                  !schedule_mla_sm90(no90x, 128, FI_BF16, FI_BF16) &&
                  !schedule_mla_sm90(a100x, 128, FI_BF16, FI_E4M3),
              "MLA on the Hopper kernel where it does not apply");
    /* MLA token blocks: 16 heads fill a 64-row CTA with 4 tokens, 32 with
     * 2; 64 heads or more, a group that does not divide the rows, or a
     * window keep rows as heads. */
    CHECK_MSG(mla_token_block(FI_MLA_SM90_HEADS, 16, 0) == 4 &&
                  mla_token_block(FI_MLA_SM90_HEADS, 32, 0) == 2,
              "MLA token blocks of 16 and 32 heads: %d, %d",
              mla_token_block(FI_MLA_SM90_HEADS, 16, 0), mla_token_block(FI_MLA_SM90_HEADS, 32, 0));
    for (int g : {48, 64, 96, 128})
        CHECK_MSG(mla_token_block(FI_MLA_SM90_HEADS, g, 0) == 1, "MLA %d heads: token block %d", g,
                  mla_token_block(FI_MLA_SM90_HEADS, g, 0));
    CHECK_MSG(mla_token_block(FI_MLA_SM90_HEADS, 16, 128) == 1, "MLA token block under a window");
    check_mla_cover();
    /* Splits count the CTAs that work: 256 tokens of 16-head MLA in blocks
     * of 4 are 64 CTAs, which split where 256 would not. */
    const decode_choice all_work =
        schedule_decode(h100, h100_occ, 256, 1, 16, 64, 576, 4096, 1 << 16);
    const decode_choice blocks =
        schedule_decode(h100, h100_occ, 256, 1, 16, 64, 576, 4096, 1 << 16, 64);
    CHECK_MSG(blocks.splits > all_work.splits, "64 working CTAs of 256 tokens: %d splits, all: %d",
              blocks.splits, all_work.splits);
    CHECK_MSG(schedule_decode(h100, h100_occ, 256, 1, 16, 64, 576, 4096, 1 << 16, -1).splits ==
                  all_work.splits,
              "working -1: every token's CTA");
    /* A kernel of one CTA an SM splits within one wave where the batch fits
     * one: 30 tokens 4 ways (120 CTAs, where the last-wave fill would take
     * 13 ways, 3 waves), 1 token up to the cap, 64 tokens in two, 100 not
     * at all; past one wave, the least waves x (fixed + partition): 140
     * four ways (5 waves, not 2 of whole requests), 256 not at all. */
    const decode_occ mla_occ = {1, 0};
    const int mla_splits[][3] = {{30, 4096, 4},  {1, 32768, FI_MAX_DECODE_SPLITS},
                                 {64, 8192, 2},  {100, 4096, 1},
                                 {256, 4096, 1}, {16, 4096, 8},
                                 {140, 4096, 4}};
    for (const auto &m : mla_splits) {
        const decode_choice c = schedule_decode(h200, mla_occ, m[0], 1, 16, 64, 576, m[1], 1 << 16);
        CHECK_MSG(c.splits == m[2] && !c.stream, "one CTA an SM, d%dx%d: %d splits, want %d", m[0],
                  m[1], c.splits, m[2]);
    }
    CHECK_MSG(schedule_decode(h200, h100_occ, 30, 1, 16, 64, 576, 4096, 1 << 16).splits > 4,
              "four CTAs an SM fill the last wave");
    /* The streaming kernel for a 16-bit d128 layer's batches of a head
     * block an SM and more on a chip reading at 4 TB/s, at 3 stages, one
     * head block a CTA: Llama-3-8B's B64 (512 head blocks) on an H200 in one
     * wave, Qwen2.5-7B's B64 (256) split in two to fill it; not Llama-3-8B's
     * B16 (128), not on an H100, not where the layer has no such
     * alternative (an FP8 cache's stream kernel is its own). */
    const decode_choice llama64 = schedule_decode(h200, h100_occ, 64, 8, 4, 4, 128, 8192, 1 << 16);
    CHECK_MSG(llama64.stream && llama64.splits == 1 && llama64.heads_per_cta == 1,
              "Llama-3-8B B64 on an H200: stream %d, %d splits, %d head blocks a CTA",
              llama64.stream, llama64.splits, llama64.heads_per_cta);
    const decode_choice qwen64 = schedule_decode(h200, h100_occ, 64, 4, 7, 8, 128, 8192, 1 << 16);
    CHECK_MSG(qwen64.stream && qwen64.splits == 2,
              "Qwen2.5-7B B64 on an H200: stream %d, %d splits", qwen64.stream, qwen64.splits);
    CHECK_MSG(!schedule_decode(h200, h100_occ, 16, 8, 4, 4, 128, 8192, 1 << 16).stream &&
                  !schedule_decode(h100, h100_occ, 64, 8, 4, 4, 128, 8192, 1 << 16).stream,
              "the streaming kernel below its grid or on an H100");
    const decode_occ own_only = {4, 0};
    CHECK_MSG(!schedule_decode(h200, own_only, 256, 8, 4, 4, 128, 8192, 1 << 16).stream,
              "the streaming kernel where the layer has no alternative");
    /* No workspace: never split. */
    CHECK_MSG(schedule_decode(h100, h100_occ, 1, 8, 4, 4, 128, 1 << 16, 0).splits == 1,
              "split without "
              "a workspace");
    for (int tokens : {1, 3, 16, 64, 100, 256})
        for (int hk : {1, 2, 4, 8})
            for (int g : {1, 4, 7, 8})
                for (int64_t keys : {1, 200, 4096, 32768})
                    for (int64_t ws : {64, 4096, 65536})
                        for (const sched_device *dev : {&h100, &h200})
                            check_decode(*dev, tokens, hk, g, keys, ws);

    const sched_device a100 = {108, 80, true}, no90 = {132, 90, false};
    CHECK_MSG(schedule_prefill_family(h100, 128, 1, 1, 0.f, false) == FI_PREFILL_SM90, "H100 d128");
    CHECK_MSG(schedule_prefill_family(no90, 128, 1, 1, 0.f, false) == FI_PREFILL_FAST,
              "d128 without the sm_90a kernel");
    CHECK_MSG(schedule_prefill_family(a100, 128, 1, 1, 0.f, false) == FI_PREFILL_FAST, "A100 d128");
    CHECK_MSG(schedule_prefill_family(h100, 64, 1, 1, 0.f, false) == FI_PREFILL_FAST, "H100 d64");
    CHECK_MSG(schedule_prefill_family(h100, 128, 1, 2, 0.f, false) == FI_PREFILL_GENERAL, "FP8 KV");
    /* soft-cap and ALiBi: the Hopper kernel at d128, the general one elsewhere */
    CHECK_MSG(schedule_prefill_family(h100, 128, 1, 1, 30.f, false) == FI_PREFILL_SM90 &&
                  schedule_prefill_family(h100, 128, 1, 1, 0.f, true) == FI_PREFILL_SM90,
              "soft-cap / ALiBi at d128 on H100");
    CHECK_MSG(schedule_prefill_family(h100, 64, 1, 1, 30.f, false) == FI_PREFILL_GENERAL &&
                  schedule_prefill_family(a100, 128, 1, 1, 0.f, true) == FI_PREFILL_GENERAL &&
                  schedule_prefill_family(h100, 128, 1, 2, 30.f, false) == FI_PREFILL_GENERAL,
              "soft-cap / ALiBi off the Hopper kernel");
    CHECK_MSG(prefill_cta_rows(FI_PREFILL_SM90, 128) == 128 &&
                  prefill_cta_rows(FI_PREFILL_FAST, 64) == 64 &&
                  prefill_cta_rows(FI_PREFILL_GENERAL, 128) == 64,
              "rows per CTA");

    for (int tokens : {2, 16, 300})
        for (int prefix : {16, 512, 1000, 4096, 100000})
            for (int64_t ws : {(int64_t)tokens * 2, (int64_t)tokens * 40}) {
                const prefix_choice p =
                    schedule_prefix(h100, FI_PREFILL_SM90, 128, tokens, 4, 8, prefix, ws);
                CHECK_MSG(
                    p.chunk % 64 == 0 && p.splits >= 1 && (int64_t)p.splits * p.chunk >= prefix &&
                        (int64_t)(p.splits - 1) * p.chunk < prefix,
                    "prefix %d over %d tokens: %d ranges of %d", prefix, tokens, p.splits, p.chunk);
                CHECK_MSG(p.splits == 1 || ((int64_t)p.splits + 1) * tokens <= ws,
                          "prefix %d: %d ranges overflow %lld workspace rows", prefix, p.splits,
                          (long long)ws);
                CHECK_MSG(p.splits <= 32, "prefix %d: %d ranges", prefix, p.splits);
            }

    CHECK_MSG(schedule_sort_pages(false, 0, false), "plain decode sorts its pages");
    CHECK_MSG(!schedule_sort_pages(true, 0, false) && !schedule_sort_pages(false, 128, false) &&
                  !schedule_sort_pages(false, 0, true),
              "cascade, window or ALiBi keep table order");
    CHECK_MSG(schedule_merge_pdl(h100) && !schedule_merge_pdl(a100),
              "PDL from compute capability 9.0");
    check_cascade_window();
}

int main(void)
{
    check_scheduler();
    check_mla8_order();
    /* The blocks the plan is meant to give the models' groups. */
    static const struct {
        int g, d, gb;
    } want[] = {
        {1, 128, 1}, {2, 128, 2}, {4, 128, 4}, {8, 128, 8},  {16, 128, 8}, {3, 128, 4},
        {5, 128, 8}, {6, 128, 8}, {7, 128, 8}, {12, 128, 8}, {7, 64, 8},   {3, 256, 4},
        {5, 256, 4}, {6, 256, 4}, {7, 256, 4}, {8, 256, 4},  {2, 256, 2},  {1, 256, 1},
    };
    for (const auto &w : want) {
        const int gb = decode_group_block(w.g, false, true, w.d);
        CHECK_MSG(gb == w.gb, "g=%d d=%d: gb %d, want %d", w.g, w.d, gb, w.gb);
    }
    CHECK_MSG(decode_group_block(3, true, false, 576) == 2, "FP8 MLA g=3: gb %d, want 2",
              decode_group_block(3, true, false, 576));
    CHECK_MSG(decode_group_block(128, true, false, 576) == 2, "FP8 MLA g=128");
    CHECK_MSG(decode_group_block(24, true, true, 576) == 2, "16-bit MLA g=24 (CUDA cores)");

    const int ds[4] = {64, 128, 256, 576};
    for (int g = 1; g <= 130; g++)
        for (int di = 0; di < 4; di++)
            for (int kv16 = 0; kv16 < 2; kv16++) {
                const bool mla = ds[di] == 576;
                check_choice(g, mla, kv16 != 0, ds[di]);
            }
    for (int hk = 1; hk <= 9; hk++)
        for (int g = 1; g <= 40; g++)
            for (int gb = 1; gb <= 16; gb *= 2) check_grid(hk, g, gb);
    return check_report("fi_host_test");
}
