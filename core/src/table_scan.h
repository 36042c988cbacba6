/*
 * The hot loop of batch validation: the largest block id a batch uses.
 */
#ifndef AH_TABLE_SCAN_H
#define AH_TABLE_SCAN_H

#include <stdint.h>

/* n / d and n % d for a fixed d, by shift and mask when d is a power of two
 * (block sizes almost always are): a hardware divide per request costs as
 * much as the rest of a step's checks. */
typedef struct ah_divider {
    uint64_t d, mask;
    unsigned shift;
    int pow2;
} ah_divider;

static inline ah_divider ah__divider(uint32_t d)
{
    ah_divider v = {d, (uint64_t)d - 1, 0, d && (d & (d - 1)) == 0};
    while (v.pow2 && (1ull << v.shift) < d) v.shift++;
    return v;
}
static inline uint64_t ah__div(const ah_divider *v, uint64_t n)
{
    return v->pow2 ? n >> v->shift : n / v->d;
}
static inline uint64_t ah__mod(const ah_divider *v, uint64_t n)
{
    return v->pow2 ? n & v->mask : n % v->d;
}
/* Blocks that hold n tokens. */
static inline uint64_t ah__blocks_for(const ah_divider *v, uint64_t n)
{
    return ah__div(v, n + v->d - 1);
}

/* The largest of each request's first ceil(seq_lens[r] / block_size) block
 * ids, read as unsigned so a negative id counts as huge. Rows must already
 * be known to be wide enough (stride) and seq_lens non-negative. */
uint32_t ah__table_max_unsigned(const int32_t *table, uint32_t stride, const int32_t *seq_lens,
                                uint32_t num_reqs, const ah_divider *block_size);

#endif
