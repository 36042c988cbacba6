"""Context parallelism through the package: every rank of a group is an
engine of its own (a binding, its shard of the paged KV cache, its block
table), driven from its own thread, and every rank's output must match one
binding over the whole cache.

On the CPU the ranks share a LocalCpGroup (cpu_amx, fp32); with two CUDA
devices and torch, test_cp_nccl_two_gpus runs two ranks over NCCL on a GPU
plugin in bf16 (docs/python.md gives the command). The engine side here
places keys with the library's own layout helpers (cp_rank_of,
cp_local_index), so the BatchBuilder's slot mapping is checked against
them, and each rank's cache after a step against the writes it should
have made."""

import dataclasses
import gc
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

np = pytest.importorskip("numpy", reason="the context-parallel tests need NumPy "
                         "(apt-get install python3-numpy)")

import attnhost  # noqa: E402
from attnhost import _ffi  # noqa: E402
from attnhost.cp import _local_lens, _locate  # noqa: E402
from conftest import fp32_spec  # noqa: E402
import reference as ref  # noqa: E402

BS = 16
LIMITS = dict(max_num_reqs=16, max_num_tokens=160, max_blocks_per_req=24, max_seq_len=384,
              num_blocks=16 * 24)
# GQA (8 query heads on 2 KV heads) in every layer; a window that is a
# multiple of interleave * world_size for every group below; sinks.
SPECS = [fp32_spec(num_q_heads=8, num_kv_heads=2, head_size=32, block_size=BS),
         fp32_spec(num_q_heads=8, num_kv_heads=2, head_size=32, block_size=BS,
                   sliding_window=64),
         fp32_spec(num_q_heads=8, num_kv_heads=2, head_size=32, block_size=BS, sinks=True)]
GROUPS = [(2, 1), (2, 16), (4, 1), (4, 16)]  # (world_size, interleave)
TIMEOUT_MS = 30000  # a rank that hangs fails the test instead of stalling it


