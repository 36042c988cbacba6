#!/usr/bin/env python3
"""CPU check of the triton plugin's kernels in Triton's interpreter
(TRITON_INTERPRET=1), against a float64 NumPy transcription of
core/include/attnhost/reference.h. No GPU and no PyTorch needed: a small
NumPy-backed stand-in gives the interpreter the tensor interface it reads.

It exercises the kernels' logic (paging, masks, windows, soft-cap, ALiBi,
sinks, LSE, GQA packing, split-KV and its reduction, merge, KV writes) on
small shapes; the compiled code paths and the C launcher are checked on a
GPU by triton_check. Usage: python3 interp_check.py  (needs triton, numpy)
"""
import math
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
from decode_split import decode_split_reduce, decode_split_stage1  # noqa: E402
from kv_write import kv_write  # noqa: E402
from merge_states import merge_states  # noqa: E402
from ragged_attention import ragged_attention  # noqa: E402
from unified_attention import unified_attention  # noqa: E402


class _DT:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


# One dtype object per name, kept alive: Triton's argument specialisation
# caches by the dtype object's identity, so a freed one whose address is
# reused by another dtype would be mistaken for it.
_DTYPES = {}


def _dtype(name):
    return _DTYPES.setdefault(name, _DT(name))


class _Storage:
    def __init__(self, arr):
        self.arr = arr

    def data_ptr(self):
        return self.arr.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other):
        pass


# Address ranges of every array handed to a kernel: each load and store the
# interpreter performs is checked against them (an out-of-bounds access on a
# GPU is a fault or silent corruption; here it is a test failure).
_RANGES = []


def _check_bounds(ptrs, mask, what):
    p = ptrs[mask.astype(bool)] if mask is not None else ptrs.ravel()
    if not p.size:
        return
    starts = np.array([r[0] for r in _RANGES], np.uint64)
    ends = np.array([r[1] for r in _RANGES], np.uint64)
    p = np.unique(p.astype(np.uint64))
    ok = ((p[:, None] >= starts[None, :]) & (p[:, None] < ends[None, :])).any(1)
    if not ok.all():
        raise AssertionError(f"{what} outside every argument array ({int((~ok).sum())} addresses)")


class _BoundsChecked:
    def __init__(self, inner):
        self.inner = inner

    def load(self, ptrs, mask, other, dt):
        _check_bounds(ptrs, mask, "load")
        return self.inner.load(ptrs, mask, other, dt)

    def store(self, ptrs, val, mask):
        _check_bounds(ptrs, mask, "store")
        return self.inner.store(ptrs, val, mask)


import triton.runtime.interpreter as _interp  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

_interp._interpreter = _BoundsChecked(_interp._interpreter)


