"""A NumPy float64 reference of paged attention (decoder layers: causal,
optional sliding window, grouped-query heads), written from the contract in
core/include/attnhost/reference.h."""

import numpy as np


def nhd(cache, layout):
    """The cache as [num_blocks, block_size, Hk, D] whatever its layout."""
    return cache if layout == "nhd" else cache.transpose(0, 2, 1, 3)


def write_kv(kc, vc, layout, slots, key, value, block_size):
    """Store new tokens' K/V at their slots (what forward must do first)."""
    k, v = nhd(kc, layout), nhd(vc, layout)
    keep = slots >= 0
    b, o = slots[keep] // block_size, slots[keep] % block_size
    k[b, o] = key[keep]
    v[b, o] = value[keep]


def attention(spec, batch_np, q, kc, vc, sinks=None):
    """out [T, Hq, v_head] in float64 for the batch's host arrays. A
    negative block-table entry (a released block) must be one no query
    sees; sinks [Hq] add a logit per head to the softmax's denominator."""
    qsl, seq, table = batch_np["query_start_loc"], batch_np["seq_lens"], batch_np["block_table"]
    bs, layout = spec.block_size, spec.kv_layout
    k_all, v_all = nhd(kc, layout).astype(np.float64), nhd(vc, layout).astype(np.float64)
    hq, hk = spec.num_q_heads, spec.num_kv_heads
    scale = spec.scale or 1.0 / np.sqrt(spec.qk_head_size)
    out = np.zeros((q.shape[0], hq, spec.v_head_size))
    for r in range(len(seq)):
        s, t0, t1 = int(seq[r]), int(qsl[r]), int(qsl[r + 1])
        pos = np.arange(s)
        p = s - (t1 - t0) + np.arange(t1 - t0)      # query positions
        vis = pos[None, :] <= p[:, None]
        if spec.sliding_window:
            vis &= pos[None, :] > p[:, None] - spec.sliding_window
        blocks = table[r, pos // bs]
        released = blocks < 0
        assert not vis[:, released].any(), f"request {r}: a released block is visible"
        blocks = np.where(released, 0, blocks)
        K = k_all[blocks, pos % bs]                 # [s, Hk, D]
        V = v_all[blocks, pos % bs]
        K = np.repeat(K, hq // hk, axis=1)          # [s, Hq, D]
        V = np.repeat(V, hq // hk, axis=1)
        Q = q[t0:t1].astype(np.float64)             # [n, Hq, D]
        sc = scale * np.einsum("nhd,shd->hns", Q, K)
        sc = np.where(vis[None], sc, -np.inf)
        m = sc.max(axis=2, keepdims=True)
        if sinks is not None:
            m = np.maximum(m, sinks.astype(np.float64)[:, None, None])
        w = np.exp(sc - m)
        den = w.sum(axis=2, keepdims=True)
        if sinks is not None:
            den += np.exp(sinks.astype(np.float64)[:, None, None] - m)
        out[t0:t1] = np.einsum("hns,shd->nhd", w / den, V)
    return out


def rel_err(got, ref):
    return float(np.sqrt(((got - ref) ** 2).sum() / max((ref ** 2).sum(), 1e-300)))
