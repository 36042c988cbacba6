/*
 * Cache blocks split into kernel blocks (kv_split.h). The translation is
 * one pass over the entries the batch's sequences cover: its cost per step
 * is that many entries times m, plus the copy of the table to the device
 * (bench_host --kernel-split measures it).
 */
#include "kv_split.h"

#include <stdio.h>
#include <string.h>

uint32_t ah__kernel_block(const ah_int_set *set, uint32_t block_size)
{
    for (uint32_t m = 2; m <= block_size; m++)
        if (block_size % m == 0 && ah_int_set_contains(set, block_size / m)) return block_size / m;
    return 0;
}

/* Cache block e's m kernel blocks, e * m .. e * m + m - 1 (or e, m times,
 * for a released entry), four per store: GCC's vector extension, which
 * every target lowers to its own SIMD. */
typedef int32_t v4i32 __attribute__((vector_size(16)));
static void expand4(int32_t *o, int32_t e, int32_t m)
{
    const v4i32 ramp = {0, 1, 2, 3};
    v4i32 v = e < 0 ? (v4i32){e, e, e, e} : (v4i32){0, 0, 0, 0} + e * m + ramp;
    const v4i32 step = e < 0 ? (v4i32){0, 0, 0, 0} : (v4i32){4, 4, 4, 4};
    for (int32_t j = 0; j < m; j += 4, v += step) memcpy(o + j, &v, sizeof v);
}

ah_status ah__kv_split_table(const ah_batch *b, uint32_t bs, uint32_t m, uint32_t max_reqs,
                             uint32_t max_blocks, int fixed_width, int32_t *out, uint32_t *stride,
                             char *err, size_t cap)
{
    const int32_t *enc = ah_batch_encoder_seq_lens(b);
    if (b->num_reqs > max_reqs) {
        snprintf(err, cap, "batch: num_reqs = %u exceeds limits.max_num_reqs %u", b->num_reqs,
                 max_reqs);
        return AH_ERR_INVALID_ARGUMENT;
    }
    uint32_t widest = 0;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t len = b->seq_lens_host[r];
        if (enc && enc[r] > len) len = enc[r];
        const uint64_t need = len > 0 ? ((uint64_t)len + bs - 1) / bs : 0;
        if (need > max_blocks || need > b->block_table_stride) {
            snprintf(err, cap,
                     "batch: request %u needs %llu blocks of %u tokens, but the block table rows "
                     "hold %u and limits.max_blocks_per_req is %u",
                     r, (unsigned long long)need, bs, b->block_table_stride, max_blocks);
            return AH_ERR_INVALID_ARGUMENT;
        }
        if (need > widest) widest = (uint32_t)need;
    }
    const uint32_t w = (fixed_width ? max_blocks : widest ? widest : 1) * m;
    for (uint32_t r = 0; r < b->num_reqs; r++) {
        int64_t len = b->seq_lens_host[r];
        if (enc && enc[r] > len) len = enc[r];
        const uint32_t need = len > 0 ? (uint32_t)(((uint64_t)len + bs - 1) / bs) : 0;
        const int32_t *row = b->block_table_host + (size_t)r * b->block_table_stride;
        int32_t *o = out + (size_t)r * w;
        if (m % 4 == 0) { /* four kernel blocks a store (m is 2^k in practice) */
            for (uint32_t i = 0; i < need; i++) expand4(o + (size_t)i * m, row[i], (int32_t)m);
            continue;
        }
        for (uint32_t i = 0; i < need; i++) {
            const int32_t e = row[i];
            if (e < 0) { /* released: every kernel block of it stays released */
                for (uint32_t j = 0; j < m; j++) o[(size_t)i * m + j] = e;
            } else {
                const int32_t base = e * (int32_t)m;
                for (uint32_t j = 0; j < m; j++) o[(size_t)i * m + j] = base + (int32_t)j;
            }
        }
    }
    *stride = w;
    return AH_OK;
}

void ah__kv_split_batch(ah__kv_split *s, const ah_batch *b, uint32_t stride)
{
    s->batch = *b;
    s->table_shape[0] = b->num_reqs;
    s->table_shape[1] = stride;
    s->table.shape = s->table_shape;
    s->table.strides = NULL;
    s->table.byte_offset = 0;
    s->table.data = s->dev ? s->dev : (void *)s->host;
    s->batch.block_table = &s->table;
    s->batch.block_table_host = s->host;
    s->batch.block_table_stride = stride;
    s->batch.num_blocks = b->num_blocks * s->m;
}

void ah__kv_split_cache(const DLTensor *t, uint32_t m, DLTensor *view, int64_t *shape,
                        int64_t *strides)
{
    *view = *t;
    shape[0] = t->shape[0] * m;
    shape[1] = t->shape[1] / m;
    shape[2] = t->shape[2];
    shape[3] = t->shape[3];
    strides[3] = 1;
    for (int i = 2; i >= 0; i--) strides[i] = strides[i + 1] * shape[i + 1];
    view->shape = shape;
    view->strides = strides;
}
