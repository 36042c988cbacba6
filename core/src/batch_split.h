/*
 * Splitting a step's batch by phase: which leading requests are decode
 * requests, the two parts as views into the engine's arrays, and token-row
 * views of forward tensors. Nothing here allocates: the rebased
 * query_start_loc of the prefill part goes into a buffer the binding sized
 * from its limits at creation.
 */
#ifndef AH_BATCH_SPLIT_H
#define AH_BATCH_SPLIT_H

#include <attnhost/attnhost.h>

/* What one pass over query_start_loc_host found. */
typedef struct ah_split_scan {
    uint32_t nd;        /* leading requests of query_len <= qmax */
    uint32_t nd_tokens; /* their tokens: query_start_loc[nd] */
    uint32_t nd_max_q;  /* their longest query and sequence */
    uint32_t nd_max_seq;
    int decode_later; /* a request of query_len <= qmax follows a longer one */
} ah_split_scan;

void ah__split_scan(const ah_batch *b, uint32_t qmax, ah_split_scan *out);

/* One part of a split batch. The DLTensors point at the shape fields of the
 * same struct, so a part is built in place and never copied. */
typedef struct ah_batch_part {
    ah_batch batch;
    DLTensor qsl, seq, table, slots, enc, mip;
    int64_t qsl_shape, seq_shape, table_shape[2], slots_shape, enc_shape, mip_shape;
} ah_batch_part;

/* The first s->nd requests of b, every array a view of b's. */
void ah__batch_part_decode(ah_batch_part *p, const ah_batch *b, const ah_split_scan *s);

/* query_start_loc[nd..num_reqs] - query_start_loc[nd] into dst
 * (num_reqs - nd + 1 entries). */
void ah__split_rebase_qsl(const ah_batch *b, uint32_t nd, int32_t *dst);

/* The requests after s->nd: views of b's arrays, except query_start_loc,
 * which is qsl_host (filled by ah__split_rebase_qsl) on the host and
 * qsl_dev (its copy on the plugin's device) in the tensor. */
void ah__batch_part_prefill(ah_batch_part *p, const ah_batch *b, const ah_split_scan *s,
                            const int32_t *qsl_host, void *qsl_dev);

/* Rows [r0, r0 + n) of a tensor whose dim 0 is the token: *view shares t's
 * strides and dtype, its shape is written to shape[] (t->ndim <= 4 entries)
 * and its data pointer moves by r0 rows. Returns 0, or -1 when the view's
 * address (data + byte_offset) is not 16-byte aligned. */
int ah__row_view(const DLTensor *t, int64_t r0, int64_t n, DLTensor *view, int64_t *shape);

#endif
