"""A ragged step (ABI 2.3) from Python: BatchBuilder.build(key_lens=...)
fills cu_seqlens_k, and a layer's ragged prefill form on cpu_amx attends
over packed keys and values, checked against a NumPy float64 reference
with the queries at the last key positions (bottom-right causal)."""

import pytest

np = pytest.importorskip("numpy", reason="the attnhost forward tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402

MODEL = """[model]
name = ragged
num_layers = 1
num_q_heads = 4
num_kv_heads = 2
head_size = 32
dtype = fp32
block_size = 16
ragged_prefill = true
"""


def reference(q, k, v, qlens, klens, scale):
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]))
    group = q.shape[1] // k.shape[1]
    t0 = k0 = 0
    for ql, kl in zip(qlens, klens):
        for i in range(ql):
            last = kl - ql + i  # the query's position: it sees keys 0..last
            for h in range(q.shape[1]):
                s = scale * (k[k0: k0 + last + 1, h // group] @ q[t0 + i, h].astype(np.float64))
                p = np.exp(s - s.max())
                out[t0 + i, h] = p @ v[k0: k0 + last + 1, h // group] / p.sum()
        t0, k0 = t0 + ql, k0 + kl
    return out


def test_ragged_step(host, cpu_amx):
    model = attnhost.Model.from_text(MODEL)
    sel = host.select(model, force="cpu_amx")
    b = attnhost.Binding(host, sel, max_num_reqs=4, max_num_tokens=32, max_blocks_per_req=4,
                         max_seq_len=48, num_blocks=16)
    builder = attnhost.BatchBuilder(b)
    qlens, ctx, klens = [5, 2, 1], [0, 9, 20], [5, 11, 21]
    blocks = np.arange(12, dtype=np.int32).reshape(3, 4)
    batch = builder.build(qlens, ctx, blocks, key_lens=klens)
    assert list(batch.cu_seqlens_k) == [0, 5, 16, 37]
    b.plan(batch)
    rng = np.random.default_rng(3)
    T, Tk = sum(qlens), sum(klens)
    q = rng.uniform(-2, 2, (T, 4, 32)).astype(np.float32)
    k = rng.uniform(-1, 1, (Tk, 2, 32)).astype(np.float32)
    v = rng.uniform(-1, 1, (Tk, 2, 32)).astype(np.float32)
    out = np.full((T, 4, 32), np.nan, np.float32)
    b.forward(0, q, k, v, None, None, out)
    want = reference(q, k, v, qlens, klens, 1 / np.sqrt(32))
    assert np.abs(out - want).max() < 1e-4
    # too few keys for a causal request: refused naming the field
    with pytest.raises(attnhost.AttnhostError, match=r"cu_seqlens_k\[2\]"):
        b.plan(builder.build(qlens, ctx, blocks, key_lens=[5, 1, 21]))
    # a paged step again: no keys' offsets
    assert builder.build(qlens, ctx, blocks).cu_seqlens_k is None
