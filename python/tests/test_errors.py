"""Bad input raises AttnhostError naming the field and the value, and
writes nothing."""

import pytest

np = pytest.importorskip("numpy", reason="the attnhost error tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402
from conftest import fp32_spec  # noqa: E402

LIMITS = dict(max_num_reqs=4, max_num_tokens=64, max_blocks_per_req=4, max_seq_len=64,
              num_blocks=16)


@pytest.fixture()
def step(host, cpu_amx):
    m = attnhost.Model.from_specs("err", [fp32_spec()])
    b = attnhost.Binding(host, host.select(m), **LIMITS)
    cache = attnhost.PagedKVCache(b)
    cache.key(0)[...] = 0.5
    cache.value(0)[...] = -0.25
    bb = attnhost.BatchBuilder(b)
    batch = bb.build([1, 1], [3, 9], np.array([[5, 2, 0, 0], [11, 7, 0, 0]], np.int32))
    b.plan(batch)
    T = batch.num_tokens
    t = dict(q=np.ones((T, 4, 32), np.float32), key=np.ones((T, 2, 32), np.float32),
             value=np.ones((T, 2, 32), np.float32), out=np.full((T, 4, 32), 7.0, np.float32))
    return b, cache, bb, t


def forward(b, cache, t, **over):
    a = dict(t, **over)
    b.forward(0, a["q"], a["key"], a["value"], *cache.tensors(0), a["out"])


def assert_untouched(cache, t):
    assert (t["out"] == 7.0).all(), "out was written"
    assert (cache.key(0) == 0.5).all() and (cache.value(0) == -0.25).all(), "cache was written"


def test_good_step_writes(step):
    b, cache, _, t = step
    forward(b, cache, t)
    assert not (t["out"] == 7.0).all()


def test_wrong_dtype(step):
    b, cache, _, t = step
    with pytest.raises(attnhost.InvalidArgumentError) as e:
        forward(b, cache, t, q=t["q"].astype(np.float64))
    assert e.value.status == attnhost.Status.INVALID_ARGUMENT
    assert "q: dtype float64" in e.value.message and "float32" in e.value.message
    assert_untouched(cache, t)


def test_wrong_shape(step):
    b, cache, _, t = step
    with pytest.raises(attnhost.AttnhostError) as e:
        forward(b, cache, t, key=np.ones((2, 3, 32), np.float32))
    assert "key: shape [2, 3, 32]" in e.value.message and "[2, 2, 32]" in e.value.message
    assert_untouched(cache, t)


def test_non_contiguous(step):
    b, cache, _, t = step
    wide = np.ones((2, 4, 64), np.float32)
    with pytest.raises(attnhost.InvalidArgumentError) as e:
        forward(b, cache, t, q=wide[:, :, ::2])
    assert "q: last dimension has stride 2" in e.value.message
    assert_untouched(cache, t)
    kc = np.zeros((16, 16, 2, 64), np.float32)[..., ::2]
    with pytest.raises(attnhost.InvalidArgumentError) as e:
        b.forward(0, t["q"], t["key"], t["value"], kc, cache.tensors(0)[1], t["out"])
    assert "key_cache: strides" in e.value.message and "densely packed" in e.value.message
    assert_untouched(cache, t)


def test_not_dlpack(step):
    b, cache, _, t = step
    with pytest.raises(TypeError, match="DLPack"):
        forward(b, cache, t, q=[[1.0]])
    assert_untouched(cache, t)


def test_block_id_past_the_cache(step):
    b, cache, bb, t = step
    batch = bb.build([1, 1], [3, 9], np.array([[5, 2, 0, 0], [99, 7, 0, 0]], np.int32))
    with pytest.raises(attnhost.InvalidArgumentError) as e:
        b.plan(batch)
    assert "block_table[1][0] = 99" in e.value.message
    assert_untouched(cache, t)


def test_builder_errors_name_field_and_value(step):
    _, _, bb, _ = step
    with pytest.raises(attnhost.InvalidArgumentError, match=r"query_lens\[1\] = 0"):
        bb.build([1, 0], [3, 4], [[1], [2]])
    with pytest.raises(attnhost.InvalidArgumentError, match=r"block_ids\[1\]: 1 blocks"):
        bb.build([1, 1], [3, 20], [[1], [2]])
    with pytest.raises(attnhost.InvalidArgumentError, match="num_reqs = 5 exceeds"):
        bb.build([1] * 5, [1] * 5, [[i] for i in range(5)])
    with pytest.raises(attnhost.InvalidArgumentError, match=r"seq_lens\[0\] = 70 exceeds"):
        bb.build([6], [64], [[0, 1, 2, 3, 4]])


def test_binding_errors(host, cpu_amx):
    m = attnhost.Model.from_specs("err", [fp32_spec()])
    sel = host.select(m)
    b = attnhost.Binding(host, sel, **LIMITS)
    with pytest.raises(attnhost.InvalidArgumentError) as e:
        b.kv_cache_desc(3)
    assert "3" in e.value.message
    with pytest.raises(ValueError, match="mode"):
        b.plan(None, mode="later")
    other = attnhost.Host(cache_path="")
    with pytest.raises(ValueError, match="another host"):
        attnhost.Binding(other, sel, **LIMITS)
    with pytest.raises(ValueError, match="mixed_steps 'sometimes'"):
        attnhost.Binding(host, sel, mixed_steps="sometimes", **LIMITS)
    for how in ("split", "whole", "measured"):
        attnhost.Binding(host, sel, mixed_steps=how, **LIMITS)