# ---- the layout ------------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("interleave", [0, 1, 3, 16])
def test_layout_helpers(world, interleave):
    """cp_rank_of, cp_local_index and cp_local_len follow attnhost.h's
    formula and agree with the builder's vectorised copies."""
    il = max(1, interleave)
    pos = np.arange(300, dtype=np.int64)
    owner, local = _locate(pos, world, interleave)
    seen = [0] * world
    for p in range(300):
        r = attnhost.cp_rank_of(p, world, interleave)
        assert r == (p // il) % world == owner[p], p
        i = attnhost.cp_local_index(p, world, interleave)
        assert i == (p // (il * world)) * il + p % il == local[p], p
        assert i == seen[r], p  # a rank's positions fill its shard in order
        seen[r] += 1
    for n in (0, 1, 2, il - 1, il, il * world - 1, il * world, il * world + 1, 299):
        lens = [attnhost.cp_local_len(n, world, r, interleave) for r in range(world)]
        assert sum(lens) == n
        assert lens == [int(_local_lens(np.array([n]), world, r, interleave)[0])
                        for r in range(world)]
        assert lens == [int(np.sum(owner[:n] == r)) for r in range(world)]


def test_layout_helpers_refuse_negative():
    with pytest.raises(ValueError, match="pos = -1"):
        attnhost.cp_rank_of(-1, 2)
    with pytest.raises(ValueError, match="rank = -1"):
        attnhost.cp_local_len(5, 2, -1)


# ---- the engine side ---------------------------------------------------------


class Engine:
    """One rank's engine: a binding, its paged cache and block table, and
    a shadow of what the cache must hold. world_size 1 is the reference:
    no context parallelism, the whole cache."""

    def __init__(self, host, sel, world, rank, interleave, group=None, seed=0):
        self.world, self.rank, self.interleave = world, rank, interleave
        cp = None if group is None else group.rank(rank, interleave, TIMEOUT_MS)
        self.binding = attnhost.Binding(host, sel, **LIMITS, cp=cp)
        self.cache = attnhost.PagedKVCache(self.binding)
        self.builder = attnhost.BatchBuilder(self.binding)
        self.specs = [sel.decision(l).spec for l in range(sel.num_layers)]
        rng = np.random.default_rng(1000 + 17 * seed + rank)
        R, MB = LIMITS["max_num_reqs"], LIMITS["max_blocks_per_req"]
        self.table = rng.permutation(LIMITS["num_blocks"]).astype(np.int32)[: R * MB]
        self.table = self.table.reshape(R, MB)
        self.shadow = [(self.cache.key(l).copy(), self.cache.value(l).copy())
                       for l in range(len(self.specs))]

    def slots(self, r, positions):
        """This rank's slot of each position of request r, -1 where another
        rank holds it (from the library's layout helpers)."""
        out = []
        for p in positions:
            if attnhost.cp_rank_of(p, self.world, self.interleave) != self.rank:
                out.append(-1)
                continue
            i = attnhost.cp_local_index(p, self.world, self.interleave)
            out.append(int(self.table[r, i // BS]) * BS + i % BS)
        return np.array(out, dtype=np.int64)

    def store(self, l, slots, k, v):
        """Write k/v at slots into the shadow of layer l's cache."""
        kc, vc = self.shadow[l]
        ref.write_kv(kc, vc, self.specs[l].kv_layout, slots, k, v, BS)

    def fill(self, l, r, k, v):
        """Cached keys of request r (positions 0 .. len(k) - 1), as the
        engine's earlier steps would have stored them (into the shadow:
        sync() copies it into the cache)."""
        self.store(l, self.slots(r, range(len(k))), k, v)

    def sync(self):
        for l, (kc, vc) in enumerate(self.shadow):
            self.cache.key(l)[...] = kc
            self.cache.value(l)[...] = vc

    def step(self, query_lens, ctx, inputs, cp_local_seq_lens=None):
        """Build, plan and run every layer; returns each layer's out."""
        n = len(query_lens)
        batch = self.builder.build(query_lens, ctx, self.table[:n],
                                   cp_local_seq_lens=cp_local_seq_lens)
        want = np.concatenate([self.slots(r, range(c, c + q))
                               for r, (q, c) in enumerate(zip(query_lens, ctx))])
        assert np.array_equal(batch.slot_mapping, want), "the builder's slot mapping"
        self.binding.plan(batch)
        outs = []
        for l, spec in enumerate(self.specs):
            q, k, v, sinks = inputs[l]
            out = np.full((len(q), spec.num_q_heads, spec.v_head_size), np.nan, np.float32)
            self.binding.forward(l, q, k, v, *self.cache.tensors(l), out,
                                 sinks=sinks if spec.sinks else None)
            self.store(l, want, k, v)
            outs.append(out)
        return outs, batch

    def check_cache(self):
        for l in range(len(self.specs)):
            assert np.array_equal(self.cache.key(l), self.shadow[l][0]), \
                f"rank {self.rank} of {self.world}: layer {l}'s key cache"
            assert np.array_equal(self.cache.value(l), self.shadow[l][1]), \
                f"rank {self.rank} of {self.world}: layer {l}'s value cache"


def make_inputs(specs, T, rng):
    return [(rng.standard_normal((T, s.num_q_heads, s.qk_head_size), dtype=np.float32),
             rng.standard_normal((T, s.num_kv_heads, s.qk_head_size), dtype=np.float32),
             rng.standard_normal((T, s.num_kv_heads, s.v_head_size), dtype=np.float32),
             rng.standard_normal(s.num_q_heads, dtype=np.float32))
            for s in specs]


def run_ranks(fn, engines):
    """fn(engine) on every engine at once, one thread each; the results
    (or the exceptions raised) in engine order."""
    def call(e):
        try:
            return fn(e)
        except Exception as x:  # reported per rank by the caller
            return x

    with ThreadPoolExecutor(len(engines)) as pool:
        return list(pool.map(call, engines))


@pytest.fixture(scope="module")
def cp_selection(host):
    p = host.plugin("cpu_amx")
    if p is None or not p.available:
        pytest.skip("the cpu_amx plugin is not built or not usable here")
    return host.select(attnhost.Model.from_specs("cp", SPECS), force="cpu_amx")


@pytest.fixture(params=GROUPS, ids=[f"world{w}-interleave{i}" for w, i in GROUPS])
def group(request, host, cp_selection):
    """A LocalCpGroup's ranks and a reference engine, with cached keys
    already placed, over the same scrambled requests."""
    world, il = request.param
    g = attnhost.LocalCpGroup(world)
    ranks = [Engine(host, cp_selection, world, r, il, g, seed=world + il)
             for r in range(world)]
    whole = Engine(host, cp_selection, 1, 0, 1, seed=99)
    yield ranks, whole
    for e in ranks + [whole]:
        e.builder.close()
        e.binding.close()
    g.close()


def place_context(engines, ctx, rng):
    """Random cached keys of every request, stored by every engine in its
    shard (the reference: all of them)."""
    specs = engines[0].specs
    for r, c in enumerate(ctx):
        for l, s in enumerate(specs):
            k = rng.standard_normal((c, s.num_kv_heads, s.qk_head_size), dtype=np.float32)
            v = rng.standard_normal((c, s.num_kv_heads, s.v_head_size), dtype=np.float32)
            for e in engines:
                e.fill(l, r, k, v)
    for e in engines:
        e.sync()


def close_enough(got, want):
    """fp32 agreement: the ranks merge partial softmaxes, so the sums run
    in another order; one key more or less moves an output by ~1e-3."""
    return np.abs(got - want) <= 1e-5 + 1e-4 * np.abs(want)


def check_step(ranks, whole, query_lens, ctx, rng, cp_lens=None):
    T = int(np.sum(query_lens))
    inputs = make_inputs(whole.specs, T, rng)
    want, batch = whole.step(query_lens, ctx, inputs)
    # the reference binding itself against the NumPy reference (no sinks there)
    arrays = dict(query_start_loc=batch.query_start_loc.copy(), seq_lens=batch.seq_lens.copy(),
                  block_table=batch.block_table.copy())
    for l, s in enumerate(whole.specs):
        if not s.sinks:
            exact = ref.attention(s, arrays, inputs[l][0], *whole.shadow[l])
            assert ref.rel_err(want[l].astype(np.float64), exact) < 1e-4, f"layer {l}"
    got = run_ranks(lambda e: e.step(query_lens, ctx, inputs, cp_lens)[0], ranks)
    for e, outs in zip(ranks, got):
        if isinstance(outs, Exception):
            raise outs
        for l in range(len(whole.specs)):
            ok = close_enough(outs[l], want[l])
            if not ok.all():
                t = int(np.argwhere(~ok)[0][0])
                r = int(np.searchsorted(batch.query_start_loc, t, side="right") - 1)
                pytest.fail(f"rank {e.rank} of {e.world} (interleave {e.interleave}), "
                            f"layer {l}: token {t} (request {r}, seq_len "
                            f"{int(batch.seq_lens[r])}) differs by "
                            f"{float(np.max(np.abs(outs[l][t] - want[l][t]))):.3g}")
        e.check_cache()
    whole.check_cache()


DECODE_CTX = [0, 1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 33, 64, 100, 255, 300]


@pytest.mark.parametrize("cp_lens", [None, True], ids=["lens-by-host", "lens-given"])
def test_cp_decode(group, cp_lens):
    """Decode steps (query length 1), contexts from 0 to 300 keys: several
    are shorter than interleave * world_size, so some ranks hold none of
    their keys."""
    ranks, whole = group
    rng = np.random.default_rng(5)
    ctx = np.array(DECODE_CTX)
    place_context(ranks + [whole], ctx, rng)
    for _ in range(3):  # each step's keys are read back by the next
        check_step(ranks, whole, np.ones(len(ctx), int), ctx, rng, cp_lens)
        ctx = ctx + 1


def test_cp_mixed(group):
    """Decode requests first, then prefill chunks (a whole prompt, chunks
    after a context); then a decode step over what the prefill stored."""
    ranks, whole = group
    rng = np.random.default_rng(6)
    ql = np.array([1, 1, 1, 1, 5, 17, 40, 64])
    ctx = np.array([0, 3, 40, 200, 0, 9, 30, 250])
    place_context(ranks + [whole], ctx, rng)
    check_step(ranks, whole, ql, ctx, rng)
    check_step(ranks, whole, np.ones(len(ql), int), ctx + ql, rng)


def test_cp_wrong_local_lens(host, cp_selection):
    """A rank whose cp_local_seq_lens disagree with the layout: every
    rank's plan raises, the wrong rank's message names the request, and
    the group still runs the next, good step."""
    world, il, bad_rank, bad_req = 2, 16, 1, 3
    g = attnhost.LocalCpGroup(world)
    ranks = [Engine(host, cp_selection, world, r, il, g, seed=3) for r in range(world)]
    whole = Engine(host, cp_selection, 1, 0, 1, seed=4)
    rng = np.random.default_rng(7)
    ctx = np.array([5, 40, 17, 70, 33])
    place_context(ranks + [whole], ctx, rng)
    ql = np.ones(len(ctx), int)
    inputs = make_inputs(whole.specs, len(ctx), rng)

    def lens(e):
        good = [attnhost.cp_local_len(c + 1, world, e.rank, il) for c in ctx]
        if e.rank == bad_rank:
            good[bad_req] += 1
        return good

    errs = run_ranks(lambda e: e.step(ql, ctx, inputs, lens(e)), ranks)
    for e, x in zip(ranks, errs):
        assert isinstance(x, attnhost.AttnhostError), f"rank {e.rank}: {x!r}"
    msg = errs[bad_rank].message
    assert f"cp_local_seq_lens[{bad_req}]" in msg and f"request {bad_req}" in msg, msg
    for e, x in zip(ranks, errs):
        if e.rank != bad_rank:
            assert f"rank {bad_rank}" in x.message, x.message
    for e in ranks:
        e.check_cache()  # nothing written
    check_step(ranks, whole, ql, ctx, rng)  # the same requests, right this time


def test_cp_binding_errors(host, cp_selection):
    """The library's checks at binding creation surface with its message;
    the builder refuses local lengths on a binding without cp."""
    g = attnhost.LocalCpGroup(4)
    with pytest.raises(attnhost.AttnhostError, match="window"):
        # the window layer's 64 is no multiple of 32 * 4
        attnhost.Binding(host, cp_selection, **LIMITS, cp=g.rank(0, interleave=32))
    with pytest.raises(attnhost.AttnhostError, match="rank"):
        attnhost.Binding(host, cp_selection, **LIMITS, cp=g.rank(4))
    b = attnhost.Binding(host, cp_selection, **LIMITS)
    with pytest.raises(attnhost.InvalidArgumentError, match="no context parallelism"):
        attnhost.BatchBuilder(b).build([1], [3], [[0]], cp_local_seq_lens=[2])
    cb = attnhost.Binding(host, cp_selection, **LIMITS, cp=g.rank(1, interleave=4))
    with pytest.raises(attnhost.InvalidArgumentError, match=r"on cp rank 1"):
        # 70 keys: rank 1 holds 18 of them, which need 2 blocks
        attnhost.BatchBuilder(cb).build([1], [69], [[0]])
    with pytest.raises(attnhost.InvalidArgumentError, match=r"cp_local_seq_lens has shape"):
        attnhost.BatchBuilder(cb).build([1], [3], [[0]], cp_local_seq_lens=[1, 2])


def test_older_library_refused(monkeypatch):
    """On a library older than ABI 2.2 the package refuses context
    parallelism (such a library would ignore the group and each rank would
    attend over its shard alone)."""
    lib = _ffi.load()
    monkeypatch.setattr(lib, "ah_abi_version", lambda: 2 << 16 | 1)
    with pytest.raises(attnhost.UnsupportedError, match=r"ABI 2\.2.*speaks ABI 2\.1"):
        attnhost.LocalCpGroup(2)


def test_nccl_failure_carries_the_message():
    """NcclComms that cannot be made raise with the library's message
    (here: no such NCCL, or no NCCL in this build)."""
    with pytest.raises(attnhost.AttnhostError) as e:
        attnhost.NcclComms([0, 1], library="/nonexistent/libnccl.so.2")
    assert e.value.message


def test_group_outlives_its_bindings(host, cp_selection, monkeypatch):
    """A closed LocalCpGroup waits for the bindings made on it."""
    lib = _ffi.load()
    log = []
    for name in ("ah_cp_local_group_destroy", "ah_binding_destroy"):
        real = getattr(lib, name)
        monkeypatch.setattr(lib, name, lambda p, real=real, name=name: (log.append(name),
                                                                        real(p)))
    g = attnhost.LocalCpGroup(2)
    bs = [attnhost.Binding(host, cp_selection, **LIMITS, cp=g.rank(r)) for r in range(2)]
    g.close()
    assert g.closed and log == []
    del bs
    gc.collect()
    assert log == ["ah_binding_destroy", "ah_binding_destroy", "ah_cp_local_group_destroy"]


# ---- two GPUs over NCCL --------------------------------------------------------

GPU_LIMITS = dict(LIMITS, max_num_tokens=512)  # the first step prefills every prompt


def test_cp_nccl_two_gpus(host):
    """Two ranks over NCCL (NcclComms on cuda:0 and cuda:1) on a GPU
    plugin in bf16 against one binding on cuda:0: a prefill of every
    request (which stores the ranks' shards), then decode steps.
    $ATTNHOST_CP_PLUGIN forces a plugin; default: the host's choice."""
    torch = pytest.importorskip("torch", reason="the NCCL test needs torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("the NCCL test needs two CUDA devices")
    spec = attnhost.LayerSpec(num_q_heads=8, num_kv_heads=2, head_size=128, dtype="bf16",
                              block_size=BS)
    specs = [spec, dataclasses.replace(spec, sliding_window=64),
             dataclasses.replace(spec, sinks=True)]
    sel = host.select(attnhost.Model.from_specs("cp-gpu", specs),
                      force=os.environ.get("ATTNHOST_CP_PLUGIN") or None)
    plugins = sorted({p for p in sel.plugins("decode") + sel.plugins("prefill") if p})
    if {host.plugin(p).device_kind for p in plugins} != {"cuda"}:
        pytest.skip(f"no CUDA plugin serves every layer ({plugins})")
    world, il = 2, 16
    comms = attnhost.NcclComms([0, 1])
    ranks = [GpuEngine(torch, host, sel, world, r, il, comms.comm(r)) for r in range(world)]
    whole = GpuEngine(torch, host, sel, 1, 0, 1, None)
    gen = torch.Generator().manual_seed(11)
    ctx = torch.tensor([0, 0, 0, 0, 0, 0])
    prompt = torch.tensor([1, 5, 16, 31, 70, 200])
    steps = [(prompt, ctx)] + [(torch.ones(6, dtype=torch.long), prompt + i) for i in range(3)]
    for ql, c in steps:
        T = int(ql.sum())
        inputs = [(torch.randn(T, s.num_q_heads, 128, generator=gen),
                   torch.randn(T, s.num_kv_heads, 128, generator=gen),
                   torch.randn(T, s.num_kv_heads, 128, generator=gen),
                   torch.randn(s.num_q_heads, generator=gen)) for s in specs]
        want = whole.step(ql.tolist(), c.tolist(), inputs)
        got = run_ranks(lambda e: e.step(ql.tolist(), c.tolist(), inputs), ranks)
        for e, outs in zip(ranks, got):
            if isinstance(outs, Exception):
                raise outs
            for l in range(len(specs)):
                a, b = outs[l].float().cpu(), want[l].float().cpu()
                rel = float((a - b).norm() / b.norm())
                assert rel < 2e-2 and float((a - b).abs().max()) < 0.1, (
                    f"rank {e.rank}, layer {l} ({plugins}), query lens {ql.tolist()}: "
                    f"relative error {rel:.3g}")
    for e in ranks + [whole]:
        e.builder.close()
        e.binding.close()
    comms.close()


class GpuEngine:
    """A rank on cuda:rank (the reference on cuda:0) with a torch cache."""

    def __init__(self, torch, host, sel, world, rank, interleave, comm):
        self.torch, self.world, self.rank = torch, world, rank
        cp = None if comm is None else attnhost.CpGroup(world, rank, interleave,
                                                         nccl_comm=comm,
                                                         timeout_ms=TIMEOUT_MS)
        self.binding = attnhost.Binding(host, sel, **GPU_LIMITS, device_index=rank, cp=cp)
        self.cache = attnhost.PagedKVCache(self.binding, allocator="torch")
        self.builder = attnhost.BatchBuilder(self.binding)
        self.specs = [sel.decision(l).spec for l in range(sel.num_layers)]
        R, MB = GPU_LIMITS["max_num_reqs"], GPU_LIMITS["max_blocks_per_req"]
        perm = np.random.default_rng(50 + rank).permutation(GPU_LIMITS["num_blocks"])
        self.table = perm.astype(np.int32)[: R * MB].reshape(R, MB)

    def step(self, query_lens, ctx, inputs):
        torch = self.torch
        dev = torch.device("cuda", self.rank)
        with torch.cuda.device(dev):
            n = len(query_lens)
            batch = self.builder.build(query_lens, ctx, self.table[:n])
            self.binding.plan(batch)
            outs = []
            for l, spec in enumerate(self.specs):
                q, k, v, sinks = (x.to(dev) for x in inputs[l])
                q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
                out = torch.empty(q.shape[0], spec.num_q_heads, spec.v_head_size,
                                  dtype=torch.bfloat16, device=dev)
                self.binding.forward(l, q, k, v, *self.cache.tensors(l), out,
                                     sinks=sinks if spec.sinks else None)
                outs.append(out)
            torch.cuda.synchronize(dev)
            return outs
