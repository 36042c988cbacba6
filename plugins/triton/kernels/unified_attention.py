"""Unified paged attention: prefill, extend (chunked prefill) and decode
tokens of one batch in a single launch, over a paged KV cache.

Grid: (q_blocks, q_head_groups). Each program owns BLOCK_M rows, each row one
(query token, query head) pair: HEADS (a divisor of the GQA group, runtime)
consecutive query heads sharing one KV head, times BLOCK_M // HEADS
consecutive query tokens of one request. Packing the group's heads into the
rows lets one K/V tile serve every head of the group (GQA/MQA reuse). The
program finds its request by binary search over query_start_loc, the way a
batch of varying query lengths is laid out without a host-side schedule, so
the launch configuration only depends on num_tokens and num_reqs upper
bounds and the kernel can run inside a CUDA graph sized for the maxima.

Key visibility follows reference.h: causal (j <= p, window j > p - W),
bidirectional (|j - p| < W when a window is set), or everything. Tiles that
every row sees in full skip the mask; the rest are masked.
Head size is a runtime value up to HEAD_PAD (a power of two): channels past
it are zero-filled on load and never stored.
PLAIN (compile-time) is the fast specialization the launcher picks when the
layer has no soft-cap and no ALiBi and its page size is a power of two: no
ALiBi term per score, pages by shift and mask, the scale folded into the
exponent. Sinks, windows, LSE and every attention type still apply.
FP8 caches: K and V convert exactly to the query dtype; k_scale is folded
into the score scale and v_scale into the final normalisation by the caller
(host floats), or, with SCALE_TENSORS (compile-time), read here from float32
tensors at the program's KV head (scale_stride 1: one scale a head, 0: one
for the layer), so a replayed graph uses the values they hold then.
TREE_MASK (compile-time; the general kernel only) adds a speculative
tree's mask on top of those rules: mask_meta holds the mask's address (0:
no mask, every key the rules allow) and the batch's mask_indptr; byte
mask[indptr[r] + i * seq_len + j] != 0 lets query token i of request r see
key j (SGLang's layout, plugin.h). Every tile loads its bytes, so the
masked kernel runs every tile through the masked loop.
Released pages (negative block-table entries, hidden by the window from
every query of the request) are never dereferenced: only masked tiles can
reach them, and their K/V loads are masked off there.
A request without keys (seq_len 0, one query token: a context-parallel rank
holding none of its keys yet) has an empty key range, so its programs run no
tile and read neither its block-table row, which may be garbage, nor the
cache; l = 0 normalises as 1 (out 0) and the LSE is log(0) = -inf (the
sink's, with sinks: attention over the sink alone).
"""
import triton
import triton.language as tl

from common import (find_q_block, key_range, online_softmax_step, online_softmax_step_scaled,
                    score_transform, visible)


@triton.jit
def _tile_start(i, n_first, start, start2, TILE_N: tl.constexpr):
    return tl.where(i < n_first, start + i * TILE_N, start2 + (i - n_first) * TILE_N)


