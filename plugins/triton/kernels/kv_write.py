"""Store the batch's new K and V rows into the paged cache at slot_mapping
(negative slots are padding and skipped), converting to the cache dtype. For
FP8 caches the value is divided by the scale and rounded to nearest-even,
saturating to the largest finite value, as reference.h defines; the scales
are host floats, or (SCALE_TENSORS) float32 tensors read here at the
program's KV head (scale_stride 1: a scale a head, 0: one for the layer).
Grid (max tokens, kv heads); programs past num_tokens (read on the device,
so a CUDA graph sized for the maximum stays valid) exit.
"""
import triton
import triton.language as tl


@triton.jit
def kv_write(
        key_ptr, value_ptr, k_cache, v_cache, slot_mapping, counts,
        k_scale, v_scale, head_dim, block_size,
        stride_kt, stride_kh, stride_vt, stride_vh,
        stride_ckb, stride_cks, stride_ckh, stride_cvb, stride_cvs, stride_cvh,
        HEAD_PAD: tl.constexpr, IS_FP8: tl.constexpr,
        k_scale_ptr=None, v_scale_ptr=None, scale_stride=None,
        SCALE_TENSORS: tl.constexpr = False):
    t = tl.program_id(0)
    h = tl.program_id(1)
    if t >= tl.load(counts + 1):
        return
    slot = tl.load(slot_mapping + t)
    if slot < 0:
        return
    blk = slot // block_size
    off = slot % block_size
    offs_d = tl.arange(0, HEAD_PAD)
    d_mask = offs_d < head_dim
    CDT = k_cache.dtype.element_ty
    k = tl.load(key_ptr + t.to(tl.int64) * stride_kt + h * stride_kh + offs_d, mask=d_mask)
    v = tl.load(value_ptr + t.to(tl.int64) * stride_vt + h * stride_vh + offs_d, mask=d_mask)
    if IS_FP8:
        if SCALE_TENSORS:
            k_scale = tl.load(k_scale_ptr + h * scale_stride)
            v_scale = tl.load(v_scale_ptr + h * scale_stride)
        # Division rounded to nearest, as the reference computes x / scale.
        k = tl.math.div_rn(k.to(tl.float32), k_scale).to(CDT)
        v = tl.math.div_rn(v.to(tl.float32), v_scale).to(CDT)
    else:
        k = k.to(CDT)
        v = v.to(CDT)
    tl.store(k_cache + blk * stride_ckb + off * stride_cks + h * stride_ckh + offs_d, k, mask=d_mask)
    tl.store(v_cache + blk * stride_cvb + off * stride_cvs + h * stride_cvh + offs_d, v, mask=d_mask)
