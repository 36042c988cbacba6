/*
 * KV-cache geometry (kv_layout.h): the view's shape is the one the tensor
 * checks want (ah_dl_cache_want), its strides and allocation the ones the
 * checks hold a view to (ah_kv_view_geometry), so what the engine is told
 * to allocate and what it must hand over come from one piece of code.
 */
#include "kv_layout.h"

#include <string.h>

#include <attnhost/plugin_util.h>

void ah__kv_geom_of(const ah_layer_spec *s, int64_t num_blocks, uint32_t head_size, int value,
                    ah__kv_geom *g)
{
    const ah_dl_want w = ah_dl_cache_want("", s, num_blocks, head_size);
    memcpy(g->shape, w.shape, sizeof g->shape);
    g->alloc_ndim = ah_kv_view_geometry(s->kv_layout, g->shape, g->strides, g->alloc_shape);
    /* the value view of an interleaved layout: one dense block past the key's */
    g->offset = g->alloc_ndim == 5 && value ? g->strides[0] / 2 : 0;
}
