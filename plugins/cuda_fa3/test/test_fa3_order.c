/*
 * The work items' key ranges and the work list's order for the persistent
 * grid (src/fa3_order.h), on the CPU: a decode request with no keys
 * (AH_FEAT_EMPTY_KV) gets an item of no tiles, sorted last and laid out
 * once; the order is a permutation; causal prefill's items (lengths 1 to L / 128
 * tiles) leave no CTA more than 1% above the average load, where plain
 * round-robin leaves CTA 0 ~6% above; equal items go round robin; V^T
 * publishers start with the first items and never after one of their
 * readers; no page the kernels read can be a released block; a V^T
 * publisher reads every box its readers read; L2 sections keep the items
 * running at once within two sections and the loads balanced.
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

/* The layout plan makes (fa3_assign_ctas) of sorted[0..n) for g CTAs:
 * dst, cta_work, each dst item's start (its CTA's load before it) and the
 * largest CTA load over the mean (fa3_item_load's costs). */
enum { MAXN = 8192 };
static int32_t cta_work[GRID + 1];
static double lay_out(fa3_work *dst, const fa3_work *sorted, int n, int g, int64_t *start)
{
    enum { MAX_LOAD = 1024 };
    static int64_t scratch[GRID + (2 * (MAX_LOAD + 1) + GRID + MAXN) / 2 + 1];
    int max_load = 0;
    for (int k = 0; k < n; k++)
        if (fa3_item_load(&sorted[k], BN) > max_load) max_load = fa3_item_load(&sorted[k], BN);
    CHECK(max_load <= MAX_LOAD && fa3_assign_scratch(n, g, max_load) <= sizeof scratch);
    fa3_assign_ctas(dst, cta_work, sorted, n, g, BN, max_load, scratch);
    CHECK(cta_work[0] == 0 && cta_work[g] == n);
    double sum = 0, worst = 0;
    for (int c = 0; c < g; c++) {
        int64_t t = 0;
        for (int k = cta_work[c]; k < cta_work[c + 1]; k++) {
            if (start) start[k] = t;
            t += fa3_item_load(&dst[k], BN);
        }
        sum += (double)t;
        worst = (double)t > worst ? (double)t : worst;
    }
    return worst / (sum / g);
}

static void test_causal_balance(int L)
{
    static fa3_work sorted[2048], out[2048];
    const int n = causal_items(sorted, 16384 / L, 16, L);
    const double listed = lay_out(out, sorted, n, GRID, NULL);
    static char seen[2048];
    memset(seen, 0, sizeof seen);
    int dup = 0;
    for (int k = 0; k < n; k++) dup += seen[out[k].req]++ != 0;
    CHECK(dup == 0);
    const double plain = worst_over_mean(sorted, n, GRID);
    CHECK_MSG(plain > 1.04, "L %d: plain round-robin %.4f of the mean", L, plain);
    CHECK_MSG(listed < 1.01, "L %d: list scheduling %.4f of the mean", L, listed);
}

