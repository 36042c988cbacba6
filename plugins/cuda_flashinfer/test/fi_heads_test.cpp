/*
 * The decode grid's head blocks (src/decode_heads.h), on the host: runs on
 * any machine, GPU or not.
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
 *
 *   fi_heads_test     exit 0 when every check holds
 */
#include <stdio.h>

#include <vector>

#include "decode_heads.h"

using namespace fi;

static int g_fail;

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__); \
            printf("\n"); \
            g_fail++; \
        } \
    } while (0)

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
        CHECK(gb == 16, "mla g=%d: gb %d, want 16 (tensor-core MLA)", g, gb);
        return;
    }
    const int cap = decode_group_cap(mla, d);
    CHECK(gb >= 1 && gb <= cap && (gb & (gb - 1)) == 0,
          "g=%d d=%d mla=%d: gb %d not a power of two <= %d", g, d, mla, gb, cap);
    /* Fewest reads, then fewest padding heads, over every candidate. */
    for (int c = 1; c <= cap; c *= 2) {
        const int rc = head_blocks_per_kv(g, c), rg = head_blocks_per_kv(g, gb);
        CHECK(rg < rc || (rg == rc && rg * gb <= rc * c),
              "g=%d d=%d mla=%d: gb %d (%d reads) loses to %d (%d reads)", g, d, mla, gb, rg, c,
              rc);
    }
    /* Where the old block already read the fewest times, nothing changes. */
    if (head_blocks_per_kv(g, old) == head_blocks_per_kv(g, gb))
        CHECK(gb == old, "g=%d d=%d mla=%d: gb %d, was %d with as few reads", g, d, mla, gb, old);
    if ((g & (g - 1)) == 0 || g % cap == 0)
        CHECK(gb == old, "g=%d d=%d mla=%d: divisible group moved from %d to %d", g, d, mla, old,
              gb);
}

static void check_grid(int hk_count, int g, int gb)
{
    const int per_kv = head_blocks_per_kv(g, gb), hq = hk_count * g;
    std::vector<int> served(hq, 0);
    for (int hb = 0; hb < hk_count * per_kv; hb++) {
        const head_block b(g, gb, hb);
        CHECK(b.hk >= 0 && b.hk < hk_count, "Hk=%d g=%d gb=%d block %d: KV head %d", hk_count, g,
              gb, hb, b.hk);
        CHECK(b.nh >= 1 && b.nh <= gb, "Hk=%d g=%d gb=%d block %d: %d real heads", hk_count, g, gb,
              hb, b.nh);
        CHECK(b.h0 >= b.hk * g && b.h0 + b.nh <= (b.hk + 1) * g,
              "Hk=%d g=%d gb=%d block %d: heads [%d, %d) outside KV head %d's group", hk_count, g,
              gb, hb, b.h0, b.h0 + b.nh, b.hk);
        const bool last = hb % per_kv == per_kv - 1;
        CHECK(last || b.nh == gb, "Hk=%d g=%d gb=%d block %d: padding before the last block",
              hk_count, g, gb, hb);
        if (g % gb == 0)
            CHECK(b.nh == gb && b.h0 == hb * gb,
                  "Hk=%d g=%d gb=%d block %d: divisible grid changed", hk_count, g, gb, hb);
        for (int h = b.h0; h < b.h0 + b.nh && h < hq; h++) served[h]++;
    }
    for (int h = 0; h < hq; h++)
        CHECK(served[h] == 1, "Hk=%d g=%d gb=%d: head %d served %d times", hk_count, g, gb, h,
              served[h]);
}

int main(void)
{
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
        CHECK(gb == w.gb, "g=%d d=%d: gb %d, want %d", w.g, w.d, gb, w.gb);
    }
    CHECK(decode_group_block(3, true, false, 576) == 2, "FP8 MLA g=3: gb %d, want 2",
          decode_group_block(3, true, false, 576));
    CHECK(decode_group_block(128, true, false, 576) == 2, "FP8 MLA g=128");
    CHECK(decode_group_block(24, true, true, 576) == 2, "16-bit MLA g=24 (CUDA cores)");

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
    printf("%s\n", g_fail ? "fi_heads_test: FAILED" : "fi_heads_test: ok");
    return g_fail ? 1 : 0;
}
