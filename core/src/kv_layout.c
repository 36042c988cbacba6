/*
 * KV-cache geometry (kv_layout.h). A dense layout is one row-major tensor
 * per cache; an interleaved one is the row-major [nb, 2, ...] tensor whose
 * index 0 and 1 of dim 1 are the key and value views.
 */
#include "kv_layout.h"

void ah__kv_geom_of(const ah_layer_spec *s, int64_t num_blocks, uint32_t head_size, int value,
                    ah__kv_geom *g)
{
    const int hnd = ah_kv_layout_is_hnd(s->kv_layout);
    const int inter = ah_kv_layout_is_interleaved(s->kv_layout);
    g->shape[0] = num_blocks;
    g->shape[1] = hnd ? s->num_kv_heads : s->block_size;
    g->shape[2] = hnd ? s->block_size : s->num_kv_heads;
    g->shape[3] = head_size;
    g->strides[3] = 1;
    for (int i = 2; i >= 0; i--) g->strides[i] = g->strides[i + 1] * g->shape[i + 1];
    const int64_t block = g->strides[0];
    g->offset = inter && value ? block : 0;
    if (inter) g->strides[0] = 2 * block;
    g->alloc_ndim = inter ? 5 : 4;
    g->alloc_shape[0] = num_blocks;
    for (int i = 1; i < 4; i++) g->alloc_shape[i + inter] = g->shape[i];
    if (inter) g->alloc_shape[1] = 2;
}
