/*
 * Cache blocks split into kernel blocks (ABI 2.3: KV-cache layout). An
 * engine whose KV-cache block B is not among a plugin's block sizes but is
 * a multiple m of one (k = B / m) still binds it: the plugin is planned
 * with block size k over a block table in kernel blocks. Slot numbers stay
 * the same (slot = e * B + o = (e * m + o / k) * k + o % k); each
 * block-table entry e becomes e * m .. e * m + m - 1, a released (negative)
 * entry m negative entries; the cache tensors, dense NHD, are the same
 * memory viewed as [num_blocks * m, k, Hk, head].
 */
#ifndef AH_KV_SPLIT_H
#define AH_KV_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include <attnhost/attnhost.h>

#include "batch_split.h"

/* The largest member of set that divides block_size and is smaller, or 0. */
uint32_t ah__kernel_block(const ah_int_set *set, uint32_t block_size);

/* The kernel-block table of batch b (one KV-cache group's paging, cache
 * block size block_size) for m kernel blocks per cache block, into out
 * (max_reqs * max_blocks * m entries, row-major). Row r gets the entries its
 * keys cover: ceil(max(seq_lens[r], encoder_seq_lens[r]) / block_size)
 * cache blocks, each as m kernel blocks; the rest of the row is left as it
 * was. Rows are *stride entries apart: m times the widest row of the batch,
 * or m * max_blocks with fixed_width (a captured graph keeps its shape).
 * AH_ERR_INVALID_ARGUMENT (message in err) when a row needs more than
 * max_blocks cache blocks or the table rows hold fewer than needed, or the
 * batch exceeds max_reqs: the buffer is never overrun, validation or not. */
ah_status ah__kv_split_table(const ah_batch *b, uint32_t block_size, uint32_t m, uint32_t max_reqs,
                             uint32_t max_blocks, int fixed_width, int32_t *out, uint32_t *stride,
                             char *err, size_t cap);

/* One translated paging: a group's batch in kernel blocks, for the plugins
 * of one binding device. */
typedef struct ah__kv_split {
    uint32_t group, m, dev_idx;
    uint32_t owner; /* the first state planned on it: its block sizes, plugin and context */
    int32_t *host;  /* max_reqs * max_blocks * m entries */
    void *dev;      /* its copy on the device, or NULL when the host buffer serves */
    DLTensor table; /* [num_reqs, stride] int32 over dev (or host) */
    int64_t table_shape[2];
    ah_batch batch;             /* the group's batch with the kernel-block paging */
    ah_batch_part dpart, ppart; /* the two parts of a split step */
} ah__kv_split;

/* s->batch: b with s's table (host copy and tensor of stride entries per
 * row), block size terms and num_blocks in kernel blocks. */
void ah__kv_split_batch(ah__kv_split *s, const ah_batch *b, uint32_t stride);

/* A dense NHD cache tensor of cache blocks as kernel blocks of m: shape
 * [shape0 * m, B / m, Hk, head], strides dense. view's shape and strides
 * point into shape and strides (4 entries each). */
void ah__kv_split_cache(const DLTensor *t, uint32_t m, DLTensor *view, int64_t *shape,
                        int64_t *strides);

#endif
