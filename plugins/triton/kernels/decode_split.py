"""Two-stage split-KV decode over the paged KV cache (one query token per
request), for batches where the unified kernel would leave the GPU idle:
few requests times KV heads cannot fill the multiprocessors, so each
request's keys are cut into splits that run as separate programs.

Stage 1, grid (num_reqs, kv_heads * ceil(group / BLOCK_H), max_splits):
each program attends BLOCK_H query heads of one KV head (padded rows for
groups below 16, the smallest tensor-core tile) over one split, and writes
the split's normalised partial output and log2-unit LSE to fp32 workspace.
The number of splits a request uses depends only on its own visible length
(min(num_splits, ceil(len / split_tile))), so a request's result does not
depend on the rest of the batch; programs past it write LSE -inf.
A request without keys (seq_len 0) has one split of length 0: every
program writes LSE -inf and returns before reading its block-table row
(garbage there) or the cache.

FP8 scales in float32 tensors (SCALE_TENSORS, compile-time; the caller
folds host floats into scale and the reduction's out_scale instead): K's
scale of the program's KV head multiplies its scores, V's its partial
output, read when the kernel runs (scale_stride 1: a scale a head, 0: one).

Splits cover [seq_len - window, seq_len) only, from its first key: a
released page (negative block-table entry, AH_FEAT_RELEASED_BLOCKS) holds
keys the window hides from the request's query, so no split reaches it.

Stage 2, grid (num_reqs, num_q_heads): merges the splits (and the sink) in a
fixed order in fp32 and writes the output in the query dtype and the LSE.
Splits with LSE -inf weigh nothing and their partial outputs are not read;
with none left the output is 0 and the LSE -inf (the sink's, with sinks).
"""
import triton
import triton.language as tl

from common import score_transform


@triton.jit
def _decode_tiles(acc, l_i, m_i, q, start, end, k_base, v_base, bt_row, offs_d, d_mask,
                  block_size, stride_ks, stride_vs, stride_kb, stride_vb, scale, softcap, slope2,
                  pos, SOFTCAP: tl.constexpr, TILE_N: tl.constexpr, QDT: tl.constexpr):
    for n0 in range(start, end, TILE_N):
        offs_n = n0 + tl.arange(0, TILE_N)
        n_ok = offs_n < end
        blk = tl.load(bt_row + offs_n // block_size, mask=n_ok, other=0).to(tl.int64)
        slot = (offs_n % block_size).to(tl.int64)
        k = tl.load(k_base + (blk * stride_kb + slot * stride_ks)[None, :] + offs_d[:, None],
                    mask=d_mask[:, None] & n_ok[None, :], other=0.0)
        v = tl.load(v_base + (blk * stride_vb + slot * stride_vs)[:, None] + offs_d[None, :],
                    mask=n_ok[:, None] & d_mask[None, :], other=0.0)
        qk = tl.dot(q, k.to(QDT))
        s = score_transform(qk, scale, softcap, slope2, offs_n, pos, SOFTCAP)
        s = tl.where(n_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(QDT), v.to(QDT), acc * alpha[:, None])
        m_i = m_new

    return acc, l_i, m_i


@triton.jit
def decode_split_stage1(
        q_ptr, k_cache, v_cache, mid_o, mid_lse, alibi_ptr,
        block_table, seq_lens, counts,
        scale, softcap,
        group_size, head_dim, bt_stride, stride_qt, stride_qh,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        block_size, window, num_splits, split_tile, split_stride, num_q_heads,
        use_softcap, use_alibi,
        HEAD_PAD: tl.constexpr, BLOCK_H: tl.constexpr, TILE_N: tl.constexpr,
        k_scale_ptr=None, v_scale_ptr=None, scale_stride=None,
        SCALE_TENSORS: tl.constexpr = False):
    QDT = q_ptr.dtype.element_ty
    req = tl.program_id(0)
    hb = tl.program_id(1)
    sp = tl.program_id(2)
    if req >= tl.load(counts):
        return
    blocks_per_group = tl.cdiv(group_size, BLOCK_H)
    kvh = hb // blocks_per_group
    g0 = (hb % blocks_per_group) * BLOCK_H
    offs_h = g0 + tl.arange(0, BLOCK_H)
    h_ok = offs_h < group_size
    head = kvh * group_size + offs_h
    offs_d = tl.arange(0, HEAD_PAD)
    d_mask = offs_d < head_dim

    seq_len = tl.load(seq_lens + req)
    q_pos = seq_len - 1
    lo = seq_len * 0
    if window > 0:
        lo = tl.maximum(seq_len - window, 0)
    kv_len = seq_len - lo
    n_split = tl.minimum(num_splits, tl.maximum(tl.cdiv(kv_len, split_tile), 1))
    split_len = tl.cdiv(tl.cdiv(kv_len, n_split), TILE_N) * TILE_N
    start = lo + sp * split_len
    end = tl.minimum(start + split_len, seq_len)
    lse_row = mid_lse + (req * num_q_heads + head).to(tl.int64) * split_stride + sp
    if start >= end:
        tl.store(lse_row, tl.full([BLOCK_H], float("-inf"), tl.float32), mask=h_ok)
        return

    if SCALE_TENSORS:
        scale = scale * tl.load(k_scale_ptr + kvh * scale_stride)
    q_row = req.to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_row[:, None] + offs_d[None, :], mask=h_ok[:, None] & d_mask[None, :],
                other=0.0)
    if use_alibi != 0:
        slope2 = tl.load(alibi_ptr + head, mask=h_ok, other=0.0) * 1.4426950408889634
    else:
        slope2 = tl.zeros([BLOCK_H], tl.float32)
    pos = tl.full([BLOCK_H], 0, tl.int32) + q_pos

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_PAD], tl.float32)
    bt_row = block_table + req.to(tl.int64) * bt_stride
    k_base = k_cache + kvh.to(tl.int64) * stride_kh
    v_base = v_cache + kvh.to(tl.int64) * stride_vh
    if use_softcap != 0:
        acc, l_i, m_i = _decode_tiles(acc, l_i, m_i, q, start, end, k_base, v_base, bt_row, offs_d,
                                      d_mask, block_size, stride_ks, stride_vs, stride_kb,
                                      stride_vb, scale, softcap, slope2, pos, True, TILE_N, QDT)
    else:
        acc, l_i, m_i = _decode_tiles(acc, l_i, m_i, q, start, end, k_base, v_base, bt_row, offs_d,
                                      d_mask, block_size, stride_ks, stride_vs, stride_kb,
                                      stride_vb, scale, softcap, slope2, pos, False, TILE_N, QDT)

    o_row = ((req * num_q_heads + head).to(tl.int64) * split_stride + sp) * HEAD_PAD
    if SCALE_TENSORS:
        o = acc * (tl.load(v_scale_ptr + kvh * scale_stride) / l_i)[:, None]
        tl.store(mid_o + o_row[:, None] + offs_d[None, :], o, mask=h_ok[:, None])
    else:
        tl.store(mid_o + o_row[:, None] + offs_d[None, :], acc / l_i[:, None], mask=h_ok[:, None])
    tl.store(lse_row, m_i + tl.math.log2(l_i), mask=h_ok)


