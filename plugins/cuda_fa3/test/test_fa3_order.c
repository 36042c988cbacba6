/*
 * The work items' key ranges and the work list's order for the persistent
 * grid (src/fa3_order.h), on the CPU: a decode request with no keys
 * (AH_FEAT_EMPTY_KV) gets an item of no tiles, sorted last and laid out
 * once; the order is a permutation; causal prefill's items (lengths 1 to L / 128
 * tiles) leave no CTA more than 1% above the average load, where plain
 * round-robin leaves CTA 0 ~6% above; rounds of equal items keep their
 * order; V^T publishers run in the first round and never after one of
 * their readers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/fa3_order.h"
#include "check.h"

enum { BN = 128, GRID = 132 };

/* Items of a causal prefill of reqs requests of L tokens and heads KV
 * heads, longest first (as plan sorts them); req numbers them. */
static int causal_items(fa3_work *w, int reqs, int heads, int L)
{
    int n = 0;
    for (int len = L / BN; len >= 1; len--)
        for (int i = 0; i < reqs * heads; i++, n++) {
            memset(&w[n], 0, sizeof w[n]);
            w[n].req = n;
            w[n].kv_hi = len * BN;
        }
    return n;
}

/* Largest CTA load over the average, loads in tiles plus a per-item cost
 * of four tiles (the kernels' fixed cost per item, DECISIONS.md). */
static double worst_over_mean(const fa3_work *w, int n, int g)
{
    double load[GRID] = {0}, sum = 0, worst = 0;
    for (int k = 0; k < n; k++) {
        const double c = 4 + fa3_tiles(w[k].kv_lo, w[k].kv_hi, BN);
        load[k % g] += c;
        sum += c;
    }
    for (int c = 0; c < g; c++) worst = load[c] > worst ? load[c] : worst;
    return worst / (sum / g);
}

static void test_causal_balance(int L)
{
    static fa3_work sorted[2048], out[2048];
    const int n = causal_items(sorted, 16384 / L, 16, L);
    fa3_order_rounds(out, sorted, n, GRID, BN);
    static char seen[2048];
    memset(seen, 0, sizeof seen);
    int dup = 0;
    for (int k = 0; k < n; k++) dup += seen[out[k].req]++ != 0;
    CHECK(dup == 0);
    const double plain = worst_over_mean(sorted, n, GRID), snake = worst_over_mean(out, n, GRID);
    CHECK_MSG(plain > 1.04, "L %d: plain round-robin %.4f of the mean", L, plain);
    CHECK_MSG(snake < 1.01, "L %d: snake order %.4f of the mean", L, snake);
}

static void test_flat_rounds_keep_order(void)
{
    /* Decode: 512 items of 32 tiles each, then 10 shorter ones. */
    static fa3_work sorted[522], out[522];
    for (int k = 0; k < 522; k++) {
        memset(&sorted[k], 0, sizeof sorted[k]);
        sorted[k].req = k;
        sorted[k].kv_hi = (k < 512 ? 32 : 8) * BN;
    }
    fa3_order_rounds(out, sorted, 512, GRID, BN);
    int moved = 0;
    for (int k = 0; k < 512; k++) moved += out[k].req != k;
    CHECK(moved == 0);
    /* Fewer items than CTAs: one round, as given. */
    fa3_order_rounds(out, sorted + 500, 22, GRID, BN);
    for (int k = 0; k < 22; k++) CHECK(out[k].req == 500 + k);
    /* Costs 4 3 | 2 2 | 1 0 on two CTAs: the first round turns the snake,
     * the flat second keeps its order and does not turn it, the third is
     * reversed. */
    const int cost[6] = {4, 3, 2, 2, 1, 0};
    for (int k = 0; k < 6; k++) {
        sorted[k].req = k;
        sorted[k].kv_hi = cost[k] * BN;
    }
    fa3_order_rounds(out, sorted, 6, 2, BN);
    const int want[6] = {0, 1, 2, 3, 5, 4};
    for (int k = 0; k < 6; k++)
        CHECK_MSG(out[k].req == want[k], "position %d holds item %d", k, out[k].req);
}

/* Items as plan lays them out (request, query tile, KV head), with plan's
 * publisher rule: per request and KV head, the first item that loads every
 * tile up to the request's end (kv_hi == its length; kv_lo is 0 here).
 * Query tiles of 64 tokens; causal items end at their last token. */
static int prefill_items(fa3_work *w, int reqs, const int *len, int heads, int causal)
{
    int n = 0;
    for (int r = 0; r < reqs; r++)
        for (int t = 0, pub = 0; t * 64 < len[r]; t++) {
            const int hi = causal ? (t * 64 + 64 < len[r] ? t * 64 + 64 : len[r]) : len[r];
            const int is_pub = !pub && hi == len[r];
            pub |= is_pub;
            for (int h = 0; h < heads; h++, n++) {
                memset(&w[n], 0, sizeof w[n]);
                w[n].req = r;
                w[n].kvh = h;
                w[n].q_tok0 = t;
                w[n].kv_hi = hi;
                w[n].vt_pub = is_pub;
            }
        }
    return n;
}

/* Sort and lay out as plan does; every publisher's round is no later than
 * its readers' (round = position / GRID). Returns the last publisher's round. */
