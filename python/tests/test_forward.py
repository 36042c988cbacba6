"""Paged decode and mixed prefill+decode on cpu_amx in fp32 with NumPy
arrays, every layer checked against a NumPy float64 reference (and that
reference against the library's C oracle)."""

import ctypes

import pytest

np = pytest.importorskip("numpy", reason="the attnhost forward tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402
from attnhost import _ffi  # noqa: E402
from attnhost.model import KV_LAYOUTS  # noqa: E402
from conftest import fp32_spec  # noqa: E402
import reference as ref  # noqa: E402

SPECS = [fp32_spec(), fp32_spec(head_size=64, num_q_heads=8, num_kv_heads=1, kv_layout="hnd"),
         fp32_spec(sliding_window=20)]
LIMITS = dict(max_num_reqs=8, max_num_tokens=128, max_blocks_per_req=8, max_seq_len=128,
              num_blocks=80)


@pytest.fixture()
def setup(host, cpu_amx):
    model = attnhost.Model.from_specs("fwd", SPECS)
    sel = host.select(model, force="cpu_amx")
    b = attnhost.Binding(host, sel, **LIMITS)
    cache = attnhost.PagedKVCache(b)
    rng = np.random.default_rng(7)
    for l in range(b.num_layers):
        cache.key(l)[...] = rng.uniform(-1, 1, cache.key(l).shape)
        cache.value(l)[...] = rng.uniform(-1, 1, cache.value(l).shape)
    return b, cache, rng


def scrambled_blocks(rng, n_reqs, per_req, num_blocks):
    perm = rng.permutation(num_blocks).astype(np.int32)
    return perm[: n_reqs * per_req].reshape(n_reqs, per_req)


def run_and_check(b, cache, rng, batch):
    T = batch.num_tokens
    host_arrays = dict(query_start_loc=batch.query_start_loc.copy(),
                       seq_lens=batch.seq_lens.copy(), block_table=batch.block_table.copy())
    slots = batch.slot_mapping.copy()
    for l in range(b.num_layers):
        spec = b.selection.decision(l).spec
        q = rng.uniform(-1, 1, (T, spec.num_q_heads, spec.qk_head_size)).astype(np.float32)
        k = rng.uniform(-1, 1, (T, spec.num_kv_heads, spec.qk_head_size)).astype(np.float32)
        v = rng.uniform(-1, 1, (T, spec.num_kv_heads, spec.v_head_size)).astype(np.float32)
        out = np.full((T, spec.num_q_heads, spec.v_head_size), np.nan, np.float32)
        kc_ref, vc_ref = cache.key(l).copy(), cache.value(l).copy()
        ref.write_kv(kc_ref, vc_ref, spec.kv_layout, slots, k, v, spec.block_size)
        b.forward(l, q, k, v, *cache.tensors(l), out)
        # forward stored the new K/V exactly where the reference did
        assert np.array_equal(cache.key(l), kc_ref), f"layer {l}: key cache"
        assert np.array_equal(cache.value(l), vc_ref), f"layer {l}: value cache"
        want = ref.attention(spec, host_arrays, q, kc_ref, vc_ref)
        err = ref.rel_err(out.astype(np.float64), want)
        assert err < 1e-4, f"layer {l}: relative error {err:.2e}"


def test_paged_decode(setup):
    b, cache, rng = setup
    bb = attnhost.BatchBuilder(b)
    n = 6
    table = scrambled_blocks(rng, n, LIMITS["max_blocks_per_req"], LIMITS["num_blocks"])
    ctx = np.array([0, 5, 16, 31, 47, 100])
    for step in range(3):  # the builder's buffers are reused between steps
        batch = bb.build(np.ones(n, int), ctx, table)
        b.plan(batch)
        assert b.phase == "decode"
        assert batch.num_tokens == n and list(batch.seq_lens) == list(ctx + 1)
        run_and_check(b, cache, rng, batch)
        ctx = ctx + 1


def test_mixed_prefill_decode(setup):
    b, cache, rng = setup
    bb = attnhost.BatchBuilder(b)
    ql = [1, 1, 1, 9, 33, 17]
    ctx = [12, 40, 3, 0, 20, 64]
    perm = rng.permutation(LIMITS["num_blocks"]).tolist()
    # per-request block lists of just the length each request needs
    need = [-(-(q + c) // 16) for q, c in zip(ql, ctx)]
    lists, i = [], 0
    for k in need:
        lists.append(perm[i: i + k])
        i += k
    batch = bb.build(ql, ctx, lists)
    b.plan(batch)
    assert b.phase == "prefill"
    assert batch.num_tokens == sum(ql) and batch.max_query_len == 33
    split = b.split
    assert split.decode_reqs in (0, 3) and isinstance(split.why, str)
    run_and_check(b, cache, rng, batch)


def test_reference_matches_c_oracle(setup):
    """The test's NumPy reference agrees with ah_reference_attention."""
    b, cache, rng = setup
    bb = attnhost.BatchBuilder(b)
    table = scrambled_blocks(rng, 3, 8, LIMITS["num_blocks"])
    batch = bb.build([1, 4, 2], [30, 7, 50], table)
    b.plan(batch)
    lib = _ffi.load()
    for l in range(b.num_layers):
        d = b.selection.decision(l)
        spec = d.spec
        T = batch.num_tokens
        q = rng.uniform(-1, 1, (T, spec.num_q_heads, spec.qk_head_size)).astype(np.float32)
        kc, vc = cache.key(l), cache.value(l)
        got = np.empty((T, spec.num_q_heads, spec.v_head_size))
        cspec = _ffi.ah_layer_spec()
        ctypes.memmove(ctypes.byref(cspec), ctypes.byref(
            lib.ah_selection_decision(b.selection._handle(), l, 0).contents.spec),
            ctypes.sizeof(cspec))
        inp = _ffi.ah_ref_inputs(ctypes.sizeof(_ffi.ah_ref_inputs), ctypes.pointer(cspec),
                                 ctypes.pointer(batch.c), q.ctypes.data, kc.ctypes.data,
                                 vc.ctypes.data, None, None, 1.0, 1.0)
        err = _ffi.ah_error()
        assert lib.ah_reference_attention(ctypes.byref(inp), got.ctypes.data, None,
                                          ctypes.byref(err)) == 0, err.msg
        mine = ref.attention(spec, dict(query_start_loc=batch.query_start_loc,
                                        seq_lens=batch.seq_lens,
                                        block_table=batch.block_table), q, kc, vc)
        assert ref.rel_err(mine, got) < 1e-12, f"layer {l}"


@pytest.mark.parametrize("layout", ["nhd", "nhd_interleaved", "hnd_interleaved"])
def test_fp8_per_head_scale_tensors(host, cpu_amx, layout):
    """FP8 scales per KV head in NumPy float32 tensors (ABI 2.3): forward
    stores each head's new K/V divided by its own scale, exactly as the C
    oracle does, attends over them within fp32 rounding of the oracle, and
    reads the scales when it runs, so scales rewritten in place apply to
    the next call. The same over an interleaved cache (K and V views of one
    allocation), whose views the oracle reads as dense copies."""
    spec = fp32_spec(num_q_heads=8, num_kv_heads=2, kv_dtype="fp8_e4m3", kv_scales="per_head",
                     kv_layout=layout)
    b = attnhost.Binding(host, host.select(attnhost.Model.from_specs("s", [spec]),
                                           force="cpu_amx"), **LIMITS)
    cache = attnhost.PagedKVCache(b)
    rng = np.random.default_rng(11)
    for c in (cache.key(0), cache.value(0)):  # finite e4m3 codes of either sign
        c[...] = rng.integers(0, 0x70, c.shape) | (rng.integers(0, 2, c.shape) << 7)
    table = scrambled_blocks(rng, 3, 8, LIMITS["num_blocks"])
    batch = attnhost.BatchBuilder(b).build([1, 3, 1], [17, 5, 40], table)
    b.plan(batch)
    d = b.selection.decision(0).spec
    T = batch.num_tokens
    q = rng.uniform(-1, 1, (T, d.num_q_heads, d.qk_head_size)).astype(np.float32)
    k = rng.uniform(-1, 1, (T, d.num_kv_heads, d.qk_head_size)).astype(np.float32)
    v = rng.uniform(-1, 1, (T, d.num_kv_heads, d.v_head_size)).astype(np.float32)
    ks = np.array([0.004, 0.011], np.float32)
    vs = np.array([0.02, 0.007], np.float32)
    lib = _ffi.load()
    cspec = _ffi.ah_layer_spec()
    ctypes.memmove(ctypes.byref(cspec), ctypes.byref(
        lib.ah_selection_decision(b.selection._handle(), 0, 0).contents.spec),
        ctypes.sizeof(cspec))
    # the oracle's copies of an interleaved cache's views are dense
    cspec.kv_layout = KV_LAYOUTS.index(layout.replace("_interleaved", ""))
    fptr = ctypes.POINTER(ctypes.c_float)
    kc_ref, vc_ref = cache.key(0).copy(), cache.value(0).copy()
    err = _ffi.ah_error()
    assert lib.ah_reference_write_kv_per_head(
        ctypes.byref(cspec), ctypes.addressof(batch.c), k.ctypes.data, v.ctypes.data,
        kc_ref.ctypes.data, vc_ref.ctypes.data, ks.ctypes.data_as(fptr),
        vs.ctypes.data_as(fptr), ctypes.byref(err)) == 0, err.msg

    def oracle():
        got = np.empty((T, d.num_q_heads, d.v_head_size))
        inp = _ffi.ah_ref_inputs(ctypes.sizeof(_ffi.ah_ref_inputs), ctypes.pointer(cspec),
                                 ctypes.pointer(batch.c), q.ctypes.data, kc_ref.ctypes.data,
                                 vc_ref.ctypes.data)
        inp.k_scales = ks.ctypes.data_as(fptr)
        inp.v_scales = vs.ctypes.data_as(fptr)
        assert lib.ah_reference_attention(ctypes.byref(inp), got.ctypes.data, None,
                                          ctypes.byref(err)) == 0, err.msg
        return got

    out = np.full((T, d.num_q_heads, d.v_head_size), np.nan, np.float32)
    b.forward(0, q, k, v, *cache.tensors(0), out, k_scale_tensor=ks, v_scale_tensor=vs)
    assert np.array_equal(cache.key(0), kc_ref) and np.array_equal(cache.value(0), vc_ref)
    assert ref.rel_err(out.astype(np.float64), oracle()) < 1e-5
    ks[:] = [0.009, 0.002]  # rewritten in place: the next forward reads the new values
    vs[:] = [0.003, 0.05]
    b.forward(0, q, None, None, *cache.tensors(0), out, k_scale_tensor=ks, v_scale_tensor=vs)
    assert ref.rel_err(out.astype(np.float64), oracle()) < 1e-5
    # a scale of 0 in host memory is refused before anything runs
    vs[1] = 0
    with pytest.raises(attnhost.AttnhostError) as e:
        b.forward(0, q, None, None, *cache.tensors(0), out, k_scale_tensor=ks, v_scale_tensor=vs)
    assert "v_scale_tensor[1] = 0" in e.value.message
