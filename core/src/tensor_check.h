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
 * Each tensor is first checked as a plugin checks it (ah_dl_check: rank,
 * shape, dtype, data, innermost stride), then for device, alignment and
 * packing. Rules:
 *  - q [T, Hq, qk], out [T, Hq, v] in q_dtype; new key/value (when key is
 *    set) [T, Hk, qk] / [T, Hk, v] in q_dtype; last dim contiguous. A
 *    ragged layer (ABI 2.3) needs key and value, [num_k_tokens, Hk, qk] /
 *    [num_k_tokens, Hk, v], and reads no cache.
 *  - out may carry data == NULL: a plugin that does not take the caller's
 *    buffer (caps.caller_output = 0) fills the descriptor itself.
 *  - caches: 4 dims in the spec's layout, dim 0 at least batch->num_blocks,
 *    kv_dtype (FP8 as uint8), densely packed (plugins index them with
 *    ah_kv_offset). MLA: no value cache is read (value_cache is ignored).
 *    Interleaved layouts (ABI 2.3): the two views of one [nb, 2, ...]
 *    tensor: strides as ah_dl_cache_want gives them (checked by ah_dl_check,
 *    as a plugin checks them), one block count, the value view's address
 *    the key view's plus block_size * Hk * head elements.
 *  - lse (optional) [T, Hq] float32 dense; sinks / alibi_slopes [Hq] float32
 *    when the spec uses them.
 *  - every data pointer (data + byte_offset) 16-byte aligned, on dev.
 *  - the FP8 scales as ah__check_scales says. */
ah_status ah__check_forward_args(const ah_layer_spec *spec, const ah_batch *batch,
                                 const ah_forward_args *a, const DLDevice *dev, char *err,
                                 size_t cap);

/* The same for write_kv: key, value (not for MLA), both caches, scales.
 * The binding has refused write_kv on a cacheless layer, and forward's
 * key and value on a cross-attention layer, before either check (those
 * hold with validation off too). */
ah_status ah__check_kv_write_args(const ah_layer_spec *spec, const ah_batch *batch,
                                  const ah_kv_write_args *a, const DLDevice *dev, char *err,
                                  size_t cap);

/* The FP8 scales of one call (plugin.h, "FP8 scales"): the floats, the
 * tensors, and whether the call carries a query scale (forward does,
 * write_kv does not). */
typedef struct ah__scales {
    float k, v, q;
    const DLTensor *kt, *vt, *qt;
    int has_q;
} ah__scales;

/* Check them against the spec's kv_scales and use_q_scale: the floats
 * finite and >= 0; HOST takes the floats and no tensor; TENSOR / PER_HEAD
 * take float32 [1] / [Hk] tensors on dev (dense, 4-byte aligned; v's may
 * be NULL for MLA) and floats of 0; tensors in host memory hold values
 * finite and > 0. A query scale only with use_q_scale: then a float > 0
 * (HOST) or a float32 [1] tensor. AH_ERR_INVALID_ARGUMENT with the field,
 * index and value in err. */
ah_status ah__check_scales(const ah_layer_spec *spec, const ah__scales *sc, const DLDevice *dev,
                           char *err, size_t cap);

/* The smallest forward / write_kv args an engine may pass: ABI 2.2's,
 * which end at stream. */
#define AH__FORWARD_ARGS_MIN (offsetof(ah_forward_args, stream) + sizeof(void *))
#define AH__KV_WRITE_ARGS_MIN (offsetof(ah_kv_write_args, stream) + sizeof(void *))

/* Copy an engine's args of any accepted struct_size into a full struct
 * whose later fields are zero: 1, or 0 when a is NULL or too short. */
int ah__forward_args_full(const ah_forward_args *a, ah_forward_args *full);
int ah__kv_write_args_full(const ah_kv_write_args *a, ah_kv_write_args *full);

#endif