@triton.jit
def _attend_tiles(acc, l_i, m_i, q, start, end, start2, end2, k_base, v_base, bt_row, offs_d,
                  d_mask, block_size, page_shift, stride_ks, stride_vs, stride_kb, stride_vb,
                  scale, softcap, slope2, q_pos, seq_len, window, causal, mask_row, mask_on,
                  MASKED: tl.constexpr, SOFTCAP: tl.constexpr, PLAIN: tl.constexpr,
                  TILE_N: tl.constexpr, QDT: tl.constexpr, TREE_MASK: tl.constexpr):
    # Tiles of [start, end) then [start2, end2) in one loop: the masked loop
    # serves the window's head and the diagonal tail with one copy of code.
    n_first = tl.cdiv(tl.maximum(end - start, 0), TILE_N)
    n_tiles = n_first + tl.cdiv(tl.maximum(end2 - start2, 0), TILE_N)
    if PLAIN:
        # The page ids of tile i + 1 are read during tile i and carried:
        # when the K/V addresses come from a load in the same iteration,
        # Triton's pipeliner spends a stage on that load and issues the K/V
        # copies only one step ahead, right before they are waited for.
        offs0 = _tile_start(0, n_first, start, start2, TILE_N) + tl.arange(0, TILE_N)
        blk_next = tl.load(bt_row + (offs0 >> page_shift), mask=(offs0 < seq_len) & (n_tiles > 0),
                           other=0)
    else:
        blk_next = tl.zeros([TILE_N], tl.int32)
    for i in range(0, n_tiles):
        offs_n = _tile_start(i, n_first, start, start2, TILE_N) + tl.arange(0, TILE_N)
        if MASKED:
            n_ok = offs_n < seq_len
        if PLAIN:
            # Power-of-two pages: a shift and a mask instead of an integer
            # division and a remainder per key.
            blk = blk_next.to(tl.int64)
            slot = (offs_n & (block_size - 1)).to(tl.int64)
            offs_x = _tile_start(i + 1, n_first, start, start2, TILE_N) + tl.arange(0, TILE_N)
            blk_next = tl.load(bt_row + (offs_x >> page_shift),
                               mask=(offs_x < seq_len) & (i + 1 < n_tiles), other=0)
        else:
            page = offs_n // block_size
            slot = (offs_n % block_size).to(tl.int64)
            if MASKED:
                blk = tl.load(bt_row + page, mask=n_ok, other=0).to(tl.int64)
            else:
                blk = tl.load(bt_row + page).to(tl.int64)
        k_off = blk * stride_kb + slot * stride_ks
        v_off = blk * stride_vb + slot * stride_vs
        if MASKED:
            # Tiles start at a multiple of TILE_N, so the window's head tile
            # can hold keys before the first one any row sees, on pages the
            # engine released (negative entries, AH_FEAT_RELEASED_BLOCKS).
            # Their loads are masked, not pointed at some valid page, whose
            # contents could be NaN (p = 0 times NaN is NaN). Full tiles
            # start at or after the first key every row sees: no released
            # page there.
            n_ok = n_ok & (blk >= 0)
            k = tl.load(k_base + k_off[None, :] + offs_d[:, None],
                        mask=d_mask[:, None] & n_ok[None, :], other=0.0)
            v = tl.load(v_base + v_off[:, None] + offs_d[None, :],
                        mask=n_ok[:, None] & d_mask[None, :], other=0.0)
        else:
            k = tl.load(k_base + k_off[None, :] + offs_d[:, None], mask=d_mask[:, None], other=0.0)
            v = tl.load(v_base + v_off[:, None] + offs_d[None, :], mask=d_mask[None, :], other=0.0)
        qk = tl.dot(q, k.to(QDT))
        if PLAIN:
            # No soft-cap, no ALiBi: the log2-unit scale folds into the
            # exponent's FMA (qk * c - m) on full tiles.
            if MASKED:
                s = tl.where(visible(offs_n, q_pos, seq_len, window, causal),
                             qk * (scale * 1.4426950408889634), float("-inf"))
                acc, l_i, m_i = online_softmax_step_scaled(acc, l_i, m_i, s, 1.0, v.to(QDT))
            else:
                acc, l_i, m_i = online_softmax_step_scaled(acc, l_i, m_i, qk,
                                                           scale * 1.4426950408889634, v.to(QDT))
        else:
            s = score_transform(qk, scale, softcap, slope2, offs_n, q_pos, SOFTCAP)
            if MASKED:
                s = tl.where(visible(offs_n, q_pos, seq_len, window, causal), s, float("-inf"))
            if TREE_MASK:
                # (masked tiles only: the mask kernel runs no other) Rows
                # without a mask (padding rows, or none given) read nothing
                # and keep every key the rules above allow.
                tree = tl.load(mask_row[:, None] + offs_n[None, :],
                               mask=mask_on[:, None] & (offs_n < seq_len)[None, :], other=1)
                s = tl.where(tree != 0, s, float("-inf"))
            acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, s, v.to(QDT))
    return acc, l_i, m_i


