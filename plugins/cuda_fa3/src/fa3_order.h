/*
 * The work items' key ranges and the order of the work list for the
 * persistent grid (the sort, then each CTA's share), in plain C so that a
 * CPU test checks them (test/test_fa3_order.c).
 *
 * Items come sorted by L2 section, longest first within each (below), and
 * go to the CTAs by list scheduling: each in turn to the CTA whose items so
 * far cost least, after them (fa3_assign_ctas). Longest first, that leaves
 * the CTAs within one short item of each other; the strided layout it
 * replaced (CTA c ran items c, c + g, ...; rounds in alternating
 * direction) left a CTA 3-15% above the average once sections break the
 * list's order into runs (DECISIONS.md). Items of equal cost go round
 * robin, so decode's equal items keep plain order.
 */
#ifndef FA3_ORDER_H
#define FA3_ORDER_H

#include "../kernels/fa3_params.h"

/* An item's cost: the BN-key tiles its key range [lo, hi) touches. */
static inline int fa3_tiles(int lo, int hi, int BN)
{
    return hi > lo ? (hi + BN - 1) / BN - lo / BN : 0;
}

/* The keys [*lo, *hi) that a query tile of q_ntok tokens from position
 * pos0 sees in a request of seq keys: causal and window limits applied, so
 * the kernels never visit an invisible KV tile. Nothing visible gives
 * [0, 0): an item of no tiles, which the kernels finish without a KV load
 * or a block-table read (out 0, LSE -inf, or the sink's). That is how a
 * decode request with no keys (seq 0, pos0 -1: AH_FEAT_EMPTY_KV) is
 * served: its cost is 0, so it is never split and never shares V^T, and
 * its block-table row is never read. */
static inline void fa3_item_keys(int causal, int cross, int window, int seq, int pos0, int q_ntok,
                                 int32_t *lo, int32_t *hi)
{
    const int pmax = pos0 + q_ntok - 1;
    int a = 0, b = seq;
    if (!cross) {
        if (causal) b = pmax + 1 < seq ? pmax + 1 : seq;
        else if (window) b = pmax + window < seq ? pmax + window : seq;
        if (window) a = pos0 - window + 1 > 0 ? pos0 - window + 1 : 0;
    }
    if (a >= b) a = b = 0;
    *lo = a;
    *hi = b;
}

/* Rows of one TMA box of a KV tile: the largest power of two from BN down
 * to 16 that divides both the block size and BN, so a box never crosses a
 * page (the block sizes served are multiples of 16). */
static inline int fa3_box_rows(int block_size, int BN)
{
    for (int c = BN; c >= 16; c /= 2)
        if (block_size % c == 0 && BN % c == 0) return c;
    return 16;
}

/* Whether the kernels read the page of the box of R rows from key position
 * pos for an item of keys [lo, hi): only a box holding one of those keys
 * (load_kv_tile and kv_tile_page in kernels/fa3_fwd_kernel.cuh; every other
 * box is aimed past the cache and zero-filled without a table read).
 *
 * Released blocks (AH_FEAT_RELEASED_BLOCKS) rest on this: lo is the first
 * key the item's first query sees (fa3_item_keys, or a split's later
 * start), at least the first key the request's first query sees, and a
 * box lies in one page, so every page read holds a visible key; the host
 * releases only blocks wholly before the request's first visible key. A
 * tile that begins before lo (tiles are larger than pages) has its hidden
 * boxes zero-filled, never addressed through their entries. */
static inline int fa3_box_read(int lo, int hi, int pos, int R) { return pos < hi && pos + R > lo; }

/* Whether an item may publish its request's V^T (FP8 compute, shared V^T;
 * fa3_work.vt_pub): the images it writes hold exactly the boxes it loads
 * (fa3_box_read), so its key range must contain every range its readers
 * load from: it starts at the request's lowest start req_lo and ends at
 * the request's end seq. With a sliding window the items' starts differ
 * inside one 128-key tile; a publisher starting after a reader's start
 * would hand that reader zero-filled V rows of keys it sees. */
static inline int fa3_vt_can_publish(const fa3_work *w, int req_lo, int seq)
{
    return w->kv_lo == req_lo && w->kv_hi == seq;
}

/* An item's sort key: its cost in tiles, then V^T publishers (fa3_work's
 * vt_pub) ahead of items of equal cost, so that they run first and the
 * readers that start later find their images out. A publisher loads
 * every tile its readers read, so it never costs less than they do: no
 * reader sorts ahead of its publisher. */
static inline int fa3_sort_key(const fa3_work *w, int BN)
{
    return 2 * fa3_tiles(w->kv_lo, w->kv_hi, BN) + w->vt_pub;
}

/* dst[0..n) = src[0..n) by key descending, stable (a counting sort: keys
 * are bounded by twice the longest item's tiles). bucket: max_key + 2 ints. */
static inline void fa3_sort_by_key(fa3_work *dst, const fa3_work *src, const int32_t *key, int n,
                                   int max_key, int *bucket)
{
    for (int c = 0; c < max_key + 2; c++) bucket[c] = 0;
    for (int i = 0; i < n; i++) bucket[max_key - key[i] + 1]++;
    for (int c = 1; c <= max_key + 1; c++) bucket[c] += bucket[c - 1];
    for (int i = 0; i < n; i++) dst[bucket[max_key - key[i]]++] = src[i];
}

