/*
 * What a plugin may assume of a layer spec the host accepted, checked by
 * the targets that make models (fuzz_model, fuzz_hfconfig): every count
 * and size at least 1, query heads a multiple of KV heads, MLA layers in
 * their absorbed shape, enums in range, a finite non-negative scale and
 * soft-cap, FP8 scale forms other than host and a query scale only over
 * an FP8 cache, the query scale only with FP8 attention.
 */
#ifndef AH_FUZZ_LAYER_H
#define AH_FUZZ_LAYER_H

#include <math.h>

#include <attnhost/attnhost.h>
#include <attnhost/plugin_util.h>

#include "fuzz_common.h"

static inline void fz_check_layer(const ah_layer_spec *s, uint32_t i)
{
    FZ_ASSERT(s->struct_size == sizeof *s, "layer %u struct_size %u", i, s->struct_size);
    FZ_ASSERT(s->num_q_heads >= 1 && s->num_kv_heads >= 1, "layer %u heads %u/%u", i,
              s->num_q_heads, s->num_kv_heads);
    FZ_ASSERT(s->num_q_heads % s->num_kv_heads == 0, "layer %u heads %u/%u", i, s->num_q_heads,
              s->num_kv_heads);
    FZ_ASSERT(s->qk_head_size >= 1 && s->v_head_size >= 1, "layer %u head sizes %u/%u", i,
              s->qk_head_size, s->v_head_size);
    FZ_ASSERT((unsigned)s->attn_type < AH_ATTN_TYPE_COUNT, "layer %u attn_type %d", i,
              (int)s->attn_type);
    FZ_ASSERT((unsigned)s->q_dtype < AH_DTYPE_COUNT && s->q_dtype != AH_DTYPE_AUTO,
              "layer %u q_dtype %d", i, (int)s->q_dtype);
    FZ_ASSERT((unsigned)s->kv_dtype < AH_DTYPE_COUNT, "layer %u kv_dtype %d", i, (int)s->kv_dtype);
    FZ_ASSERT((unsigned)s->kv_layout < AH_KV_LAYOUT_COUNT, "layer %u kv_layout %d", i,
              (int)s->kv_layout);
    FZ_ASSERT(isfinite(s->scale) && s->scale >= 0, "layer %u scale %g", i, (double)s->scale);
    FZ_ASSERT(isfinite(s->softcap) && s->softcap >= 0, "layer %u softcap %g", i,
              (double)s->softcap);
    FZ_ASSERT(s->use_mla <= 1 && s->use_sinks <= 1 && s->use_alibi <= 1, "layer %u flags", i);
    if (s->use_mla)
        FZ_ASSERT(s->num_kv_heads == 1 && s->v_head_size < s->qk_head_size,
                  "layer %u: MLA with kv heads %u, qk %u, v %u", i, s->num_kv_heads,
                  s->qk_head_size, s->v_head_size);
    if (s->attn_type == AH_ATTN_ENCODER_DECODER)
        FZ_ASSERT(s->sliding_window == 0, "layer %u: cross-attention with a window", i);
    const int fp8 = ah_dtype_is_fp8(s->kv_dtype);
    const int cacheless = s->attn_type == AH_ATTN_ENCODER || s->attn_type == AH_ATTN_ENCODER_ONLY;
    FZ_ASSERT(s->kv_scales < AH_KV_SCALES_COUNT && s->use_q_scale <= 1, "layer %u: scales %u/%u", i,
              s->kv_scales, s->use_q_scale);
    if (s->kv_scales != AH_KV_SCALES_HOST)
        FZ_ASSERT(fp8 && !cacheless, "layer %u: kv_scales %u without an FP8 cache", i,
                  s->kv_scales);
    if (s->use_q_scale)
        FZ_ASSERT(fp8 && !cacheless && s->fp8_attention, "layer %u: q_scale without FP8 attention",
                  i);
}

#endif