@triton.jit
def _attend_ranges(acc, l_i, m_i, q, t0, fa, fb, hi_k, k_base, v_base, bt_row, offs_d, d_mask,
                   block_size, page_shift, stride_ks, stride_vs, stride_kb, stride_vb, scale,
                   softcap, slope2, q_pos, seq_len, window, causal, mask_row, mask_on,
                   SOFTCAP: tl.constexpr, PLAIN: tl.constexpr, TILE_N: tl.constexpr,
                   QDT: tl.constexpr, TREE_MASK: tl.constexpr):
    if TREE_MASK:
        # Every tile loads the mask's bytes and masks its scores, so no
        # tile is free of masking: one masked loop over [t0, hi_k) (half
        # the code of two loops).
        acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, t0, hi_k, hi_k, hi_k, k_base, v_base,
                                      bt_row, offs_d, d_mask, block_size, page_shift, stride_ks,
                                      stride_vs, stride_kb, stride_vb, scale, softcap, slope2,
                                      q_pos, seq_len, window, causal, mask_row, mask_on, True,
                                      SOFTCAP, PLAIN, TILE_N, QDT, TREE_MASK)
    else:
        # Unmasked middle [fa, fb), then the masked window head [t0, fa)
        # and diagonal tail [fb, hi_k).
        acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, fa, fb, fb, fb, k_base, v_base,
                                      bt_row, offs_d, d_mask, block_size, page_shift, stride_ks,
                                      stride_vs, stride_kb, stride_vb, scale, softcap, slope2,
                                      q_pos, seq_len, window, causal, mask_row, mask_on, False,
                                      SOFTCAP, PLAIN, TILE_N, QDT, TREE_MASK)
        acc, l_i, m_i = _attend_tiles(acc, l_i, m_i, q, t0, tl.minimum(fa, hi_k), fb, hi_k,
                                      k_base, v_base, bt_row, offs_d, d_mask, block_size,
                                      page_shift, stride_ks, stride_vs, stride_kb, stride_vb,
                                      scale, softcap, slope2, q_pos, seq_len, window, causal,
                                      mask_row, mask_on, True, SOFTCAP, PLAIN, TILE_N, QDT,
                                      TREE_MASK)
    return acc, l_i, m_i