static int publisher_rounds(fa3_work *items, int n)
{
    static fa3_work tmp[8192];
    static int32_t key[8192];
    static int bucket[2 * (16384 / BN) + 3], pub_round[64][16]; /* keys reach 2 * 128 + 1 */
    int max_key = 0;
    for (int k = 0; k < n; k++) {
        key[k] = fa3_sort_key(&items[k], BN);
        max_key = key[k] > max_key ? key[k] : max_key;
    }
    fa3_sort_by_key(tmp, items, key, n, max_key, bucket);
    for (int k = 1; k < n; k++) CHECK(fa3_sort_key(&tmp[k - 1], BN) >= fa3_sort_key(&tmp[k], BN));
    fa3_order_rounds(items, tmp, n, GRID, BN);
    int last = 0;
    for (int k = 0; k < n; k++)
        if (items[k].vt_pub) {
            pub_round[items[k].req][items[k].kvh] = k / GRID;
            last = k / GRID > last ? k / GRID : last;
        }
    int late = 0;
    for (int k = 0; k < n; k++)
        late += !items[k].vt_pub && k / GRID < pub_round[items[k].req][items[k].kvh];
    CHECK_MSG(late == 0, "%d readers run in a round before their publisher's", late);
    return last;
}

static void test_publishers_lead(void)
{
    static fa3_work items[8192];
    for (int causal = 0; causal <= 1; causal++)
        for (int L = 4096; L <= 16384; L *= 2) {
            int len[4] = {L, L, L, L};
            const int n = prefill_items(items, 16384 / L, len, 16, causal);
            CHECK_MSG(publisher_rounds(items, n) == 0,
                      "causal %d L %d: a publisher after the first round", causal, L);
        }
    /* Requests of uneven lengths, causal: the rule still holds. */
    unsigned seed = 7;
    for (int trial = 0; trial < 20; trial++) {
        int len[8], total = 0;
        for (int r = 0; r < 8; r++) {
            seed = seed * 1103515245u + 12345u;
            len[r] = 64 + (int)(seed >> 8) % 4000;
            total += len[r];
        }
        if ((total / 64 + 8) * 8 > 8192) continue;
        const int n = prefill_items(items, 8, len, 8, trial & 1);
        (void)publisher_rounds(items, n);
    }
}

/* Key ranges as plan computes them (fa3_item_keys). */
static void test_item_keys(void)
{
    int32_t lo, hi;
    /* Decode token at position 999 of 1000 keys: all of them; a window of
     * 256 keeps the last 256. */
    fa3_item_keys(1, 0, 0, 1000, 999, 1, &lo, &hi);
    CHECK(lo == 0 && hi == 1000);
    fa3_item_keys(1, 0, 256, 1000, 999, 1, &lo, &hi);
    CHECK(lo == 744 && hi == 1000);
    /* Causal prefill tile of 16 tokens from position 100: keys up to 115. */
    fa3_item_keys(1, 0, 0, 200, 100, 16, &lo, &hi);
    CHECK(lo == 0 && hi == 116);
    /* A decode request with no keys (seq 0, its token at position -1), causal
     * or not, with or without a window: the empty range [0, 0), no tiles. */
    for (int causal = 0; causal <= 1; causal++)
        for (int window = 0; window <= 4096; window += 4096) {
            lo = hi = -7;
            fa3_item_keys(causal, 0, window, 0, -1, 1, &lo, &hi);
            CHECK_MSG(lo == 0 && hi == 0, "causal %d window %d: [%d, %d)", causal, window, lo, hi);
            CHECK(fa3_tiles(lo, hi, BN) == 0);
        }
}

/* A decode batch mixing requests with keys and requests without: the empty
 * items sort last, and the layout keeps every item exactly once. */
static void test_empty_items_order(void)
{
    enum { N = 300 };
    static fa3_work items[N], tmp[N], out[N];
    static int32_t key[N];
    static int bucket[2 * 64 + 3];
    int max_key = 0, empty = 0;
    for (int k = 0; k < N; k++) {
        memset(&items[k], 0, sizeof items[k]);
        items[k].req = k;
        const int seq = k % 3 == 0 ? 0 : 1 + (k * 37) % (60 * BN);
        fa3_item_keys(1, 0, 0, seq, seq - 1, 1, &items[k].kv_lo, &items[k].kv_hi);
        empty += seq == 0;
        key[k] = fa3_sort_key(&items[k], BN);
        max_key = key[k] > max_key ? key[k] : max_key;
    }
    fa3_sort_by_key(tmp, items, key, N, max_key, bucket);
    for (int k = N - empty; k < N; k++) CHECK(tmp[k].kv_hi == 0 && tmp[k].req % 3 == 0);
    fa3_order_rounds(out, tmp, N, GRID, BN);
    static char seen[N];
    memset(seen, 0, sizeof seen);
    int dup = 0;
    for (int k = 0; k < N; k++) dup += seen[out[k].req]++ != 0;
    CHECK(dup == 0);
}

int main(void)
{
    test_item_keys();
    test_empty_items_order();
    for (int L = 4096; L <= 16384; L *= 2) test_causal_balance(L);
    test_flat_rounds_keep_order();
    test_publishers_lead();
    return check_report("test_fa3_order");
}
