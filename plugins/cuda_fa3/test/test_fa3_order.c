/*
 * The work items' key ranges and the work list's order for the persistent
 * grid (src/fa3_order.h), on the CPU: a decode request with no keys
 * (AH_FEAT_EMPTY_KV) gets an item of no tiles, sorted last and laid out
 * once; the order is a permutation; causal prefill's items (lengths 1 to L / 128
 * tiles) leave no CTA more than 1% above the average load, where plain
 * round-robin leaves CTA 0 ~6% above; rounds of equal items keep their
 * order; V^T publishers run in the first round and never after one of
 * their readers; no page the kernels read can be a released block; a V^T
 * publisher reads every box its readers read.
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

/* A split of an item's keys into s parts along BN-key tiles, as plan
 * splits long items: part k of [lo, hi). */
static void split_part(int lo, int hi, int s, int k, int BNs, int32_t *a, int32_t *z)
{
    const int t_lo = lo / BNs, t_hi = (hi + BNs - 1) / BNs;
    const int ta = t_lo + (t_hi - t_lo) * k / s, tz = t_lo + (t_hi - t_lo) * (k + 1) / s;
    *a = ta * BNs > lo ? ta * BNs : lo;
    *z = tz * BNs < hi ? tz * BNs : hi;
}

/* Page reads of one request (query tiles of tpt tokens, each split in 1..3
 * parts) that the host may have released: counted in c[0]; c[1] counts
 * the pages read, c[2] the boxes skipped before an item's first key. */
static void released_reads(int causal, int W, int bs, int BNs, int seq, int qlen, int tpt,
                           long c[3])
{
    const int p0 = seq - qlen, R = fa3_box_rows(bs, BNs);
    for (int t0 = 0; t0 < qlen; t0 += tpt) {
        const int ntok = qlen - t0 < tpt ? qlen - t0 : tpt;
        int32_t lo, hi;
        fa3_item_keys(causal, 0, W, seq, p0 + t0, ntok, &lo, &hi);
        for (int s = 1; s <= 3; s++)
            for (int k = 0; k < s; k++) {
                int32_t a, z;
                split_part(lo, hi, s, k, BNs, &a, &z);
                for (int pos = a / BNs * BNs; pos < z; pos += R) {
                    if (!fa3_box_read(a, z, pos, R)) {
                        c[2] += pos < a;
                        continue;
                    }
                    c[1]++;
                    c[0] += (pos / bs + 1) * bs - 1 <= p0 - W;
                }
            }
    }
}

/* Released blocks (AH_FEAT_RELEASED_BLOCKS): over windows, block sizes,
 * both tile widths, query tiles and KV splits, every page the kernels
 * read (fa3_box_read over each tile's boxes) holds a key the request's
 * first query sees, so the host's rule (a block is released only when its
 * last position is at most p0 - window) never released it. The boxes
 * skipped in tiles that begin before an item's first key are counted, so
 * the test is known to reach them. */
static void test_released_never_read(void)
{
    static const int windows[] = {1, 7, 100, 128, 300, 1000}, bss[] = {16, 32, 48, 64, 256, 1024},
                     seqs[] = {1, 129, 1000, 5000}, qlens[] = {1, 5, 64, 200, 5000},
                     tpts[] = {16, 64, 128};
    long c[3] = {0, 0, 0};
    for (int causal = 0; causal <= 1; causal++)
        for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++)
            for (size_t bi = 0; bi < sizeof bss / sizeof *bss; bi++)
                for (int BNs = 64; BNs <= 128; BNs *= 2)
                    for (size_t si = 0; si < sizeof seqs / sizeof *seqs; si++)
                        for (size_t qi = 0; qi < sizeof qlens / sizeof *qlens; qi++)
                            for (size_t ti = 0; ti < sizeof tpts / sizeof *tpts; ti++)
                                if (qlens[qi] <= seqs[si])
                                    released_reads(causal, windows[wi], bss[bi], BNs, seqs[si],
                                                   qlens[qi], tpts[ti], c);
    const long bad = c[0], read = c[1], skipped = c[2];
    CHECK_MSG(bad == 0, "%ld page reads of blocks the host may release (of %ld)", bad, read);
    CHECK_MSG(skipped > 0 && read > 0, "no box before an item's first key was met");
    /* A decode token at 2999 with a window of 100 sees 2900 on; its
     * 128-key tile begins at 2816, and pages of 16 up to 2895 (blocks
     * 0..180) may be released: the boxes 2816..2895 are not read, 2896 is. */
    int32_t lo, hi;
    fa3_item_keys(1, 0, 100, 3000, 2999, 1, &lo, &hi);
    CHECK(lo == 2900 && hi == 3000);
    CHECK(!fa3_box_read(lo, hi, 2880, 16) && fa3_box_read(lo, hi, 2896, 16));
}

/* The shared V^T's publisher (fa3_vt_can_publish): without a window the
 * request's last query tile publishes; with one whose items start at
 * different keys of the same 128-key tile (window 100 over a 256-token
 * prefill: starts 0 and 29) none may, since the last tile's images would
 * miss keys 0..28 that the first tile reads. Wherever an item may
 * publish, every box another item of the request reads, it reads too. */
static void test_vt_publisher_window(void)
{
    for (int W = 0; W <= 1000; W += W < 8 ? 1 : 37)
        for (int seq = 128; seq <= 1200; seq += 181) {
            fa3_work it[16];
            int n = 0, req_lo = 0x7fffffff, pubs = 0;
            for (int t0 = 0; t0 < seq && n < 16; t0 += 128, n++) {
                memset(&it[n], 0, sizeof it[n]);
                const int ntok = seq - t0 < 128 ? seq - t0 : 128;
                fa3_item_keys(1, 0, W, seq, t0, ntok, &it[n].kv_lo, &it[n].kv_hi);
                req_lo = it[n].kv_lo < req_lo ? it[n].kv_lo : req_lo;
            }
            for (int p = 0; p < n; p++) {
                if (!fa3_vt_can_publish(&it[p], req_lo, seq)) continue;
                pubs++;
                for (int r = 0; r < n; r++)
                    for (int pos = it[r].kv_lo / 16 * 16; pos < it[r].kv_hi; pos += 16)
                        CHECK_MSG(!fa3_box_read(it[r].kv_lo, it[r].kv_hi, pos, 16) ||
                                      fa3_box_read(it[p].kv_lo, it[p].kv_hi, pos, 16),
                                  "W %d seq %d: item %d reads box %d, publisher %d does not", W,
                                  seq, r, pos, p);
            }
            if (!W) CHECK_MSG(pubs == 1, "W 0 seq %d: %d publishers", seq, pubs);
        }
    fa3_work a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    fa3_item_keys(1, 0, 100, 256, 0, 128, &a.kv_lo, &a.kv_hi);
    fa3_item_keys(1, 0, 100, 256, 128, 128, &b.kv_lo, &b.kv_hi);
    CHECK(a.kv_lo == 0 && b.kv_lo == 29 && b.kv_hi == 256);
    CHECK(!fa3_vt_can_publish(&a, 0, 256) && !fa3_vt_can_publish(&b, 0, 256));
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
    test_released_never_read();
    test_vt_publisher_window();
    test_empty_items_order();
    for (int L = 4096; L <= 16384; L *= 2) test_causal_balance(L);
    test_flat_rounds_keep_order();
    test_publishers_lead();
    return check_report("test_fa3_order");
}