@triton.jit
def unified_attention(
        q_ptr, k_cache, v_cache, out_ptr, lse_ptr, sinks_ptr, alibi_ptr,
        block_table, seq_lens, query_start_loc, counts,
        scale, softcap, out_scale,
        group_size, heads, head_dim, bt_stride,
        stride_qt, stride_qh, stride_ot, stride_oh, num_q_heads,
        stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
        block_size, window, causal, use_softcap, use_alibi, use_sinks, store_lse,
        HEAD_PAD: tl.constexpr, BLOCK_M: tl.constexpr, TILE_N: tl.constexpr,
        PLAIN: tl.constexpr, mask_meta=None, TREE_MASK: tl.constexpr = False,
        k_scale_ptr=None, v_scale_ptr=None, scale_stride=None,
        SCALE_TENSORS: tl.constexpr = False):
    tl.static_assert(not (PLAIN and TREE_MASK), "the tree mask is the general kernel's")
    QDT = q_ptr.dtype.element_ty
    # Programs start in grid order; the last q blocks of a request see the
    # most keys (causal), so the highest block index runs first: the long
    # programs start early and the short ones fill the tail.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    hg = tl.program_id(1)
    num_reqs = tl.load(counts)
    block_q = BLOCK_M // heads

    req, q_begin, q_len, q_start = find_q_block(pid, query_start_loc, num_reqs, block_q)
    if q_start >= q_len:
        return
    seq_len = tl.load(seq_lens + req)
    ctx_len = seq_len - q_len

    offs_m = tl.arange(0, BLOCK_M)
    tok = q_start + offs_m // heads
    head = hg * heads + offs_m % heads
    row_ok = (offs_m // heads < block_q) & (tok < q_len)
    q_pos = ctx_len + tok
    kvh = (hg * heads) // group_size
    if SCALE_TENSORS:
        # K's scale multiplies every score of the program's KV head, V's
        # its output.
        scale = scale * tl.load(k_scale_ptr + kvh * scale_stride)
        out_scale = tl.load(v_scale_ptr + kvh * scale_stride)
    offs_d = tl.arange(0, HEAD_PAD)
    d_mask = offs_d < head_dim

    q_row = (q_begin + tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_row[:, None] + offs_d[None, :],
                mask=row_ok[:, None] & d_mask[None, :], other=0.0)

    slope2 = tl.zeros([BLOCK_M], tl.float32)
    if not PLAIN:
        if use_alibi != 0:
            slope2 = tl.load(alibi_ptr + head) * 1.4426950408889634
    # PLAIN: block_size is a power of two (the launcher's rule); its log2.
    page_shift = block_size * 0
    if PLAIN:
        pages = block_size * 0 + 1
        while pages < block_size:
            pages = pages * 2
            page_shift = page_shift + 1
    if use_sinks != 0:
        m_i = tl.load(sinks_ptr + head) * 1.4426950408889634
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], tl.float32)

    # Key range seen by some row [lo_k, hi_k), and by every row [full_lo, full_hi).
    last_tok = tl.minimum(q_start + block_q, q_len) - 1
    min_pos = ctx_len + q_start
    max_pos = ctx_len + last_tok
    lo_k, full_lo, hi_k, full_hi = key_range(min_pos, max_pos, seq_len, window, causal)
    t0 = (lo_k // TILE_N) * TILE_N
    fa = tl.cdiv(full_lo, TILE_N) * TILE_N
    fb = (full_hi // TILE_N) * TILE_N
    fa = tl.maximum(fa, t0)
    fb = tl.maximum(fb, fa)

    bt_row = block_table + req.to(tl.int64) * bt_stride
    k_base = k_cache + kvh.to(tl.int64) * stride_kh
    v_base = v_cache + kvh.to(tl.int64) * stride_vh
    mask_row = None
    mask_on = None
    if TREE_MASK:
        # Row i of the request's [q_len x seq_len] block; the address is
        # read here, not passed, so a replayed graph follows the mask the
        # last plan saw wherever the engine put it.
        mask_addr = tl.load(mask_meta)
        mask_on = row_ok & (mask_addr != 0)
        mask_row = mask_addr.to(tl.pointer_type(tl.uint8)) + (
            tl.load(mask_meta + 1 + req) + tok.to(tl.int64) * seq_len)
    if PLAIN:
        acc, l_i, m_i = _attend_ranges(acc, l_i, m_i, q, t0, fa, fb, hi_k, k_base, v_base, bt_row,
                                       offs_d, d_mask, block_size, page_shift, stride_ks, stride_vs,
                                       stride_kb, stride_vb, scale, softcap, slope2, q_pos, seq_len,
                                       window, causal, mask_row, mask_on, False, True, TILE_N, QDT,
                                       TREE_MASK)
    elif use_softcap != 0:
        acc, l_i, m_i = _attend_ranges(acc, l_i, m_i, q, t0, fa, fb, hi_k, k_base, v_base, bt_row,
                                       offs_d, d_mask, block_size, page_shift, stride_ks, stride_vs,
                                       stride_kb, stride_vb, scale, softcap, slope2, q_pos, seq_len,
                                       window, causal, mask_row, mask_on, True, False, TILE_N, QDT,
                                       TREE_MASK)
    else:
        acc, l_i, m_i = _attend_ranges(acc, l_i, m_i, q, t0, fa, fb, hi_k, k_base, v_base, bt_row,
                                       offs_d, d_mask, block_size, page_shift, stride_ks, stride_vs,
                                       stride_kb, stride_vb, scale, softcap, slope2, q_pos, seq_len,
                                       window, causal, mask_row, mask_on, False, False, TILE_N, QDT,
                                       TREE_MASK)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc * (out_scale / l_safe)[:, None]
    o_row = (q_begin + tok).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(out_ptr + o_row[:, None] + offs_d[None, :], o.to(QDT),
             mask=row_ok[:, None] & d_mask[None, :])
    if store_lse != 0:
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
        tl.store(lse_ptr + (q_begin + tok).to(tl.int64) * num_q_heads + head, lse, mask=row_ok)
