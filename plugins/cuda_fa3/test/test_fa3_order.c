/*
 * The work list's order for the persistent grid (src/fa3_order.h), on the
 * CPU: it is a permutation; causal prefill's items (lengths 1 to L / 128
 * tiles) leave no CTA more than 1% above the average load, where plain
 * round-robin leaves CTA 0 ~6% above; rounds of equal items keep their
 * order.
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
 * of four tiles (the kernels' fixed cost per item, NOTES v8). */
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

int main(void)
{
    for (int L = 4096; L <= 16384; L *= 2) test_causal_balance(L);
    test_flat_rounds_keep_order();
    return check_report("test_fa3_order");
}