class T:
    """A NumPy array dressed as the torch tensor the interpreter expects."""

    def __init__(self, arr, dtname=None):
        self.arr = arr
        _RANGES.append((arr.ctypes.data, arr.ctypes.data + arr.nbytes))
        self.dtype = _dtype(dtname or {np.float16: "float16", np.float32: "float32", np.int32: "int32",
                                    np.int64: "int64", np.uint8: "uint8"}[arr.dtype.type])
        self._st = _Storage(arr)
        self.offset = 0

    def data_ptr(self):
        return self._st.data_ptr() + self.offset * self.arr.itemsize

    def untyped_storage(self):
        return self._st

    def new_empty(self, *a, **k):
        return T(self.arr, self.dtype.name)

    def set_(self, storage, offset, size, stride):
        self._st, self.offset = storage, offset
        return self

    def storage_offset(self):
        return self.offset

    def size(self):
        return self.arr.shape

    def stride(self):
        return tuple(s // self.arr.itemsize for s in self.arr.strides)

    def copy_(self, other):
        pass


def ref_attention(q, kc, vc, bt, qlens, lens, bs, layout, scale, causal, window, softcap, sinks, alibi,
                  tree=None):
    """float64 reference.h: out [T, Hq, D], lse [T, Hq]. tree: per request
    its [q_len, seq_len] tree mask, or None."""
    T_, hq, d = q.shape
    hk = kc.shape[2] if layout == "NHD" else kc.shape[1]
    out = np.zeros((T_, hq, d))
    lse = np.full((T_, hq), -np.inf)
    t0 = 0
    for r, (ql, L) in enumerate(zip(qlens, lens)):
        pos_k = np.arange(L)
        blk = bt[r, pos_k // bs]
        gone = blk < 0  # released: their keys must be hidden from every query
        blk = np.where(gone, 0, blk)
        sl = pos_k % bs
        for h in range(hq):
            g = h // (hq // hk)
            if layout == "NHD":
                K = kc[blk, sl, g].astype(np.float64)
                V = vc[blk, sl, g].astype(np.float64)
            else:
                K = kc[blk, g, sl].astype(np.float64)
                V = vc[blk, g, sl].astype(np.float64)
            K[gone] = np.nan
            V[gone] = np.nan
            for i in range(ql):
                row = ref_row(q[t0 + i, h], K, V, pos_k, L - ql + i, scale, causal, window,
                              softcap, sinks[h] if sinks is not None else None,
                              alibi[h] if alibi is not None else None,
                              tree[r][i] != 0 if tree is not None else None)
                if row:
                    out[t0 + i, h], lse[t0 + i, h] = row
        t0 += ql
    return out, lse


def ref_row(qv, K, V, pos_k, p, scale, causal, window, softcap, sink, slope, shown=None):
    """One query row at position p over keys K / values V at positions
    pos_k, as reference.h: (out, lse), or None when it sees nothing. Keys
    it does not see may hold NaN (released blocks): they are never used.
    shown: a tree mask's row over the keys, or None."""
    s = scale * (K @ qv.astype(np.float64))
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if slope is not None:
        s = s + slope * (pos_k - p)
    vis = np.ones(len(pos_k), bool)
    if causal:
        vis &= pos_k <= p
        if window:
            vis &= pos_k > p - window
    elif window:
        vis &= np.abs(pos_k - p) < window
    if shown is not None:
        vis &= shown
    s = np.where(vis, s, -np.inf)
    m = max(s.max() if len(pos_k) else -np.inf, sink if sink is not None else -np.inf)
    if m == -np.inf:
        return None
    e = np.exp(s - m)
    den = e.sum() + (math.exp(sink - m) if sink is not None else 0)
    return (e[vis] @ V[vis]) / den, m + math.log(den)


# FP8 formats: (exponent bits, mantissa bits, bias, torch dtype name).
FP8 = {"e4m3": (4, 3, 7, "float8_e4m3fn"), "e5m2": (5, 2, 15, "float8_e5m2")}


def fp8_decode(fmt):
    """The value of each of the 256 codes (NaN for NaN and infinity)."""
    eb, mb, bias, _ = FP8[fmt]
    c = np.arange(256)
    e, m = (c >> mb) & ((1 << eb) - 1), c & ((1 << mb) - 1)
    v = np.where(e == 0, m / 2.0 ** mb * 2.0 ** (1 - bias), (1 + m / 2.0 ** mb) * 2.0 ** (e - bias))
    v = np.where(c >> 7, -v, v)
    special = (e == 15) & (m == 7) if fmt == "e4m3" else e == 31
    return np.where(special, np.nan, v)


def fp8_cache(rng, shape, fmt):
    """Random FP8 codes of finite values up to 4 in magnitude."""
    vals = fp8_decode(fmt)
    codes = np.flatnonzero(np.isfinite(vals) & (np.abs(vals) <= 4)).astype(np.uint8)
    return rng.choice(codes, shape)


def head_axis(layout):
    return 2 if layout == "NHD" else 1


def make_case(rng, qlens, lens, hq, hk, d, bs, layout, released_window=0, kv_fmt=None):
    nb = sum((L + bs - 1) // bs for L in lens) + 3
    shape = (nb, bs, hk, d) if layout == "NHD" else (nb, hk, bs, d)
    if kv_fmt:
        kc, vc = fp8_cache(rng, shape, kv_fmt), fp8_cache(rng, shape, kv_fmt)
    else:
        kc = rng.uniform(-2, 2, shape).astype(np.float16)
        vc = rng.uniform(-2, 2, shape).astype(np.float16)
    cols = max((L + bs - 1) // bs for L in lens) + 2
    bt = np.full((len(lens), cols), 1 << 29, np.int32)
    perm = rng.permutation(nb)
    k = 0
    for r, L in enumerate(lens):
        n = (L + bs - 1) // bs
        bt[r, :n] = perm[k:k + n]
        k += n
    if released_window:
        release(bt, qlens, lens, bs, released_window)
    q = rng.uniform(-2, 2, (sum(qlens), hq, d)).astype(np.float16)
    return q, kc, vc, bt


def interleave(kc, vc):
    """K and V as the two views of one [blocks, 2, ...] allocation (the
    interleaved layouts): block stride twice a dense one's, V one block's
    worth after K. The whole allocation is what loads may touch."""
    base = np.ascontiguousarray(np.stack([kc, vc], axis=1))
    _RANGES.append((base.ctypes.data, base.ctypes.data + base.nbytes))
    return base[:, 0], base[:, 1]


def release(bt, qlens, lens, bs, window):
    """Mark the blocks a sliding window hides from every query of a request
    released, as an engine's sliding-window manager does
    (AH_FEAT_RELEASED_BLOCKS): block k of request r is released when its
    last position (k + 1) * bs - 1 <= p0 - window, p0 being the request's
    first query position. Entries alternate between -1 and a large negative
    value, so any load through one lands outside every array."""
    n = 0
    for r, (ql, L) in enumerate(zip(qlens, lens)):
        p0 = L - ql
        for k in range(bt.shape[1]):
            if (k + 1) * bs - 1 <= p0 - window:
                bt[r, k] = -1 if n % 2 else -(1 << 24)
                n += 1
    assert n, "the case releases no block"


def make_tree(rng, qlens, lens, lead=5):
    """Per request a speculative tree's [q_len, seq_len] mask, SGLang's
    layout (plugin.h): the prefix visible but for random holes, each draft
    token its ancestors and itself; the first request's second row hides
    every key (out 0, LSE -inf). Packed after `lead` bytes of garbage, so
    mask_indptr starts past 0 as a split part's view does. Returns the
    per-request masks, the packed bytes and mask_indptr."""
    trees = []
    for ql, L in zip(qlens, lens):
        m = np.zeros((ql, L), np.uint8)
        first = L - ql
        parent = [0] + [int(rng.integers(0, i)) for i in range(1, ql)]
        for i in range(ql):
            m[i, :first] = rng.random(first) > 0.1
            if i:
                m[i, first:first + i] = m[parent[i], first:first + i]
            m[i, first + i] = 1
        trees.append(m)
    if qlens[0] > 1:
        trees[0][1] = 0
    packed = np.concatenate([rng.integers(0, 256, lead).astype(np.uint8)] +
                            [m.ravel() for m in trees] + [np.zeros(1, np.uint8)])
    indptr = lead + np.concatenate([[0], np.cumsum([m.size for m in trees])]).astype(np.int64)
    return trees, packed, indptr


def fp8_scales(rng, hk, kc, vc, layout, kv_fmt, scales):
    """FP8 caches' scales and the caches the reference reads: (K scales, V
    scales, real K, real V); scales "per_head" ([hk], head h's 1 + h times
    head 0's, so a kernel reading another head's is far off), "tensor"
    ([1]) or "host" (floats, the launcher's fold)."""
    n = hk if scales == "per_head" else 1
    ks = (rng.uniform(0.3, 0.6) * (1 + np.arange(n))).astype(np.float32)
    vs = (rng.uniform(0.3, 0.6) * (1 + np.arange(n))[::-1]).astype(np.float32)
    shape = [1, 1, 1, 1]
    shape[head_axis(layout)] = n
    table = fp8_decode(kv_fmt)
    return (ks, vs, table[kc] * ks.astype(np.float64).reshape(shape),
            table[vc] * vs.astype(np.float64).reshape(shape))


def strides(kc, layout):
    s = [x // kc.itemsize for x in kc.strides]
    return (s[0], s[1], s[2]) if layout == "NHD" else (s[0], s[2], s[1])  # block, slot, head


def check(name, out, lse, ref_o, ref_l, tol=2e-3):
    rel = np.linalg.norm(out.astype(np.float64) - ref_o) / max(np.linalg.norm(ref_o), 1e-30)
    fin = np.isfinite(ref_l)
    lerr = np.abs(lse[fin] - ref_l[fin]).max() if fin.any() else 0.0
    ok = rel < tol and lerr < 2e-2 and np.all(np.isneginf(lse[~fin])) and np.isfinite(out).all()
    print(f"{'ok' if ok else 'FAIL'} {name}: rel {rel:.2e} lse {lerr:.2e}", flush=True)
    return ok


def check_empty(name, out, lse, qlens, lens, sinks):
    """Requests with no keys (AH_FEAT_EMPTY_KV): their rows are exactly 0
    and their LSE is -inf, or the sink's when the layer has sinks (the
    reference's attention over the sink alone)."""
    qsl = np.concatenate([[0], np.cumsum(qlens)])
    rows = [t for r, L in enumerate(lens) if L == 0 for t in range(qsl[r], qsl[r + 1])]
    want = np.full(out.shape[1], -np.inf) if sinks is None else sinks.astype(np.float64)
    ok = all(np.all(out[t] == 0) and np.allclose(lse[t], want, atol=1e-5) for t in rows)
    print(f"{'ok' if ok else 'FAIL'} {name}: {len(rows)} empty rows", flush=True)
    return ok


def run_unified(rng, name, qlens, lens, hq, hk, d, bs, layout, causal=1, window=0, softcap=0.0,
                use_sinks=False, use_alibi=False, head_pad=None, block_m=64, tile_n=32, plain=False,
                released=False, interleaved=False, tree=None, kv_fmt=None, scales=None):
    """tree: None (the kernel without the mask), "mask" (a tree mask), or
    "absent" (the masked kernel told there is no mask: address 0, as a
    graph captured on a masked batch replays one without). kv_fmt: an FP8
    cache ("e4m3", "e5m2") with scales "host", "tensor" or "per_head"."""
    _RANGES.clear()
    q, kc, vc, bt = make_case(rng, qlens, lens, hq, hk, d, bs, layout,
                              released_window=window if released else 0, kv_fmt=kv_fmt)
    if interleaved:
        kc, vc = interleave(kc, vc)
    trees, extra = None, {}
    if tree:
        trees, packed, indptr = make_tree(rng, qlens, lens)
        T(packed)  # the mask's bytes are an array the loads may touch
        addr = packed.ctypes.data if tree == "mask" else 0
        extra = dict(mask_meta=T(np.concatenate([[addr], indptr]).astype(np.int64)),
                     TREE_MASK=True)
        if tree == "absent":
            trees = None
    kref, vref, kscale, vscale = kc, vc, 1.0, 1.0
    if kv_fmt:
        ks, vs, kref, vref = fp8_scales(rng, hk, kc, vc, layout, kv_fmt, scales)
        if scales == "host":
            kscale, vscale = float(ks[0]), float(vs[0])
        else:
            extra.update(k_scale_ptr=T(ks), v_scale_ptr=T(vs),
                         scale_stride=int(scales == "per_head"), SCALE_TENSORS=True)
        kc, vc = T(kc, FP8[kv_fmt][3]), T(vc, FP8[kv_fmt][3])
    else:
        kc, vc = T(kc), T(vc)
    pad = head_pad or max(64, 1 << (d - 1).bit_length())
    sinks = rng.uniform(-1, 3, hq).astype(np.float32) if use_sinks else None
    alibi = (2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)).astype(np.float32) if use_alibi else None
    scale = 1 / math.sqrt(d)
    out = np.full(q.shape, np.nan, np.float16)
    lse = np.full(q.shape[:2], np.nan, np.float32)
    qsl = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    group = hq // hk
    heads = max(h for h in range(1, min(group, block_m) + 1) if group % h == 0)
    block_q = block_m // heads
    grid = (len(q) // block_q + len(qlens) + 1, hq // heads)
    ks, vs = strides(kc.arr, layout), strides(vc.arr, layout)
    dummy = np.zeros(hq, np.float32)
    unified_attention[grid](
        T(q), kc, vc, T(out), T(lse), T(sinks if use_sinks else dummy),
        T(alibi if use_alibi else dummy), T(bt), T(np.array(lens, np.int32)), T(qsl),
        T(np.array([len(qlens), len(q)], np.int32)),
        scale * kscale, softcap if softcap else 1.0, vscale, group, heads, d, bt.shape[1],
        q.shape[1] * d, d, q.shape[1] * d, d, hq, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
        bs, window, causal, int(softcap > 0), int(use_alibi), int(use_sinks), 1,
        HEAD_PAD=pad, BLOCK_M=block_m, TILE_N=tile_n, PLAIN=plain, **extra)
    ro, rl = ref_attention(q, kref, vref, bt, qlens, lens, bs, layout, scale, causal, window,
                           softcap, sinks, alibi, trees)
    name = ("unified plain " if plain else "unified mask " if tree else "unified ") + name
    if kv_fmt:
        name += f" fp8 {kv_fmt} {scales} scales"
    ok = check(name, out, lse, ro, rl)
    if 0 in lens:
        ok = check_empty(name, out, lse, qlens, lens, sinks) and ok
    return ok


def run_decode(rng, name, lens, hq, hk, d, bs, layout, splits, split_tile, window=0, softcap=0.0,
               use_sinks=False, use_alibi=False, tile_n=32, released=False, interleaved=False,
               kv_fmt=None, scales=None):
    _RANGES.clear()
    qlens = [1] * len(lens)
    q, kc, vc, bt = make_case(rng, qlens, lens, hq, hk, d, bs, layout,
                              released_window=window if released else 0, kv_fmt=kv_fmt)
    if interleaved:
        kc, vc = interleave(kc, vc)
    kref, vref, kscale, vscale, extra = kc, vc, 1.0, 1.0, {}
    if kv_fmt:
        ks, vs, kref, vref = fp8_scales(rng, hk, kc, vc, layout, kv_fmt, scales)
        if scales == "host":
            kscale, vscale = float(ks[0]), float(vs[0])
        else:
            extra = dict(k_scale_ptr=T(ks), v_scale_ptr=T(vs),
                         scale_stride=int(scales == "per_head"), SCALE_TENSORS=True)
        kc, vc = T(kc, FP8[kv_fmt][3]), T(vc, FP8[kv_fmt][3])
    else:
        kc, vc = T(kc), T(vc)
    pad = max(64, 1 << (d - 1).bit_length())
    sinks = rng.uniform(-1, 3, hq).astype(np.float32) if use_sinks else np.zeros(hq, np.float32)
    alibi = (2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)).astype(np.float32) if use_alibi else None
    scale = 1 / math.sqrt(d)
    R = len(lens)
    mid_o = np.full(R * hq * splits * pad, np.nan, np.float32)
    mid_l = np.full(R * hq * splits, np.nan, np.float32)
    out = np.full(q.shape, np.nan, np.float16)
    lse = np.full(q.shape[:2], np.nan, np.float32)
    counts = np.array([R, R], np.int32)
    ks, vs = strides(kc.arr, layout), strides(vc.arr, layout)
    group = hq // hk
    decode_split_stage1[(R, hk * ((group + 15) // 16), splits)](
        T(q), kc, vc, T(mid_o), T(mid_l), T(alibi if use_alibi else sinks), T(bt),
        T(np.array(lens, np.int32)), T(counts), scale * kscale, softcap if softcap else 1.0,
        group, d, bt.shape[1], hq * d, d, ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
        bs, window, splits, split_tile, splits, hq, int(softcap > 0), int(use_alibi),
        HEAD_PAD=pad, BLOCK_H=16, TILE_N=tile_n, **extra)
    decode_split_reduce[(R, hq)](
        T(mid_o), T(mid_l), T(out), T(lse), T(sinks), T(counts), vscale, d, splits, splits, hq * d,
        d, hq, int(use_sinks), 1, HEAD_PAD=pad, MAX_SPLITS=64)
    ro, rl = ref_attention(q, kref, vref, bt, qlens, lens, bs, layout, scale, 1, window, softcap,
                           sinks if use_sinks else None, alibi)
    name = f"decode {name} splits {splits}" + (f" fp8 {kv_fmt} {scales} scales" if kv_fmt else "")
    ok = check(name, out, lse, ro, rl)
    if 0 in lens:
        ok = check_empty(name, out, lse, qlens, lens, sinks if use_sinks else None) and ok
    return ok


def run_guarded(fn, rng, name, *args, **kw):
    """fn, with an access outside every array (the bounds check) reported
    as this case's failure instead of ending the run."""
    try:
        return fn(rng, name, *args, **kw)
    except (AssertionError, InterpreterError) as e:
        print(f"FAIL {name}: {e}", flush=True)
        return False


def ref_ragged(q, k, v, qlens, klens, context, scale, causal, window, softcap, sinks, alibi):
    """float64 reference.h over ragged K/V: out [T, Hq, v], lse [T, Hq]."""
    T_, hq, _ = q.shape
    hk, dv = k.shape[1], v.shape[2]
    out = np.zeros((T_, hq, dv))
    lse = np.full((T_, hq), -np.inf)
    t0 = k0 = 0
    for ql, L in zip(qlens, klens):
        pos_k = np.arange(L)
        for h in range(hq):
            K = k[k0:k0 + L, h // (hq // hk)].astype(np.float64)
            V = v[k0:k0 + L, h // (hq // hk)].astype(np.float64)
            for i in range(ql):
                row = ref_row(q[t0 + i, h], K, V, pos_k, (L if context else L - ql) + i, scale,
                              causal, window, softcap, sinks[h] if sinks is not None else None,
                              alibi[h] if alibi is not None else None)
                if row:
                    out[t0 + i, h], lse[t0 + i, h] = row
        t0 += ql
        k0 += L
    return out, lse


def run_ragged(rng, name, qlens, klens, hq, hk, dqk, dv, pads, causal=1, context=0, window=0,
               softcap=0.0, use_sinks=False, use_alibi=False, block_m=64, tile_n=32, plain=False):
    """The ragged kernel: keys and values packed by cu_seqlens_k, queries
    bottom-right or (context) after every key. pads: (QK_A, QK_B, V_PAD)."""
    _RANGES.clear()
    tk = sum(klens)
    q = rng.uniform(-2, 2, (sum(qlens), hq, dqk)).astype(np.float16)
    k = rng.uniform(-1, 1, (tk, hk, dqk)).astype(np.float16)
    v = rng.uniform(-1, 1, (tk, hk, dv)).astype(np.float16)
    sinks = rng.uniform(-1, 3, hq).astype(np.float32) if use_sinks else None
    alibi = (2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)).astype(np.float32) if use_alibi else None
    scale = 1 / math.sqrt(dqk)
    out = np.full((len(q), hq, dv), np.nan, np.float16)
    lse = np.full((len(q), hq), np.nan, np.float32)
    qsl = np.concatenate([[0], np.cumsum(qlens)]).astype(np.int32)
    cuk = np.concatenate([[0], np.cumsum(klens)]).astype(np.int32)
    group = hq // hk
    heads = max(h for h in range(1, min(group, block_m) + 1) if group % h == 0)
    grid = (len(q) // (block_m // heads) + len(qlens) + 1, hq // heads)
    dummy = np.zeros(hq, np.float32)
    ragged_attention[grid](
        T(q), T(k), T(v), T(out), T(lse), T(sinks if use_sinks else dummy),
        T(alibi if use_alibi else dummy), T(cuk), T(qsl), T(np.array([len(qlens), len(q)], np.int32)),
        scale, softcap if softcap else 1.0, group, heads, dqk, dv,
        hq * dqk, dqk, hq * dv, dv, hq, hk * dqk, dqk, hk * dv, dv,
        window, causal, context, int(softcap > 0), int(use_alibi), int(use_sinks), 1,
        QK_A=pads[0], QK_B=pads[1], V_PAD=pads[2], BLOCK_M=block_m, TILE_N=tile_n, PLAIN=plain)
    ro, rl = ref_ragged(q, k, v, qlens, klens, context, scale, causal, window, softcap, sinks, alibi)
    name = ("ragged plain " if plain else "ragged ") + name
    ok = check(name, out, lse, ro, rl)
    if context and 0 in klens:
        ok = check_empty(name, out, lse, qlens, klens, sinks) and ok
    return ok


def run_merge(rng):
    _RANGES.clear()
    Tn, H, D = 9, 3, 80
    va = rng.uniform(-2, 2, (Tn, H, D)).astype(np.float16)
    vb = rng.uniform(-2, 2, (Tn, H, D)).astype(np.float16)
    la = rng.uniform(-5, 5, (Tn, H)).astype(np.float32)
    lb = rng.uniform(-5, 5, (Tn, H)).astype(np.float32)
    la[0, :] = -np.inf
    lb[0, 0] = -np.inf
    out = np.full_like(va, np.nan)
    lo = np.full_like(la, np.nan)
    merge_states[(Tn, H)](T(va), T(la), T(vb), T(lb), T(out), T(lo), H, D, H * D, D, H * D, D, H * D, D,
                          1, HEAD_PAD=128)
    m = np.maximum(la, lb).astype(np.float64)
    ms = np.where(np.isneginf(m), 0, m)
    wa, wb = np.exp(la - ms), np.exp(lb - ms)
    den = wa + wb
    ro = np.where(den[..., None] > 0, (wa[..., None] * va + wb[..., None] * vb) / np.where(den > 0, den, 1)[..., None], 0)
    rl = np.where(den > 0, ms + np.log(np.where(den > 0, den, 1)), -np.inf)
    return check("merge_states", out, lo, ro, rl)


def run_kv_write_scales(rng, scales, layout="NHD"):
    """kv_write's FP8 path with scales in tensors (SCALE_TENSORS) into a
    float32 cache: each element must be float32(x / scale of its KV head)
    bit for bit, the division the reference does (a multiply by the
    reciprocal rounds some differently). The interpreter's own FP8
    conversion is not IEEE round-to-nearest-even, so the FP8 rounding
    itself is left to the GPU checks."""
    _RANGES.clear()
    Tn, hk, d, bs, nb = 13, 3, 80, 16, 4
    key = rng.uniform(-2, 2, (Tn, hk, d)).astype(np.float16)
    val = rng.uniform(-2, 2, (Tn, hk, d)).astype(np.float16)
    n = hk if scales == "per_head" else 1
    ks = rng.uniform(0.01, 3, n).astype(np.float32)
    vs = rng.uniform(0.01, 3, n).astype(np.float32)
    shape = (nb, bs, hk, d) if layout == "NHD" else (nb, hk, bs, d)
    kc = np.zeros(shape, np.float32)
    vc = np.zeros(shape, np.float32)
    slots = rng.permutation(nb * bs)[:Tn].astype(np.int64)
    slots[5] = -1
    cks, cvs = strides(kc, layout), strides(vc, layout)
    kv_write[(Tn, hk)](T(key), T(val), T(kc), T(vc), T(slots), T(np.array([1, Tn], np.int32)),
                       0.0, 0.0, d, bs, hk * d, d, hk * d, d, cks[0], cks[1], cks[2], cvs[0],
                       cvs[1], cvs[2], HEAD_PAD=256, IS_FP8=True, k_scale_ptr=T(ks),
                       v_scale_ptr=T(vs), scale_stride=int(n > 1), SCALE_TENSORS=True)
    ek, ev = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    hs = np.arange(hk) if n > 1 else np.zeros(hk, int)
    for t, s in enumerate(slots):
        if s < 0:
            continue
        rk = key[t].astype(np.float32) / ks[hs][:, None]
        rv = val[t].astype(np.float32) / vs[hs][:, None]
        if layout == "NHD":
            ek[s // bs, s % bs], ev[s // bs, s % bs] = rk, rv
        else:
            ek[s // bs, :, s % bs], ev[s // bs, :, s % bs] = rk, rv
    ok = np.array_equal(ek.view(np.uint32), kc.view(np.uint32)) and \
        np.array_equal(ev.view(np.uint32), vc.view(np.uint32))
    print(f"{'ok' if ok else 'FAIL'} kv_write {scales} scale tensors {layout} (x / scale bitwise)")
    return ok


def run_kv_write(rng, layout="HND", interleaved=False):
    _RANGES.clear()
    Tn, hk, d, bs, nb = 11, 2, 48, 16, 5
    key = rng.uniform(-2, 2, (Tn, hk, d)).astype(np.float16)
    val = rng.uniform(-2, 2, (Tn, hk, d)).astype(np.float16)
    shape = (nb, hk, bs, d) if layout == "HND" else (nb, bs, hk, d)
    kc = np.zeros(shape, np.float16)
    vc = np.zeros(shape, np.float16)
    if interleaved:
        kc, vc = interleave(kc, vc)
    slots = rng.permutation(nb * bs)[:Tn].astype(np.int64)
    slots[3] = -1
    ks, vs = strides(kc, layout), strides(vc, layout)
    kv_write[(Tn + 2, hk)](T(key), T(val), T(kc), T(vc), T(slots), T(np.array([1, Tn], np.int32)),
                           1.0, 1.0, d, bs, hk * d, d, hk * d, d, ks[0], ks[1], ks[2], vs[0], vs[1],
                           vs[2], HEAD_PAD=256, IS_FP8=False)
    ek, ev = np.zeros(shape, np.float16), np.zeros(shape, np.float16)
    for t, s in enumerate(slots):
        if s >= 0:
            if layout == "HND":
                ek[s // bs, :, s % bs] = key[t]
                ev[s // bs, :, s % bs] = val[t]
            else:
                ek[s // bs, s % bs] = key[t]
                ev[s // bs, s % bs] = val[t]
    ok = np.array_equal(ek, kc) and np.array_equal(ev, vc)
    what = layout + (" interleaved" if interleaved else "")
    print(f"{'ok' if ok else 'FAIL'} kv_write ({what}, padding slot skipped)")
    return ok


def main():
    rng = np.random.default_rng(7)
    res = [
        run_unified(rng, "mixed gqa2 d64 nhd", [1, 37, 90], [40, 37, 150], 4, 2, 64, 16, "NHD"),
        run_unified(rng, "mixed group3 d48 hnd bs32", [5, 1, 70], [70, 33, 70], 6, 2, 48, 32, "HND"),
        run_unified(rng, "window+softcap+sinks+alibi", [1, 50, 100], [130, 50, 120], 4, 2, 64, 16,
                    "NHD", window=23, softcap=20.0, use_sinks=True, use_alibi=True),
        run_unified(rng, "encoder window", [60, 45], [60, 45], 2, 1, 64, 16, "NHD", causal=0, window=9,
                    use_alibi=True),
        run_unified(rng, "cross", [13, 3], [50, 70], 2, 2, 64, 16, "NHD", causal=0),
        run_unified(rng, "mqa8 d96", [1, 20], [81, 20], 8, 1, 96, 16, "HND"),
        # The PLAIN specialization (no soft-cap/ALiBi, power-of-two pages).
        run_unified(rng, "mixed gqa2 d64 nhd", [1, 37, 90], [40, 37, 150], 4, 2, 64, 16, "NHD",
                    plain=True),
        run_unified(rng, "mixed group4 d48 hnd bs32 tile64", [5, 1, 70], [70, 33, 170], 8, 2, 48, 32,
                    "HND", tile_n=64, plain=True),
        run_unified(rng, "window+sinks", [1, 50, 100], [130, 50, 120], 4, 2, 64, 16, "NHD",
                    window=23, use_sinks=True, plain=True),
        run_unified(rng, "encoder window", [60, 45], [60, 45], 2, 1, 64, 16, "NHD", causal=0,
                    window=9, plain=True),
        run_unified(rng, "bidirectional bs64", [70, 33], [70, 33], 4, 1, 64, 64, "NHD", causal=0,
                    plain=True),
        run_unified(rng, "cross", [13, 3], [50, 70], 2, 2, 64, 16, "NHD", causal=0, plain=True),
        run_decode(rng, "gqa4", [200, 1, 333, 64], 8, 2, 64, 16, "NHD", 4, 64),
        run_decode(rng, "group20 (two head blocks) hnd", [150, 97], 40, 2, 64, 16, "HND", 3, 32),
        run_decode(rng, "window+softcap+sinks+alibi", [300, 20, 170], 4, 2, 64, 16, "NHD", 5, 32,
                   window=57, softcap=30.0, use_sinks=True, use_alibi=True),
        # Requests with no keys (a context-parallel rank holding none of
        # their keys yet) in decode-shaped batches, block-table rows garbage.
        run_unified(rng, "empty kv", [1, 1, 1], [0, 45, 0], 4, 2, 64, 16, "NHD"),
        run_unified(rng, "empty kv window+softcap+sinks+alibi", [1, 1], [0, 77], 4, 2, 64, 16, "NHD",
                    window=23, softcap=20.0, use_sinks=True, use_alibi=True),
        run_unified(rng, "empty kv", [1, 1, 1], [0, 45, 0], 4, 2, 64, 16, "HND", plain=True),
        run_unified(rng, "empty kv all", [1, 1], [0, 0], 4, 2, 64, 16, "NHD", plain=True),
        run_decode(rng, "empty kv", [0, 200, 0, 64], 8, 2, 64, 16, "NHD", 4, 64),
        run_decode(rng, "empty kv window+softcap+sinks+alibi", [0, 130], 4, 2, 64, 16, "NHD", 3, 32,
                   window=57, softcap=30.0, use_sinks=True, use_alibi=True),
        run_decode(rng, "empty kv all", [0, 0], 4, 1, 64, 16, "HND", 2, 32),
        # Released blocks (AH_FEAT_RELEASED_BLOCKS): the entries of blocks a
        # window hides from every query are negative; tiles start before the
        # first visible key (tile alignment), so such entries come up in the
        # masked loop and must never become addresses. Tiles wider than a
        # page, chunked prefill and decode rows, every specialization.
        run_guarded(run_unified, rng, "released blocks", [1, 40, 3], [300, 240, 170], 4, 2, 64, 16,
                    "NHD", window=37, released=True, tile_n=64),
        run_guarded(run_unified, rng, "released blocks softcap+sinks+alibi hnd", [1, 70], [200, 260],
                    4, 2, 64, 16, "HND", window=50, softcap=20.0, use_sinks=True, use_alibi=True,
                    released=True),
        run_guarded(run_unified, rng, "released blocks bidirectional", [30, 1], [230, 190], 4, 2, 64,
                    16, "NHD", causal=0, window=41, released=True),
        run_guarded(run_unified, rng, "released blocks", [1, 40, 3], [300, 240, 170], 4, 2, 64, 16,
                    "NHD", window=37, released=True, tile_n=64, plain=True),
        run_guarded(run_unified, rng, "released blocks group4 bs32 hnd", [1, 90], [330, 250], 8, 2, 48,
                    32, "HND", window=45, use_sinks=True, released=True, tile_n=64, plain=True),
        run_guarded(run_decode, rng, "released blocks", [300, 170, 64], 8, 2, 64, 16, "NHD", 4, 32,
                    window=57, released=True, tile_n=64),
        run_guarded(run_decode, rng, "released blocks softcap+sinks+alibi", [260, 90], 4, 2, 64, 16,
                    "HND", 3, 32, window=41, softcap=30.0, use_sinks=True, use_alibi=True,
                    released=True),
        # Interleaved layouts: K and V views of one [blocks, 2, ...] cache.
        run_unified(rng, "interleaved nhd window+softcap+sinks+alibi", [1, 50, 100], [130, 50, 120],
                    4, 2, 64, 16, "NHD", window=23, softcap=20.0, use_sinks=True, use_alibi=True,
                    interleaved=True),
        run_unified(rng, "interleaved hnd group3 d48 bs32", [5, 1, 70], [70, 33, 70], 6, 2, 48, 32,
                    "HND", interleaved=True),
        run_unified(rng, "interleaved nhd", [1, 37, 90], [40, 37, 150], 4, 2, 64, 16, "NHD",
                    plain=True, interleaved=True),
        run_unified(rng, "interleaved hnd tile64", [5, 1, 70], [70, 33, 170], 8, 2, 48, 32, "HND",
                    tile_n=64, plain=True, interleaved=True),
        run_decode(rng, "interleaved nhd", [200, 1, 333, 64], 8, 2, 64, 16, "NHD", 4, 64,
                   interleaved=True),
        run_decode(rng, "interleaved hnd window+sinks", [150, 97], 8, 2, 64, 16, "HND", 3, 32,
                   window=40, use_sinks=True, interleaved=True),
        # Ragged K/V (AH_FEAT_RAGGED_KV): MLA's non-absorbed prefill (qk 192
        # as 128 + 64, v 128, a KV head per query head; fp16: the
        # interpreter's dot takes no bf16);
        # equal head sizes with GQA; bottom-right and context placement,
        # windows, soft-cap, sinks, ALiBi, bidirectional with fewer keys
        # than queries, requests without keys in a context step.
        run_ragged(rng, "mla 192/128 mha", [37, 1, 70, 9], [37, 50, 150, 20], 4, 4, 192, 128,
                   (128, 64, 128), block_m=32, tile_n=32),
        run_ragged(rng, "mla 192/128 tile64", [20, 45], [80, 45], 2, 2, 192, 128, (128, 64, 128),
                   block_m=32, tile_n=64),
        run_ragged(rng, "mla 192/128 context", [12, 5, 30], [0, 40, 70], 2, 2, 192, 128,
                   (128, 64, 128), context=1, use_sinks=True, block_m=32),
        run_ragged(rng, "mla 192/128 window+softcap+sinks+alibi", [40, 3], [100, 60], 2, 2, 192,
                   128, (128, 64, 128), window=29, softcap=20.0, use_sinks=True, use_alibi=True,
                   block_m=32),
        run_ragged(rng, "gqa4 d64", [1, 30, 66], [40, 30, 90], 8, 2, 64, 64, (64, 0, 64)),
        run_ragged(rng, "gqa2 d48 window alibi", [25, 60], [25, 100], 4, 2, 48, 48, (64, 0, 64),
                   window=17, use_alibi=True),
        run_ragged(rng, "bidirectional fewer keys window", [30, 12, 9], [45, 12, 4], 4, 2, 64, 64,
                   (64, 0, 64), causal=0, window=7),
        run_ragged(rng, "bidirectional", [30, 9], [45, 4], 2, 2, 64, 64, (64, 0, 64), causal=0),
        run_ragged(rng, "context window+alibi", [9, 20, 4], [0, 33, 70], 4, 2, 64, 64, (64, 0, 64),
                   context=1, window=11, use_alibi=True),
        run_ragged(rng, "context bidirectional window", [9, 20], [30, 0], 4, 4, 64, 64, (64, 0, 64),
                   causal=0, context=1, window=12),
        run_ragged(rng, "qk 128 v 64 in the 128 pads", [17, 33], [40, 33], 2, 1, 128, 64,
                   (128, 0, 128), tile_n=64),
        # The PLAIN specialization (no soft-cap, no ALiBi: MLA's layers).
        run_ragged(rng, "mla 192/128 mha", [37, 1, 70, 9], [37, 50, 150, 20], 4, 4, 192, 128,
                   (128, 64, 128), block_m=32, tile_n=64, plain=True),
        run_ragged(rng, "mla 192/128 context sinks", [12, 5, 30], [0, 40, 70], 2, 2, 192, 128,
                   (128, 64, 128), context=1, use_sinks=True, block_m=32, plain=True),
        run_ragged(rng, "mla 192/128 window", [40, 3], [100, 60], 2, 2, 192, 128, (128, 64, 128),
                   window=29, block_m=32, plain=True),
        run_ragged(rng, "gqa4 d64", [1, 30, 66], [40, 30, 90], 8, 2, 64, 64, (64, 0, 64),
                   plain=True),
        run_ragged(rng, "bidirectional fewer keys window", [30, 12, 9], [45, 12, 4], 4, 2, 64, 64,
                   (64, 0, 64), causal=0, window=7, plain=True),
        run_ragged(rng, "context bidirectional window", [9, 20], [30, 0], 4, 4, 64, 64, (64, 0, 64),
                   causal=0, context=1, window=12, plain=True),
        # Speculative tree verification (AH_FEAT_TREE_MASK): the masked
        # general kernel, draft tokens over a prefix with holes, a row that
        # sees nothing; with the logit features, a window, released blocks
        # and 64-key tiles; bidirectional; several tokens and heads a
        # program; and the masked kernel without a mask (address 0).
        run_guarded(run_unified, rng, "tree", [3, 1, 6, 4], [40, 70, 100, 4], 4, 2, 64, 16, "NHD",
                    tree="mask"),
        run_guarded(run_unified, rng, "tree window+softcap+sinks+alibi released hnd tile64",
                    [5, 2, 7], [230, 190, 260], 4, 2, 64, 16, "HND", window=60, softcap=20.0,
                    use_sinks=True, use_alibi=True, released=True, tile_n=64, tree="mask"),
        run_guarded(run_unified, rng, "tree bidirectional group3 d48 bs32", [4, 6], [70, 33], 6, 2,
                    48, 32, "NHD", causal=0, tree="mask"),
        run_guarded(run_unified, rng, "tree mqa8 block_m 32", [7, 2, 5], [90, 2, 50], 8, 1, 64, 16,
                    "HND", block_m=32, tree="mask"),
        run_guarded(run_unified, rng, "no mask (address 0)", [3, 1, 6], [40, 70, 100], 4, 2, 64, 16,
                    "NHD", window=23, use_sinks=True, tree="absent"),
        # FP8 caches: scales in tensors (per head, different for every KV
        # head, and per tensor) read by the unified kernel in each
        # specialization and by split-KV stage 1, and the host floats the
        # launcher folds; kv_write dividing by per-head and per-tensor
        # scale tensors.
        run_unified(rng, "gqa2", [1, 37, 90], [40, 37, 150], 8, 4, 64, 16, "NHD", kv_fmt="e4m3",
                    scales="per_head"),
        run_unified(rng, "window+softcap+sinks+alibi hnd", [1, 50, 100], [130, 50, 120], 6, 3, 64,
                    16, "HND", window=23, softcap=20.0, use_sinks=True, use_alibi=True,
                    kv_fmt="e5m2", scales="per_head"),
        run_unified(rng, "group4 bs32 tile64", [5, 1, 70], [70, 33, 170], 8, 2, 48, 32, "HND",
                    tile_n=64, plain=True, kv_fmt="e4m3", scales="per_head"),
        run_unified(rng, "mha", [1, 37, 90], [40, 37, 150], 4, 4, 64, 16, "NHD", plain=True,
                    kv_fmt="e5m2", scales="tensor"),
        run_unified(rng, "host", [1, 37, 90], [40, 37, 150], 4, 2, 64, 16, "NHD", plain=True,
                    kv_fmt="e4m3", scales="host"),
        run_guarded(run_unified, rng, "tree", [3, 1, 6, 4], [40, 70, 100, 4], 6, 3, 64, 16, "NHD",
                    tree="mask", kv_fmt="e4m3", scales="per_head"),
        run_decode(rng, "gqa4", [200, 1, 333, 64], 16, 4, 64, 16, "NHD", 4, 64, kv_fmt="e4m3",
                   scales="per_head"),
        run_decode(rng, "window+softcap+sinks+alibi hnd", [300, 20, 170], 6, 3, 64, 16, "HND", 5,
                   32, window=57, softcap=30.0, use_sinks=True, use_alibi=True, kv_fmt="e5m2",
                   scales="per_head"),
        run_decode(rng, "mha", [150, 97], 3, 3, 64, 16, "NHD", 3, 32, kv_fmt="e4m3",
                   scales="tensor"),
        run_decode(rng, "host", [150, 97], 4, 2, 64, 16, "NHD", 3, 32, kv_fmt="e5m2",
                   scales="host"),
        run_kv_write_scales(rng, "per_head"),
        run_kv_write_scales(rng, "tensor", "HND"),
        run_merge(rng),
        run_kv_write(rng),
        run_kv_write(rng, "NHD", interleaved=True),
        run_kv_write(rng, "HND", interleaved=True),
    ]
    print(f"{sum(res)} passed, {len(res) - sum(res)} failed")
    return 0 if all(res) else 1


if __name__ == "__main__":
    sys.exit(main())
