/*
 * The work list's order for the persistent grid (src/fa3_order.h), on the
 * CPU: it is a permutation; causal prefill's items (lengths 1 to L / 128
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
    for (int k = 0; k < 6; k++) CHECK_MSG(out[k].req == want[k], "position %d holds item %d", k, out[k].req);
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
    for (int k = 0; k < n; k++) late += !items[k].vt_pub && k / GRID < pub_round[items[k].req][items[k].kvh];
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
            CHECK_MSG(publisher_rounds(items, n) == 0, "causal %d L %d: a publisher after the first round",
                      causal, L);
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

int main(void)
{
    for (int L = 4096; L <= 16384; L *= 2) test_causal_balance(L);
    test_flat_rounds_keep_order();
    test_publishers_lead();
    return check_report("test_fa3_order");
}
