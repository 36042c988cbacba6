"""The Python layer's own cost per decode step: batch building and one
forward call per layer, with tiny heads (1 query head, 1 KV head, head size
32, fp32, short contexts) so the kernel costs little.

For each layer call it reports the Python API (Binding.forward: DLPack
imports, argument struct, lock, ctypes call) and the same C call made
directly through ctypes with pre-built arguments (the C side: host checks,
plugin forward, and one ctypes call); the difference is the package's own
cost.

    ATTNHOST_LIB=build/lib/libattnhost.so python3 python/bench/overhead.py
"""

import argparse
import ctypes
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import attnhost  # noqa: E402
from attnhost import _ffi  # noqa: E402


def best(fn, reps, inner):
    """Median over reps of the mean time of inner calls, in microseconds."""
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter_ns() - t0) / inner / 1e3)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--context", type=int, default=16)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    B, L, bs = a.batch, a.layers, 16
    mb = (a.context + 1 + bs - 1) // bs + 1
    host = attnhost.Host(cache_path="")
    spec = attnhost.LayerSpec(num_q_heads=1, num_kv_heads=1, head_size=32, dtype="fp32",
                              block_size=bs)
    model = attnhost.Model.from_specs("tiny", [spec] * L)
    sel = host.select(model, force="cpu_amx")
    b = attnhost.Binding(host, sel, max_num_reqs=B, max_num_tokens=B, max_blocks_per_req=mb,
                         max_seq_len=mb * bs, num_blocks=B * mb)
    cache = attnhost.PagedKVCache(b)
    builder = attnhost.BatchBuilder(b)
    rng = np.random.default_rng(0)
    table = rng.permutation(B * mb).astype(np.int32).reshape(B, mb)
    lists = table.tolist()
    ql, ctx = np.ones(B, np.int32), np.full(B, a.context, np.int32)
    ql_list, ctx_list = ql.tolist(), ctx.tolist()

    build_arr = best(lambda: builder.build(ql, ctx, table), a.reps, 50)
    build_list = best(lambda: builder.build(ql_list, ctx_list, lists), a.reps, 20)
    batch = builder.build(ql, ctx, table)
    plan = best(lambda: b.plan(batch), a.reps, 50)

    q = rng.standard_normal((B, 1, 32)).astype(np.float32)
    k, v, out = q.copy(), q.copy(), np.empty_like(q)
    kv = [cache.tensors(l) for l in range(L)]

    def py_step():
        for l in range(L):
            kc, vc = kv[l]
            b.forward(l, q, k, v, kc, vc, out)

    # the same calls straight through ctypes, arguments prepared once
    held = [attnhost.Tensor(x) for x in (q, k, v, out)]
    args = []
    for l in range(L):
        fa = _ffi.ah_forward_args()
        fa.struct_size = ctypes.sizeof(fa)
        fa.q, fa.key, fa.value, fa.out = (t.ptr for t in held)
        fa.key_cache, fa.value_cache = kv[l][0].ptr, kv[l][1].ptr
        fa.k_scale = fa.v_scale = 1.0
        args.append(ctypes.addressof(fa))
        args.append(fa)
    fwd, bp = _ffi.load().ah_binding_forward, b._ptr
    addrs = args[0::2]

    def c_step():
        for l in range(L):
            fwd(bp, l, addrs[l])

    # interleaved, the fastest round of each: the machine is shared, and the
    # kernel's time varies far more than the Python layer's
    pys, cs = [], []
    for _ in range(a.reps):
        pys.append(best(py_step, 1, 5) / L)
        cs.append(best(c_step, 1, 5) / L)
    py, c = min(pys), min(cs)
    # Binding.forward with the C call replaced by a stub: the Python work alone
    real, b._fwd = b._fwd, lambda p, l, a: 0
    stub = best(py_step, a.reps, 20) / L
    b._fwd = real
    # one ctypes call of a trivial library function: the call's own cost
    pv = _ffi.load().ah_binding_phase
    call = best(lambda: pv(bp), a.reps, 2000)

    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(f"machine: {cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}, "
          f"NumPy {np.__version__}; {time.strftime('%Y-%m-%d')}")
    print(f"decode step: batch {B}, {L} layers, context {a.context}, 1/1 heads of 32, fp32, "
          f"cpu_amx")
    print(f"build, 2-D block table       {build_arr:8.1f} us per step")
    print(f"build, per-request lists     {build_list:8.1f} us per step")
    print(f"plan (C, through Python)     {plan:8.1f} us per step")
    print(f"forward via Binding.forward  {py:8.1f} us per layer")
    print(f"forward via raw ctypes (C)   {c:8.1f} us per layer")
    print(f"Python layer's own cost      {py - c:8.1f} us per layer call (difference)")
    print(f"Binding.forward, C stubbed   {stub:8.1f} us per layer call (Python work alone)")
    print(f"(one bare ctypes call        {call:8.2f} us)")


if __name__ == "__main__":
    main()
