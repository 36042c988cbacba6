"""ABI 2.3, KV-cache layout, from Python: an interleaved (nhd_interleaved)
cache allocated once by PagedKVCache, the value a view into the key's
allocation, and block sizes a binding reports for block_size = auto and for
a cache block cpu_amx runs as kernel blocks."""

import pytest

np = pytest.importorskip("numpy", reason="the attnhost cache tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402

LIMITS = dict(max_num_reqs=4, max_num_tokens=64, max_blocks_per_req=4, max_seq_len=64,
              num_blocks=10)
MODEL = ("[model]\nname = {name}\nnum_layers = 1\nnum_q_heads = 4\nnum_kv_heads = 2\n"
         "head_size = 64\ndtype = fp32\nblock_size = {bs}\nkv_layout = {layout}\n")


def test_interleaved_cache_is_one_allocation(host, cpu_amx):
    m = attnhost.Model.from_text(MODEL.format(name="i", bs=16, layout="nhd_interleaved"))
    b = attnhost.Binding(host, host.select(m), **LIMITS)
    kd, vd = b.kv_cache_desc(0)
    assert kd.alloc_shape == (10, 2, 16, 2, 64) and kd.offset == 0 and not kd.in_key_alloc
    assert vd.in_key_alloc and vd.offset == 16 * 2 * 64
    assert kd.strides == vd.strides == (2 * 16 * 2 * 64, 128, 64, 1)
    cache = attnhost.PagedKVCache(b)
    k, v = cache.key(0), cache.value(0)
    # V = cache[:, 1] of the key's allocation: block 0's values follow its keys
    assert v.ctypes.data == k.ctypes.data + vd.offset * 4
    v[3, 5, 1, 7] = 2.5
    flat = np.lib.stride_tricks.as_strided(k, shape=(10 * 2 * 16 * 2 * 64,), strides=(4,))
    assert flat[3 * 4096 + 2048 + 5 * 128 + 64 + 7] == 2.5
    kt, vt = cache.tensors(0)
    assert vt.t.data == kt.t.data + vd.offset * 4


def test_block_sizes(host, cpu_amx):
    m = attnhost.Model.from_text(MODEL.format(name="a", bs="auto", layout="nhd"))
    b = attnhost.Binding(host, host.select(m), **LIMITS)
    assert b.block_size(0) == (16, 16)  # cpu_amx's preferred size
    m = attnhost.Model.from_text(MODEL.format(name="k", bs=8192, layout="nhd"))
    b = attnhost.Binding(host, host.select(m), **LIMITS)
    assert b.block_size(0, "decode") == (8192, 4096)  # kernel blocks of 4096
    assert b.selection.decision(0).spec.block_size == 8192
    assert b.selection.decision(0).kernel_block_size == 4096
    with pytest.raises(IndexError):
        b.block_size(1)
