"""KV-cache groups (ABI 2.1) from Python: models imported with
kv_groups="hybrid" (a gpt-oss-like and a Gemma-3-like one, cut to a few
layers, their two groups on different block sizes and cache sizes) paged
per group by PagedKVCache and BatchBuilder, on cpu_amx in fp32, every layer
checked against the NumPy float64 reference; released blocks accepted
where the window hides them and refused where it does not."""

import os
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="the attnhost forward tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402
import reference as ref  # noqa: E402

CONFIGS = Path(os.environ.get("ATTNHOST_SOURCE_DIR",
                              Path(__file__).resolve().parents[2])) / "tests/data/hf_configs"
LIMITS = dict(max_num_reqs=6, max_num_tokens=96, max_blocks_per_req=24, max_seq_len=320,
              num_blocks=128)


def imported(config, layers, block_sizes, window=None):
    """The config imported with a group per class of layers, cut to its
    first `layers` layers, in fp32, group g on blocks of block_sizes[g]
    (and the windowed layers' window set to `window`)."""
    if not attnhost._ffi.load().ah_model_import_available():
        pytest.skip("libattnhost was built without json-c")
    m = attnhost.Model.from_hf_config(CONFIGS / config, kv_groups="hybrid", dtype="fp32")
    specs = list(m.layers())[:layers]
    for s in specs:
        s.block_size = block_sizes[s.kv_group]
        if window and s.sliding_window:
            s.sliding_window = window
    return attnhost.Model.from_specs(config.split(".")[0] + "-cut", specs)


@pytest.fixture(params=["gpt-oss", "gemma-3"])
def setup(request, host, cpu_amx):
    if request.param == "gpt-oss":   # window 128 on even layers (group 0), sinks
        model = imported("gpt-oss-120b.json", 4, (16, 32))
        counts = (96, 48)
    else:                            # window on 5 of 6 layers (group 0), one global
        model = imported("gemma-3-12b.json", 6, (32, 16), window=40)
        counts = (48, 96)
    assert model.num_kv_groups == 2
    b = attnhost.Binding(host, host.select(model, force="cpu_amx"), **LIMITS)
    cache = attnhost.PagedKVCache(b, num_blocks=counts)
    rng = np.random.default_rng(11)
    for l in range(b.num_layers):
        for arr in (cache.key(l), cache.value(l)):
            arr[...] = rng.uniform(-1, 1, arr.shape)
    sinks = {l: rng.uniform(-1, 1, b.selection.decision(l).spec.num_q_heads).astype(np.float32)
             for l in range(b.num_layers) if b.selection.decision(l).spec.sinks}
    return b, cache, counts, sinks, rng


