"""Attention over ragged K/V (AH_FEAT_RAGGED_KV): keys and values come
packed, request r's being rows [cu_seqlens_k[r], cu_seqlens_k[r+1]) of key
[Tk, Hk, qk_dim] and value [Tk, Hk, v_dim], not in a paged cache. This is
the prefill of MLA without absorption (DeepSeek-V3: qk 192 = 128 nope + 64
rope, v 128, a KV head per query head) over the K/V the engine
decompressed, and the ragged form of any decoder layer.

Grid and program layout are the unified kernel's: (q_blocks, q_head_groups),
each program BLOCK_M rows = HEADS query heads of one KV head times
BLOCK_M // HEADS consecutive query tokens of one request, found by binary
search over query_start_loc; the highest block index runs first.

Positions: keys at 0 .. k_len - 1; query i of q_len at k_len - q_len + i
(bottom-right) or, with context_keys, at k_len + i (a chunk of context
before every query). Visibility, windows, soft-cap, ALiBi and sinks follow
reference.h at those positions (common.visible; a bidirectional request
may have fewer keys than queries, so positions may be negative). Tiles
every row sees in full skip the mask; the window's head and the diagonal
tail run one masked loop. A request without keys (context step) runs no
tile: out 0 and LSE -inf (the sink's, with sinks).

Head sizes: the query/key channels are QK_A (a power of two) plus, when
QK_B > 0, a second power-of-two part QK_B, so qk 192 runs as 128 + 64 with
two dots into one accumulator instead of padding to 256; values have their
own pad V_PAD. qk_dim and v_dim are runtime values up to QK_A + QK_B and
V_PAD; channels past them are zero-filled on load and never stored.

PLAIN (compile-time) is the specialization for layers without soft-cap and
ALiBi (MLA's): no ALiBi term per score, the scale folded into the
exponent's FMA; the other one branches on soft-cap outside its key loops.
Two binaries rather than one with every branch: each loop's pipeline
buffers take shared memory of their own, and six loops would not fit
sm_90's 227 KB at qk 192.
"""
import triton
import triton.language as tl

from common import (find_q_block, key_range, online_softmax_step, online_softmax_step_scaled,
                    score_transform, visible)


@triton.jit
def _tile_start(i, n_first, start, start2, TILE_N: tl.constexpr):
    return tl.where(i < n_first, start + i * TILE_N, start2 + (i - n_first) * TILE_N)


@triton.jit
def _ragged_tiles(acc, l_i, m_i, q_a, q_b, start, end, start2, end2, k_base, v_base, offs_a,
                  offs_b, offs_v, qk_dim, v_dim, stride_kt, stride_vt, scale, softcap, slope2,
                  q_pos, k_len, window, causal, MASKED: tl.constexpr, MODE: tl.constexpr,
                  QK_A: tl.constexpr, QK_B: tl.constexpr, TILE_N: tl.constexpr,
                  QDT: tl.constexpr):
    # Tiles of [start, end) then [start2, end2) in one loop (the window's
    # head and the diagonal tail share one copy of the masked code).
    # MODE 0 (PLAIN): no soft-cap, no ALiBi (the log2-unit scale folds into
    # the exponent's FMA); 1: ALiBi when slope2 != 0; 2: soft-cap, and ALiBi
    # when slope2 != 0.
    n_first = tl.cdiv(tl.maximum(end - start, 0), TILE_N)
    n_tiles = n_first + tl.cdiv(tl.maximum(end2 - start2, 0), TILE_N)
    a_ok = offs_a < qk_dim
    v_ok = offs_v < v_dim
    for i in range(0, n_tiles):
        offs_n = _tile_start(i, n_first, start, start2, TILE_N) + tl.arange(0, TILE_N)
        rows = offs_n.to(tl.int64)
        k_row = rows * stride_kt
        v_row = rows * stride_vt
        if MASKED:
            n_ok = offs_n < k_len
            k_a = tl.load(k_base + k_row[None, :] + offs_a[:, None],
                          mask=a_ok[:, None] & n_ok[None, :], other=0.0)
            v = tl.load(v_base + v_row[:, None] + offs_v[None, :],
                        mask=n_ok[:, None] & v_ok[None, :], other=0.0)
        else:
            k_a = tl.load(k_base + k_row[None, :] + offs_a[:, None], mask=a_ok[:, None], other=0.0)
            v = tl.load(v_base + v_row[:, None] + offs_v[None, :], mask=v_ok[None, :], other=0.0)
        qk = tl.dot(q_a, k_a)
        if QK_B > 0:
            b_ok = offs_b < qk_dim
            if MASKED:
                k_b = tl.load(k_base + k_row[None, :] + offs_b[:, None],
                              mask=b_ok[:, None] & n_ok[None, :], other=0.0)
            else:
                k_b = tl.load(k_base + k_row[None, :] + offs_b[:, None], mask=b_ok[:, None],
                              other=0.0)
            qk = tl.dot(q_b, k_b, qk)
        if MODE == 0:
            if MASKED:
                s = tl.where(visible(offs_n, q_pos, k_len, window, causal),
                             qk * (scale * 1.4426950408889634), float("-inf"))
                acc, l_i, m_i = online_softmax_step_scaled(acc, l_i, m_i, s, 1.0, v)
            else:
                acc, l_i, m_i = online_softmax_step_scaled(acc, l_i, m_i, qk,
                                                           scale * 1.4426950408889634, v)
        else:
            s = score_transform(qk, scale, softcap, slope2, offs_n, q_pos, MODE == 2)
            if MASKED:
                s = tl.where(visible(offs_n, q_pos, k_len, window, causal), s, float("-inf"))
            acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, s, v)
    return acc, l_i, m_i


