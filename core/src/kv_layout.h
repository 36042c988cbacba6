/*
 * KV-cache geometry: the shape and strides of one cache view (keys or
 * values) a layer spec implies, and the allocation it lies in. One routine
 * serves ah_binding_kv_cache_desc (what the engine allocates) and the
 * tensor checks (what the engine must hand over), and it is built on
 * plugin_util.h's ah_dl_cache_want and ah_kv_view_geometry, which the host's
 * and the plugins' cache checks use, so none of them can disagree.
 */
#ifndef AH_KV_LAYOUT_H
#define AH_KV_LAYOUT_H

#include <stdint.h>

#include <attnhost/plugin.h>

typedef struct ah__kv_geom {
    int64_t shape[4];   /* the view: [nb, bs, Hk, d] (NHD) or [nb, Hk, bs, d] (HND) */
    int64_t strides[4]; /* in elements */
    int64_t offset;     /* elements from the allocation's start to the view's */
    int alloc_ndim;     /* 4 (dense) or 5 (interleaved) */
    int64_t alloc_shape[5];
} ah__kv_geom;

/* The view of num_blocks blocks of the key (value = 0) or value (value = 1)
 * cache of spec, whose head size is head_size, in spec->kv_layout. */
void ah__kv_geom_of(const ah_layer_spec *spec, int64_t num_blocks, uint32_t head_size, int value,
                    ah__kv_geom *g);

#endif