/* L2 sections. A request's query tiles of one KV head read the same keys.
 * Sorted longest first across the whole batch, the items running at once
 * are one query tile each of as many (request, KV head) pairs as there are
 * CTAs; once their keys outgrow the L2, each query tile reads every key
 * tile from HBM again (4 x 2048 tokens at 32/32 heads, d128: 128 MiB of K
 * and V, each tile read by 8.5 query tiles on average). So the pairs of
 * requests with more than one query tile are cut, in batch order, into
 * sections of about equal K and V bytes, each within a budget (half the L2
 * by default, the config key l2_section_mib), and the work list runs
 * section by section, longest first within each. Items of requests with
 * one query tile (decodes: nothing to share) form section 0 and run first,
 * so that the list still ends with short items. Keys that fit one section
 * keep the plain cost order. */
static inline int fa3_section_count(int64_t shared_bytes, int64_t budget)
{
    return budget > 0 && shared_bytes > budget ? (int)((shared_bytes + budget - 1) / budget) : 1;
}

/* The section (1 .. nsec) of a pair whose pair_bytes of K and V follow
 * `before` bytes of earlier pairs, out of `total`: its middle decides. */
static inline int fa3_section_of(int64_t before, int64_t pair_bytes, int64_t total, int nsec)
{
    const int s = 1 + (int)((before + pair_bytes / 2) * nsec / total);
    return s < nsec ? s : nsec;
}

/* sorted[0..n) = work[0..n) by section ascending, then key descending
 * (fa3_sort_key, given in key[], at most max_key), stable; work and key
 * are clobbered. bucket: max(max_key, nsec) + 2 ints. */
static inline void fa3_sort_items(fa3_work *work, fa3_work *sorted, int32_t *key, int n,
                                  int max_key, int nsec, int *bucket)
{
    fa3_sort_by_key(sorted, work, key, n, max_key, bucket);
    if (nsec <= 1) return;
    for (int i = 0; i < n; i++) key[i] = nsec - sorted[i].section;
    fa3_sort_by_key(work, sorted, key, n, nsec, bucket);
    for (int i = 0; i < n; i++) sorted[i] = work[i];
}

/* An item's cost to its CTA: its key tiles plus a fixed cost per item
 * (Q load, epilogue, pipeline fill: about four tiles' time). */
static inline int fa3_item_load(const fa3_work *w, int BN)
{
    return 4 + fa3_tiles(w->kv_lo, w->kv_hi, BN);
}

/* Lay sorted[0..n) out for g CTAs by list scheduling: each item in turn
 * goes to the CTA with the least load so far (among equals the one that
 * reached that load first; at the start, the lowest index) and runs after
 * its earlier items. dst holds CTA 0's items, then CTA 1's, ...: CTA c
 * runs dst[cta_work[c] .. cta_work[c + 1]). An item's start, the load its
 * CTA had, never decreases along the list, so the list's order is the
 * order in time; items of equal cost go round robin.
 *
 * The CTAs wait in a bucket queue by load: every load queued lies within
 * max_load (the largest fa3_item_load) of the least, so a ring of
 * max_load + 1 buckets holds one load each, first come first out, and the
 * least only grows: O(n + g + the final least load), where a heap took
 * log g unpredictable compares per item (3x the time at 2048 items here).
 * scratch: fa3_assign_scratch(n, g, max_load) bytes. */
static inline size_t fa3_assign_scratch(int n, int g, int max_load)
{
    return sizeof(int) * (2 * (size_t)(max_load + 1) + (size_t)g + (size_t)n);
}
static inline void fa3_assign_ctas(fa3_work *dst, int32_t *cta_work, const fa3_work *sorted, int n,
                                   int g, int BN, int max_load, void *scratch)
{
    const int nb = max_load + 1;
    int *head = (int *)scratch, *tail = head + nb, *link = tail + nb, *cta_of = link + g;
    for (int b = 0; b < nb; b++) head[b] = -1;
    for (int c = 0; c < g; c++) cta_work[c] = 0, link[c] = c + 1 < g ? c + 1 : -1;
    head[0] = 0, tail[0] = g - 1; /* every CTA at load 0, by index */
    int least = 0;                /* the least load's bucket */
    for (int i = 0; i < n; i++) {
        while (head[least] < 0) least = least + 1 < nb ? least + 1 : 0;
        const int c = head[least];
        head[least] = link[c];
        cta_of[i] = c;
        cta_work[c]++;
        int b = least + fa3_item_load(&sorted[i], BN); /* c's load is the least */
        if (b >= nb) b -= nb;
        link[c] = -1;
        if (head[b] < 0) head[b] = c;
        else link[tail[b]] = c;
        tail[b] = c;
    }
    int at = 0; /* counts to offsets: cta_work[c] is CTA c's first item */
    for (int c = 0; c <= g; c++) {
        const int k = c < g ? cta_work[c] : 0;
        cta_work[c] = at;
        at += k;
    }
    int *next = link; /* the queue is done: each CTA's next free slot */
    for (int c = 0; c < g; c++) next[c] = cta_work[c];
    for (int i = 0; i < n; i++) dst[next[cta_of[i]]++] = sorted[i];
}

#endif