@triton.jit
def decode_split_reduce(
        mid_o, mid_lse, out_ptr, lse_ptr, sinks_ptr, counts,
        out_scale, head_dim, num_splits, split_stride, stride_ot, stride_oh, num_q_heads,
        use_sinks, store_lse,
        HEAD_PAD: tl.constexpr, MAX_SPLITS: tl.constexpr):
    QDT = out_ptr.dtype.element_ty
    req = tl.program_id(0)
    head = tl.program_id(1)
    if req >= tl.load(counts):
        return
    offs_s = tl.arange(0, MAX_SPLITS)
    offs_d = tl.arange(0, HEAD_PAD)
    base = (req * num_q_heads + head).to(tl.int64) * split_stride
    lse_s = tl.load(mid_lse + base + offs_s, mask=offs_s < num_splits, other=float("-inf"))
    m = tl.max(lse_s, 0)
    sink2 = m * 0.0
    if use_sinks != 0:
        sink2 = tl.load(sinks_ptr + head) * 1.4426950408889634
        m = tl.maximum(m, sink2)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    live = lse_s > float("-inf")
    w = tl.where(live, tl.math.exp2(lse_s - m_safe), 0.0)
    o = tl.load(mid_o + (base + offs_s)[:, None] * HEAD_PAD + offs_d[None, :],
                mask=live[:, None], other=0.0)
    num = tl.sum(w[:, None] * o, 0)
    den = tl.sum(w, 0)
    if use_sinks != 0:
        den = den + tl.math.exp2(sink2 - m_safe)
    den_safe = tl.where(den == 0.0, 1.0, den)
    res = num * (out_scale / den_safe)
    tl.store(out_ptr + req.to(tl.int64) * stride_ot + head * stride_oh + offs_d, res.to(QDT),
             mask=offs_d < head_dim)
    if store_lse != 0:
        tl.store(lse_ptr + req.to(tl.int64) * num_q_heads + head,
                 (m + tl.math.log2(den)) * 0.6931471805599453)