static void test_equal_items_round_robin(void)
{
    /* Decode: 512 items of 32 tiles each, then 10 shorter ones. */
    static fa3_work sorted[522], out[522];
    for (int k = 0; k < 522; k++) {
        memset(&sorted[k], 0, sizeof sorted[k]);
        sorted[k].req = k;
        sorted[k].kv_hi = (k < 512 ? 32 : 8) * BN;
    }
    /* Equal items go round robin: CTA c runs items c, c + g, ... in order. */
    (void)lay_out(out, sorted, 512, GRID, NULL);
    for (int c = 0; c < GRID; c++)
        for (int k = cta_work[c], j = 0; k < cta_work[c + 1]; k++, j++)
            CHECK_MSG(out[k].req == c + j * GRID, "CTA %d's item %d is %d", c, j, out[k].req);
    /* Fewer items than CTAs: one each, the rest idle. */
    (void)lay_out(out, sorted + 500, 22, GRID, NULL);
    for (int c = 0; c < GRID; c++) CHECK(cta_work[c + 1] - cta_work[c] == (c < 22));
    for (int k = 0; k < 22; k++) CHECK(out[k].req == 500 + k);
    /* Costs 4 3 2 2 1 0 (loads 8 7 6 6 5 4) on two CTAs: each item to the
     * less loaded one: CTA 0 runs items 0, 3, 5 (load 18), CTA 1 1, 2, 4. */
    const int cost[6] = {4, 3, 2, 2, 1, 0};
    for (int k = 0; k < 6; k++) {
        sorted[k].req = k;
        sorted[k].kv_hi = cost[k] * BN;
    }
    (void)lay_out(out, sorted, 6, 2, NULL);
    const int want[6] = {0, 3, 5, 1, 2, 4};
    CHECK(cta_work[1] == 3);
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

/* Sort (in nsec L2 sections) and lay out as plan does; no reader starts
 * before its publisher. Returns the latest publisher's start. */
static int64_t publisher_starts(fa3_work *items, int n, int nsec)
{
    static fa3_work tmp[MAXN];
    static int32_t key[MAXN];
    static int64_t start[MAXN], pub_start[64][16];
    static int bucket[2 * (16384 / BN) + 3]; /* keys reach 2 * 128 + 1 */
    int max_key = 0;
    for (int k = 0; k < n; k++) {
        key[k] = fa3_sort_key(&items[k], BN);
        max_key = key[k] > max_key ? key[k] : max_key;
    }
    fa3_sort_items(items, tmp, key, n, max_key, nsec, bucket);
    for (int k = 1; k < n; k++) /* by section, then longest first */
        CHECK(tmp[k - 1].section < tmp[k].section ||
              (tmp[k - 1].section == tmp[k].section &&
               fa3_sort_key(&tmp[k - 1], BN) >= fa3_sort_key(&tmp[k], BN)));
    (void)lay_out(items, tmp, n, GRID, start);
    int64_t last = 0;
    for (int k = 0; k < n; k++)
        if (items[k].vt_pub) {
            pub_start[items[k].req][items[k].kvh] = start[k];
            last = start[k] > last ? start[k] : last;
        }
    int early = 0;
    for (int k = 0; k < n; k++)
        early += !items[k].vt_pub && start[k] < pub_start[items[k].req][items[k].kvh];
    CHECK_MSG(early == 0, "%d readers start before their publisher", early);
    return last;
}

static void test_publishers_lead(void)
{
    static fa3_work items[MAXN];
    for (int causal = 0; causal <= 1; causal++)
        for (int L = 4096; L <= 16384; L *= 2) {
            int len[4] = {L, L, L, L};
            const int n = prefill_items(items, 16384 / L, len, 16, causal);
            CHECK_MSG(publisher_starts(items, n, 1) == 0,
                      "causal %d L %d: a publisher starts after the first items", causal, L);
        }
    /* Requests of uneven lengths, causal or not, in one L2 section or cut
     * into three as plan cuts them (a pair's bytes: its request's keys):
     * the rule still holds. */
    unsigned seed = 7;
    for (int trial = 0; trial < 40; trial++) {
        int len[8], total = 0;
        for (int r = 0; r < 8; r++) {
            seed = seed * 1103515245u + 12345u;
            len[r] = 64 + (int)(seed >> 8) % 4000;
            total += len[r];
        }
        if ((total / 64 + 8) * 8 > 8192) continue;
        const int n = prefill_items(items, 8, len, 8, trial & 1);
        const int64_t all = (int64_t)total * 8;
        const int nsec = trial & 2 ? fa3_section_count(all, all / 3 + 1) : 1;
        CHECK(nsec == (trial & 2 ? 3 : 1));
        int64_t before = 0; /* K and V of the earlier requests' pairs */
        for (int k = 0; k < n; k++) {
            const int r = items[k].req;
            if (k && r != items[k - 1].req) before += 8LL * len[items[k - 1].req];
            items[k].section = nsec > 1 ? fa3_section_of(before + items[k].kvh * (int64_t)len[r],
                                                         len[r], all, nsec)
                                        : 0;
        }
        (void)publisher_starts(items, n, nsec);
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
    (void)lay_out(out, tmp, N, GRID, NULL);
    static char seen[N];
    memset(seen, 0, sizeof seen);
    int dup = 0;
    for (int k = 0; k < N; k++) dup += seen[out[k].req]++ != 0;
    CHECK(dup == 0);
}

/* L2 sections as plan assigns them (fa3_section_count, fa3_section_of),
 * sorted by fa3_sort_items: a causal prefill of 4 x 2048 tokens at 32 KV
 * heads (MHA, d128 bf16: 1 MiB of K and V per request and head, 128 MiB
 * in all) under a 25 MiB budget, beside 40 decode items. The list runs the
 * decodes first, then section by section, longest first in each; no
 * section's keys exceed the budget, and a round of the grid spans at most
 * two sections; the CTAs' loads stay balanced; every item appears once. */
static void test_l2_sections(void)
{
    enum { REQS = 4, HEADS = 32, TILES = 16, DEC = 40, DEC_TILES = 20 };
    enum { N = REQS * HEADS * TILES + DEC };
    static fa3_work items[N], sorted[N], out[N];
    static int32_t key[N];
    static int bucket[2 * DEC_TILES + 3]; /* keys reach 2 * 20: the decodes */
    const int64_t pair = 2048LL * 256 * 2, total = pair * REQS * HEADS, budget = 25LL << 20;
    const int nsec = fa3_section_count(total, budget);
    CHECK(nsec == 6);
    CHECK(fa3_section_count(total, total) == 1 && fa3_section_count(total, 0) == 1);
    int n = 0, max_key = 0;
    for (int d = 0; d < DEC; d++, n++) {
        memset(&items[n], 0, sizeof items[n]);
        items[n].req = REQS + d;
        items[n].kv_hi = (1 + d % DEC_TILES) * BN;
    }
    for (int r = 0; r < REQS; r++)
        for (int t = 0; t < TILES; t++)
            for (int h = 0; h < HEADS; h++, n++) {
                memset(&items[n], 0, sizeof items[n]);
                items[n].req = r;
                items[n].kvh = h;
                items[n].q_tok0 = t;
                items[n].kv_hi = (t + 1) * BN;
                items[n].section = fa3_section_of((r * HEADS + h) * pair, pair, total, nsec);
            }
    for (int k = 0; k < n; k++) {
        key[k] = fa3_sort_key(&items[k], BN);
        max_key = key[k] > max_key ? key[k] : max_key;
    }
    fa3_sort_items(items, sorted, key, n, max_key, nsec, bucket);
    for (int k = 0; k < n; k++) sorted[k].pos0 = k; /* identity: the place in the list */
    static int pairs[8];
    for (int k = 0; k < n; k++) {
        const fa3_work *a = &sorted[k];
        CHECK(a->section >= 0 && a->section <= nsec);
        CHECK(a->section == 0 || a->req < REQS); /* decodes in section 0 only */
        if (a->section && a->q_tok0 == 0) pairs[a->section]++;
        if (k == 0) continue;
        const fa3_work *p = &sorted[k - 1];
        CHECK(p->section <= a->section);
        CHECK(p->section < a->section || fa3_sort_key(p, BN) >= fa3_sort_key(a, BN));
    }
    for (int s = 1; s <= nsec; s++)
        CHECK_MSG(pairs[s] * pair <= budget, "section %d holds %d pairs", s, pairs[s]);
    static int64_t start[N], start_of[N];
    const double worst = lay_out(out, sorted, n, GRID, start);
    static char seen[N];
    int dup = 0;
    for (int k = 0; k < n; k++) dup += seen[out[k].pos0]++ != 0;
    CHECK(dup == 0);
    /* the list's order is the order in time, so the items running at once
     * are a stretch of the list: any GRID of them span two sections at most */
    for (int k = 0; k < n; k++) start_of[out[k].pos0] = start[k];
    for (int k = 1; k < n; k++) CHECK(start_of[k - 1] <= start_of[k]);
    for (int k = 0; k + GRID <= n; k++)
        CHECK_MSG(sorted[k + GRID - 1].section - sorted[k].section <= 1,
                  "items %d to %d span sections %d to %d", k, k + GRID - 1, sorted[k].section,
                  sorted[k + GRID - 1].section);
    CHECK_MSG(worst < 1.03, "sectioned order: %.4f of the mean", worst);
}

int main(void)
{
    test_item_keys();
    test_released_never_read();
    test_vt_publisher_window();
    test_empty_items_order();
    for (int L = 4096; L <= 16384; L *= 2) test_causal_balance(L);
    test_equal_items_round_robin();
    test_publishers_lead();
    test_l2_sections();
    return check_report("test_fa3_order");
}
