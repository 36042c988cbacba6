/*
 * The work items' key ranges and the order of the work list for the
 * persistent grid (the sort by cost, then the rounds), in plain C so that a
 * CPU test checks them (test/test_fa3_order.c).
 *
 * CTA c of a grid of g runs items c, c + g, c + 2g, ..., a round of g at a
 * time. Items come sorted longest first. Plain round-robin would hand CTA 0
 * the longest item of every round: with causal prefill's item lengths (1
 * to L / 128 tiles) ~6% more than the average CTA's work, which the grid
 * waits for. So the rounds alternate direction (a snake): the CTA that got
 * a round's longest item gets the next one's shortest. A round whose items
 * all cost the same keeps plain order and does not turn the snake: its
 * order cannot change the balance, and for decode's equal items plain
 * order measured ~3% faster with the FP8-compute kernel.
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
 * vt_pub) ahead of items of equal cost, so that they run in the first rounds
 * and the readers of later rounds find their images out. A publisher loads
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

/* dst[0..n) = sorted[0..n) (longest first) in snake order for g CTAs. */
static inline void fa3_order_rounds(fa3_work *dst, const fa3_work *sorted, int n, int g, int BN)
{
    int reverse = 0;
    for (int first = 0; first < n; first += g) {
        const int len = n - first < g ? n - first : g;
        const fa3_work *a = &sorted[first], *z = &sorted[first + len - 1];
        const int flat = fa3_tiles(a->kv_lo, a->kv_hi, BN) == fa3_tiles(z->kv_lo, z->kv_hi, BN);
        for (int c = 0; c < len; c++)
            dst[first + (reverse && !flat ? len - 1 - c : c)] = sorted[first + c];
        if (!flat) reverse = !reverse;
    }
}

#endif
