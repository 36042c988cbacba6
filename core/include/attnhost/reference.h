/*
 * The reference oracle: attention over the paged KV cache in double
 * precision, covering every feature of the capability model. It defines
 * what every plugin must compute; the conformance suite compares against it.
 *
 * For query token t of request r, head h (kv head h / (Hq/Hk)), and each key
 * position j < seq_lens[r] that is visible:
 *
 *   k_j, v_j   dequantized cache rows: stored value * k_scale (v_scale) for
 *              FP8 caches, else the stored value; for MLA v_j = k_j[:v_head]
 *              (scaled by k_scale). With per-head scales (ABI 2.3) the
 *              row of KV head kh takes k_scales[kh] (v_scales[kh]).
 *   q          the query as given: a query scale (ah_layer_spec.use_q_scale)
 *              only says how an FP8 backend quantises it, so the oracle,
 *              which defines the exact result, never reads one
 *   s_j        = scale * dot(q, k_j)
 *   s_j        = softcap * tanh(s_j / softcap)            if softcap > 0
 *   s_j       += slope[h] * (j - p)                       if ALiBi
 *   out        = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink[h]})
 *   lse        = log(sum_j e^{s_j} + e^{sink[h]})         (natural log)
 *
 * where the sink terms appear only when the layer uses sinks, and p is the
 * query's position, seq_lens[r] - query_len[r] + i. Keys and visibility:
 *   decoder, causal:         cache positions j < seq_len with j <= p, and
 *                            j > p - window if sliding_window
 *   decoder, causal = OFF:   every j < seq_len, and |j - p| < window if set
 *   encoder, encoder-only:   cacheless: the request's own new tokens (key,
 *                            value rows query_start_loc[r] + j, j < query_len),
 *                            p = i, and |j - p| < window if set
 *   encoder-decoder (cross): every cache position j < encoder_seq_lens[r]
 *   ragged (ragged_kv, ABI 2.3): the packed rows cu_seqlens_k[r] + j of key,
 *                            value, j < k_len = cu_seqlens_k[r+1] -
 *                            cu_seqlens_k[r], with p = k_len - query_len[r]
 *                            + i (ragged_keys bottom_right) or p = k_len + i
 *                            (ragged_keys context) and the decoder rules
 *                            above (causal, or every j when causal = OFF)
 * and on decoder layers, with a tree mask, only keys whose mask byte
 * custom_mask[mask_indptr[r] + i * seq_len + j] is nonzero.
 * With no visible key and no sink the output is 0 and lse is -inf. The
 * oracle takes the batches ah_batch_validate does, and decoder requests of
 * query length 1 with seq_len 0 (a context-parallel rank holding none of
 * the request's keys: AH_FEAT_EMPTY_KV).
 */
#ifndef ATTNHOST_REFERENCE_H
#define ATTNHOST_REFERENCE_H

#include <attnhost/attnhost.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Host-memory inputs, all densely packed:
 *   q            [T, Hq, qk_head] in spec->q_dtype
 *   key_cache    [num_blocks, ...] in spec->kv_dtype and spec->kv_layout
 *   value_cache  likewise with v_head (ignored for MLA). With an
 *                interleaved layout (ABI 2.3) both point into one
 *                allocation [num_blocks, 2, ...]: key_cache at its start,
 *                value_cache block_size * Hk * head elements after it
 *                (see ah_kv_offset)
 *   sinks, alibi_slopes [Hq], when the spec uses them
 * The batch's host copies give the structure. */
typedef struct ah_ref_inputs {
    uint32_t struct_size;
    const ah_layer_spec *spec;
    const ah_batch *batch;
    const void *q;
    const void *key_cache;
    const void *value_cache;
    const float *sinks;
    const float *alibi_slopes;
    float k_scale, v_scale; /* 0 means 1 */
    /* Cacheless layers (ENCODER, ENCODER_ONLY): the keys and values, [T, Hk,
     * qk_head] and [T, Hk, v_head] in q dtype, packed like q. Ragged layers
     * (ABI 2.3): [Tk, Hk, qk_head] and [Tk, Hk, v_head], packed by the
     * batch's cu_seqlens_k. The caches are not read then and may be NULL. */
    const void *key;
    const void *value;
    /* ABI 2.3: per-KV-head scales, [Hk] host floats each finite and > 0;
     * NULL: k_scale (v_scale) for every head. v_scales is not read for MLA
     * (V is the key cache's head, scaled by k_scales). */
    const float *k_scales;
    const float *v_scales;
} ah_ref_inputs;

/* out [T, Hq, v_head], lse [T, Hq] (may be NULL). The layer's KV-cache
 * group (spec->kv_group, ABI 2.1) picks the batch's paging
 * (ah_batch_group_view); the oracle reads only the keys a query sees, so
 * released block-table entries (see ah_kv_group) are never followed. */
ah_status ah_reference_attention(const ah_ref_inputs *in, double *out, double *lse, ah_error *err);

/* Store new K [T, Hk, qk_head] and V [T, Hk, v_head] (q dtype) into the
 * caches at the batch's slot_mapping (the spec's KV-cache group's), as
 * write_kv must: converted to the KV
 * dtype, divided by the scale for FP8 (nearest-even, saturating). Negative
 * slots are skipped. value/value_cache are ignored for MLA. */
ah_status ah_reference_write_kv(const ah_layer_spec *spec, const ah_batch *batch, const void *key,
                                const void *value, void *key_cache, void *value_cache,
                                float k_scale, float v_scale, ah_error *err);
/* The same with per-KV-head scales (ABI 2.3): head h of the new K and V is
 * divided by k_scales[h] and v_scales[h] ([Hk] host floats, finite and
 * > 0; v_scales is not read for MLA). */
ah_status ah_reference_write_kv_per_head(const ah_layer_spec *spec, const ah_batch *batch,
                                         const void *key, const void *value, void *key_cache,
                                         void *value_cache, const float *k_scales,
                                         const float *v_scales, ah_error *err);

/* LSE merge of two partial results: [T, H, D] values, [T, H] lse. */
void ah_reference_merge_states(uint32_t T, uint32_t H, uint32_t D, const double *v_a,
                               const double *lse_a, const double *v_b, const double *lse_b,
                               double *out, double *lse_out);

/* Element offset of (block, slot-in-block, kv head, channel) from the
 * first element of a cache view of the given layout. An interleaved
 * layout's blocks are twice as far apart (K and V alternate), so the same
 * offset serves the key view and the value view, each from its own first
 * element. */
static inline size_t ah_kv_offset(ah_kv_layout layout, uint32_t block_size, uint32_t num_kv_heads,
                                  uint32_t head_size, uint32_t block, uint32_t slot, uint32_t head,
                                  uint32_t ch)
{
    size_t per_block = (size_t)block_size * num_kv_heads * head_size;
    if (ah_kv_layout_is_interleaved(layout)) per_block *= 2;
    if (ah_kv_layout_is_hnd(layout))
        return block * per_block + ((size_t)head * block_size + slot) * head_size + ch;
    return block * per_block + ((size_t)slot * num_kv_heads + head) * head_size + ch;
}

#ifdef __cplusplus
}
#endif

#endif