@triton.jit
def _ragged_ranges(acc, l_i, m_i, q_a, q_b, t0, fa, fb, hi_k, k_base, v_base, offs_a, offs_b,
                   offs_v, qk_dim, v_dim, stride_kt, stride_vt, scale, softcap, slope2, q_pos,
                   k_len, window, causal, MODE: tl.constexpr, QK_A: tl.constexpr,
                   QK_B: tl.constexpr, TILE_N: tl.constexpr, QDT: tl.constexpr):
    # Unmasked middle [fa, fb), then the masked window head [t0, fa) and
    # diagonal tail [fb, hi_k).
    acc, l_i, m_i = _ragged_tiles(acc, l_i, m_i, q_a, q_b, fa, fb, fb, fb, k_base, v_base, offs_a,
                                  offs_b, offs_v, qk_dim, v_dim, stride_kt, stride_vt, scale,
                                  softcap, slope2, q_pos, k_len, window, causal, False, MODE, QK_A,
                                  QK_B, TILE_N, QDT)
    acc, l_i, m_i = _ragged_tiles(acc, l_i, m_i, q_a, q_b, t0, tl.minimum(fa, hi_k), fb, hi_k,
                                  k_base, v_base, offs_a, offs_b, offs_v, qk_dim, v_dim, stride_kt,
                                  stride_vt, scale, softcap, slope2, q_pos, k_len, window, causal,
                                  True, MODE, QK_A, QK_B, TILE_N, QDT)
    return acc, l_i, m_i


