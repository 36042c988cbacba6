"""Objects freed in dependency order whatever order Python collects them in:
bindings before their selection and host, selections before their host."""

import gc
import itertools
import threading

import pytest

import attnhost
from attnhost import _ffi
from conftest import fp32_spec

LIMITS = dict(max_num_reqs=2, max_num_tokens=8, max_blocks_per_req=2, max_seq_len=32,
              num_blocks=4)
DESTROYS = ("ah_host_destroy", "ah_selection_destroy", "ah_binding_destroy", "ah_model_destroy")


@pytest.fixture()
def calls(monkeypatch):
    """Record the destroy calls (the wrappers look them up at creation)."""
    lib = _ffi.load()
    log = []
    for name in DESTROYS:
        real = getattr(lib, name)

        def rec(ptr, real=real, name=name):
            log.append((name, ptr))
            real(ptr)

        monkeypatch.setattr(lib, name, rec)
    return log


def make(cpu_amx_needed=True):
    h = attnhost.Host(cache_path="")
    m = attnhost.Model.from_specs("life", [fp32_spec()])
    s = h.select(m)
    b = attnhost.Binding(h, s, **LIMITS)
    return {"host": h, "model": m, "selection": s, "binding": b}


def check_order(log, objs):
    order = [n for n, _ in log]
    assert sorted(order) == sorted(DESTROYS), order
    assert order.index("ah_binding_destroy") < order.index("ah_selection_destroy")
    assert order.index("ah_selection_destroy") < order.index("ah_host_destroy")


@pytest.mark.parametrize("perm", list(itertools.permutations(["host", "selection", "binding"])))
def test_del_in_any_order(calls, cpu_amx, perm):
    objs = make()
    ptrs = {k: v._ptr for k, v in objs.items()}
    del objs["model"]  # a model may go first: selections copy the specs
    for k in perm:
        del objs[k]
        gc.collect()
    check_order(calls, ptrs)


@pytest.mark.parametrize("perm", list(itertools.permutations(["host", "selection", "binding"])))
def test_close_in_any_order(calls, cpu_amx, perm):
    objs = make()
    for k in ("model",) + perm:
        objs[k].close()
        assert objs[k].closed
    check_order(calls, objs)
    with pytest.raises(ValueError, match="closed"):
        objs["host"].plugins()


def test_cycle_collected_together(calls, cpu_amx):
    objs = make()
    np = pytest.importorskip("numpy")
    builder = attnhost.BatchBuilder(objs["binding"])
    cache = attnhost.PagedKVCache(objs["binding"])
    # a cycle through every object: the collector finalizes them in any order
    cyc = [objs, builder, cache]
    for o in (objs["host"], objs["selection"], objs["binding"], builder, cache):
        o.cycle = cyc
    del objs, builder, cache, cyc, o
    gc.collect()
    check_order(calls, None)
    assert np  # numpy was there for the builder


def test_binding_keeps_host_alive(cpu_amx):
    objs = make()
    b = objs["binding"]
    del objs
    gc.collect()
    assert not b.host.closed and b.selection.num_layers == 1
    assert b.kv_cache_desc(0)[0].shape[0] == LIMITS["num_blocks"]


def test_one_thread_at_a_time(cpu_amx):
    b = make()["binding"]
    b._busy.acquire()  # another thread's call in flight
    try:
        with pytest.raises(RuntimeError, match="two threads"):
            b.forward(0, None, None, None, None, None, None)
    finally:
        b._busy.release()


def test_hosts_from_threads(cpu_amx):
    h = attnhost.Host(cache_path="")
    m = attnhost.Model.from_specs("thr", [fp32_spec()])
    errs = []

    def work():
        try:
            for _ in range(5):
                s = h.select(m)
                attnhost.Binding(h, s, **LIMITS).close()
        except Exception as e:  # pragma: no cover - reported below
            errs.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errs == []