def tables(rng, counts, block_sizes, n, max_len):
    """One scrambled block table per group, wide enough for max_len tokens."""
    out = []
    for nb, bs in zip(counts, block_sizes):
        w = -(-max_len // bs)
        out.append(rng.permutation(nb)[: n * w].astype(np.int32).reshape(n, w))
    return out


def run_and_check(b, cache, sinks, rng, batch):
    """Forward every layer; each stores K/V at its group's slots and
    matches the reference over its group's block table."""
    T = batch.num_tokens
    groups = [(g.block_table.copy(), g.slot_mapping.copy()) for g in batch.kv_groups]
    qsl, seq = batch.query_start_loc.copy(), batch.seq_lens.copy()
    for l in range(b.num_layers):
        spec = b.selection.decision(l).spec
        table, slots = groups[spec.kv_group]
        q = rng.uniform(-1, 1, (T, spec.num_q_heads, spec.qk_head_size)).astype(np.float32)
        k = rng.uniform(-1, 1, (T, spec.num_kv_heads, spec.qk_head_size)).astype(np.float32)
        v = rng.uniform(-1, 1, (T, spec.num_kv_heads, spec.v_head_size)).astype(np.float32)
        out = np.full((T, spec.num_q_heads, spec.v_head_size), np.nan, np.float32)
        kc_ref, vc_ref = cache.key(l).copy(), cache.value(l).copy()
        ref.write_kv(kc_ref, vc_ref, spec.kv_layout, slots, k, v, spec.block_size)
        b.forward(l, q, k, v, *cache.tensors(l), out, sinks=sinks.get(l))
        assert np.array_equal(cache.key(l), kc_ref), f"layer {l}: key cache"
        assert np.array_equal(cache.value(l), vc_ref), f"layer {l}: value cache"
        want = ref.attention(spec, dict(query_start_loc=qsl, seq_lens=seq, block_table=table),
                             q, kc_ref, vc_ref, sinks=sinks.get(l))
        err = ref.rel_err(out.astype(np.float64), want)
        assert err < 1e-4, f"layer {l} (kv group {spec.kv_group}): relative error {err:.2e}"


def test_groups_and_caches(setup):
    b, cache, counts, _, _ = setup
    groups = b.kv_groups
    assert [g.index for g in groups] == [0, 1]
    assert groups[0].release_window > 0 and groups[1].release_window == 0
    for g in groups:
        for l in g.layers:
            assert cache.kv_group(l) == g.index
            assert cache.key(l).shape[0] == counts[g.index]
            assert g.block_size in cache.key(l).shape[1:3]
    assert cache.group_num_blocks == counts and cache.num_blocks == counts[0]


def test_decode_and_mixed(setup):
    b, cache, counts, sinks, rng = setup
    bs = tuple(g.block_size for g in b.kv_groups)
    bb = attnhost.BatchBuilder(b, num_blocks=counts)
    assert bb.block_sizes == bs and bb.group_num_blocks == counts
    n = 4
    per_group = tables(rng, counts, bs, n, 300)
    ctx = np.array([0, 17, 150, 210])
    for step in range(2):
        batch = bb.build(np.ones(n, int), ctx, per_group)
        b.plan(batch)
        assert b.phase == "decode" and batch.num_kv_groups == 2
        assert batch.c.num_kv_groups == 2
        g1 = batch.kv_groups[1]
        assert g1.block_size == bs[1] and g1.num_blocks == counts[1]
        pos = ctx  # the new token's position
        assert list(g1.slot_mapping) == list(per_group[1][np.arange(n), pos // bs[1]] * bs[1]
                                             + pos % bs[1])
        run_and_check(b, cache, sinks, rng, batch)
        ctx = ctx + 1
    # mixed: decodes first, then prefill chunks; per-request lists of just
    # the blocks each group needs
    ql, ctx = [1, 1, 30, 17], [40, 200, 0, 60]
    lists = [[list(row[: -(-(q + c) // s)]) for row, q, c in zip(t, ql, ctx)]
             for t, s in zip(per_group, bs)]
    batch = bb.build(ql, ctx, lists)
    b.plan(batch)
    assert b.phase == "prefill" and batch.max_query_len == 30
    run_and_check(b, cache, sinks, rng, batch)


def test_released_blocks(setup):
    b, cache, counts, sinks, rng = setup
    g0 = b.kv_groups[0]
    bs = tuple(g.block_size for g in b.kv_groups)
    w = g0.release_window
    bb = attnhost.BatchBuilder(b, num_blocks=counts)
    n = 4
    per_group = tables(rng, counts, bs, n, 300)
    ctx = np.array([3, w - 1, w + 2 * bs[0] + 5, 290])
    keep = [t.copy() for t in per_group]
    batch = bb.build([1, 1, 1, 4], ctx[:3].tolist() + [286], per_group, release_blocks=True)
    assert all(np.array_equal(a, k) for a, k in zip(per_group, keep)), "input changed"
    t0 = batch.kv_groups[0].block_table
    first = batch.seq_lens - batch.query_lens                 # each request's first query
    hidden = np.maximum((first - w + 1) // bs[0], 0)
    assert [int((row < 0).sum()) for row in t0] == hidden.tolist()
    assert hidden[0] == hidden[1] == 0 and hidden[3] > 0
    assert batch.kv_groups[0].released == int(hidden.sum())
    assert (batch.kv_groups[1].block_table >= 0).all()        # no window: nothing released
    b.plan(batch)
    run_and_check(b, cache, sinks, rng, batch)

    # the engine's own released entries: where the window hides the block
    # they pass; where the window still sees it the C check refuses
    own = [t.copy() for t in per_group]
    own[0][3, 0] = -1
    b.plan(bb.build([1] * n, ctx, own))
    last_seen = int((ctx[3] - w + 1) // bs[0])                # the first block the window sees
    own[0][3, last_seen] = -1
    with pytest.raises(attnhost.InvalidArgumentError,
                       match=rf"kv group 0: .*block_table\[3\]\[{last_seen}\] = -1: a released "
                             rf"block, but request 3's first query token .* still sees keys"):
        b.plan(bb.build([1] * n, ctx, own))
    own = [t.copy() for t in per_group]
    own[1][3, 0] = -1
    with pytest.raises(attnhost.InvalidArgumentError,
                       match=r"kv group 1: .*block_table\[3\]\[0\] = -1 is outside the cache .*"
                             r"a negative entry marks a released block, but .*no sliding window"):
        b.plan(bb.build([1] * n, ctx, own))
    # a released block where a new token goes: the builder's own check
    own = [t.copy() for t in per_group]
    own[0][2, int(ctx[2]) // bs[0]] = -1
    with pytest.raises(attnhost.InvalidArgumentError,
                       match=rf"kv group 0: block_ids\[0\]\[2\]\[{int(ctx[2]) // bs[0]}\] = -1: "
                             rf"a released block, but request 2's new token at position "
                             rf"{int(ctx[2])} is stored in it"):
        bb.build([1] * n, ctx, own)


def test_errors_name_group_request_and_field(setup):
    b, _, counts, _, rng = setup
    bs = tuple(g.block_size for g in b.kv_groups)
    bb = attnhost.BatchBuilder(b, num_blocks=counts)
    per_group = tables(rng, counts, bs, 2, 100)
    with pytest.raises(attnhost.InvalidArgumentError,
                       match="block_ids has 1 entries, but the model has 2 KV-cache groups"):
        bb.build([1, 1], [10, 20], per_group[:1])
    short = [per_group[0], per_group[1][:, :1]]
    need = -(-41 // bs[1])
    with pytest.raises(attnhost.InvalidArgumentError,
                       match=rf"kv group 1: block_ids\[1\]\[1\]: 1 blocks for seq_lens\[1\] = 41, "
                             rf"which needs {need} blocks of {bs[1]}"):
        bb.build([1, 1], [10, 40], short)
    lists = [[list(r) for r in t] for t in per_group]
    lists[1][0] = []
    with pytest.raises(attnhost.InvalidArgumentError,
                       match=r"kv group 1: block_ids\[1\]\[0\]: 0 blocks for seq_lens\[0\] = 11"):
        bb.build([1, 1], [10, 20], lists)
    with pytest.raises(attnhost.InvalidArgumentError, match="num_blocks has 3 entries"):
        attnhost.BatchBuilder(b, num_blocks=(8, 8, 8))
    with pytest.raises(ValueError, match=r"num_blocks\[1\] = 0 \(kv group 1\)"):
        attnhost.PagedKVCache(b, num_blocks=(8, 0))
    # block ids past a group's cache: the plan's check, naming the group
    big = [t.copy() for t in per_group]
    big[1][0, 0] = counts[1]
    with pytest.raises(attnhost.InvalidArgumentError, match="kv group 1: "):
        b.plan(bb.build([1, 1], [10, 20], big))


def test_torch_cache(setup):
    torch = pytest.importorskip("torch")
    b, _, counts, _, _ = setup
    cache = attnhost.PagedKVCache(b, num_blocks=counts, allocator="torch")
    for g in b.kv_groups:
        for l in g.layers:
            assert isinstance(cache.key(l), torch.Tensor)
            assert cache.key(l).shape[0] == counts[g.index]