@triton.jit
def ragged_attention(
        q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr, sinks_ptr, alibi_ptr,
        cu_seqlens_k, query_start_loc, counts,
        scale, softcap,
        group_size, heads, qk_dim, v_dim,
        stride_qt, stride_qh, stride_ot, stride_oh, num_q_heads,
        stride_kt, stride_kh, stride_vt, stride_vh,
        window, causal, context_keys, use_softcap, use_alibi, use_sinks, store_lse,
        QK_A: tl.constexpr, QK_B: tl.constexpr, V_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
        TILE_N: tl.constexpr, PLAIN: tl.constexpr):
    QDT = q_ptr.dtype.element_ty
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    hg = tl.program_id(1)
    num_reqs = tl.load(counts)
    block_q = BLOCK_M // heads

    req, q_begin, q_len, q_start = find_q_block(pid, query_start_loc, num_reqs, block_q)
    if q_start >= q_len:
        return
    k_begin = tl.load(cu_seqlens_k + req)
    k_len = tl.load(cu_seqlens_k + req + 1) - k_begin
    # Query i at k_len - q_len + i (bottom-right) or k_len + i (context).
    ctx_len = k_len - q_len
    if context_keys != 0:
        ctx_len = k_len

    offs_m = tl.arange(0, BLOCK_M)
    tok = q_start + offs_m // heads
    head = hg * heads + offs_m % heads
    row_ok = (offs_m // heads < block_q) & (tok < q_len)
    q_pos = ctx_len + tok
    kvh = (hg * heads) // group_size
    offs_a = tl.arange(0, QK_A)
    offs_v = tl.arange(0, V_PAD)

    q_row = (q_begin + tok).to(tl.int64) * stride_qt + head * stride_qh
    q_a = tl.load(q_ptr + q_row[:, None] + offs_a[None, :],
                  mask=row_ok[:, None] & (offs_a < qk_dim)[None, :], other=0.0)
    if QK_B > 0:
        offs_b = QK_A + tl.arange(0, QK_B)
        q_b = tl.load(q_ptr + q_row[:, None] + offs_b[None, :],
                      mask=row_ok[:, None] & (offs_b < qk_dim)[None, :], other=0.0)
    else:
        # Unused: the tiles read a second part only when QK_B > 0.
        offs_b = offs_a
        q_b = q_a

    slope2 = tl.zeros([BLOCK_M], tl.float32)
    if not PLAIN:
        if use_alibi != 0:
            slope2 = tl.load(alibi_ptr + head) * 1.4426950408889634
    if use_sinks != 0:
        m_i = tl.load(sinks_ptr + head) * 1.4426950408889634
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, V_PAD], tl.float32)

    # Key range seen by some row [lo_k, hi_k), and by every row [full_lo, full_hi).
    last_tok = tl.minimum(q_start + block_q, q_len) - 1
    min_pos = ctx_len + q_start
    max_pos = ctx_len + last_tok
    lo_k, full_lo, hi_k, full_hi = key_range(min_pos, max_pos, k_len, window, causal)
    t0 = (lo_k // TILE_N) * TILE_N
    fa = tl.cdiv(full_lo, TILE_N) * TILE_N
    fb = (tl.maximum(full_hi, 0) // TILE_N) * TILE_N
    fa = tl.maximum(fa, t0)
    fb = tl.maximum(fb, fa)

    k_base = k_ptr + k_begin.to(tl.int64) * stride_kt + kvh.to(tl.int64) * stride_kh
    v_base = v_ptr + k_begin.to(tl.int64) * stride_vt + kvh.to(tl.int64) * stride_vh
    if PLAIN:
        acc, l_i, m_i = _ragged_ranges(acc, l_i, m_i, q_a, q_b, t0, fa, fb, hi_k, k_base, v_base,
                                       offs_a, offs_b, offs_v, qk_dim, v_dim, stride_kt, stride_vt,
                                       scale, softcap, slope2, q_pos, k_len, window, causal, 0,
                                       QK_A, QK_B, TILE_N, QDT)
    elif use_softcap != 0:
        acc, l_i, m_i = _ragged_ranges(acc, l_i, m_i, q_a, q_b, t0, fa, fb, hi_k, k_base, v_base,
                                       offs_a, offs_b, offs_v, qk_dim, v_dim, stride_kt, stride_vt,
                                       scale, softcap, slope2, q_pos, k_len, window, causal, 2,
                                       QK_A, QK_B, TILE_N, QDT)
    else:
        acc, l_i, m_i = _ragged_ranges(acc, l_i, m_i, q_a, q_b, t0, fa, fb, hi_k, k_base, v_base,
                                       offs_a, offs_b, offs_v, qk_dim, v_dim, stride_kt, stride_vt,
                                       scale, softcap, slope2, q_pos, k_len, window, causal, 1,
                                       QK_A, QK_B, TILE_N, QDT)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    o_row = (q_begin + tok).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(out_ptr + o_row[:, None] + offs_v[None, :], o.to(QDT),
             mask=row_ok[:, None] & (offs_v < v_dim)[None, :])
    if store_lse != 0:
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
        tl.store(lse_ptr + (q_begin + tok).to(tl.int64) * num_q_heads + head, lse, mask=row_ok)
