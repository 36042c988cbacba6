"""Merge of two partial attention results over disjoint key sets by their
log-sum-exp (cascade attention, split KV, context parallelism):
out = (e^la a + e^lb b) / (e^la + e^lb), lse = log(e^la + e^lb).
Both parts empty (both LSE -inf) gives 0 and -inf, as the reference does.
Grid (tokens, heads); arithmetic in fp32, output in the value dtype.
"""
import triton
import triton.language as tl


@triton.jit
def merge_states(
        va_ptr, la_ptr, vb_ptr, lb_ptr, out_ptr, lse_out_ptr,
        num_heads, head_dim, stride_at, stride_ah, stride_bt, stride_bh, stride_ot, stride_oh,
        store_lse,
        HEAD_PAD: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_PAD)
    d_mask = offs_d < head_dim
    la = tl.load(la_ptr + t * num_heads + h)
    lb = tl.load(lb_ptr + t * num_heads + h)
    m = tl.maximum(la, lb)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    wa = tl.exp(la - m_safe)
    wb = tl.exp(lb - m_safe)
    den = wa + wb
    a = tl.load(va_ptr + t * stride_at + h * stride_ah + offs_d, mask=d_mask, other=0.0)
    b = tl.load(vb_ptr + t * stride_bt + h * stride_bh + offs_d, mask=d_mask, other=0.0)
    den_safe = tl.where(den == 0.0, 1.0, den)
    o = (a.to(tl.float32) * wa + b.to(tl.float32) * wb) / den_safe
    tl.store(out_ptr + t * stride_ot + h * stride_oh + offs_d, o.to(out_ptr.dtype.element_ty),
             mask=d_mask)
    if store_lse != 0:
        tl.store(lse_out_ptr + t * num_heads + h, m + tl.log(den))
