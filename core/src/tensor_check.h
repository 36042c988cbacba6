/*
 * Tensor checks for ah_binding_forward / ah_binding_write_kv: every DLTensor
 * an engine hands over is compared with what the layer spec and the planned
 * batch imply (rank, shape, dtype, device, contiguity, alignment) before a
 * plugin sees it, so a wrong shape is a message, not a wild device read.
 */
#ifndef AH_TENSOR_CHECK_H
#define AH_TENSOR_CHECK_H

#include <stddef.h>

#include <attnhost/attnhost.h>

/* Check forward arguments against a resolved spec and the planned batch on
 * device dev. On failure returns AH_ERR_INVALID_ARGUMENT with a message in
 * err (cap bytes) such as "q: shape [5, 32, 128], expected [5, 32, 64]".
 * Rules:
 *  - q [T, Hq, qk], out [T, Hq, v] in q_dtype; new key/value (when key is
 *    set) [T, Hk, qk] / [T, Hk, v] in q_dtype; last dim contiguous.
 *  - out may carry data == NULL: a plugin that does not take the caller's
 *    buffer (caps.caller_output = 0) fills the descriptor itself.
 *  - caches: 4 dims in the spec's layout, dim 0 at least batch->num_blocks,
 *    kv_dtype (FP8 as uint8), densely packed (plugins index them with
 *    ah_kv_offset). MLA: no value cache is read (value_cache is ignored).
 *    Interleaved layouts (ABI 2.3): the two views of one [nb, 2, ...]
 *    tensor: strides as kv_layout.h gives them, one block count, the value
 *    view's address the key view's plus block_size * Hk * head elements.
 *  - lse (optional) [T, Hq] float32 dense; sinks / alibi_slopes [Hq] float32
 *    when the spec uses them.
 *  - every data pointer (data + byte_offset) 16-byte aligned, on dev.
 *  - k_scale / v_scale finite and >= 0. */
ah_status ah__check_forward_args(const ah_layer_spec *spec, const ah_batch *batch,
                                 const ah_forward_args *a, const DLDevice *dev, char *err,
                                 size_t cap);

/* The same for write_kv: key, value (not for MLA), both caches, scales. */
ah_status ah__check_kv_write_args(const ah_layer_spec *spec, const ah_batch *batch,
                                  const ah_kv_write_args *a, const DLDevice *dev, char *err,
                                  size_t cap);

#endif
