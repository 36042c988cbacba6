"""One chunked-prefill step split across the decode and prefill winners,
against the same step run whole on either plugin alone.

The step is one layer (bf16, 32 query / 8 KV heads of 128, pages of 16,
causal decoder): 60 decode requests (query length 1 after 8192 cached
tokens) first, then one prefill chunk of 2048 new tokens (after an optional
cached prefix), in scrambled blocks of a cache filled with random values.
Three configurations, each its own Host, selection and binding:

    split                 [select] decode_priority = <decode>
                                   prefill_priority = <prefill>
    decode plugin alone   [select] priority = <decode>
    prefill plugin alone  [select] priority = <prefill>

(fallback = error in each, so no configuration silently runs elsewhere.)
For each it reports how the binding served the batch (ah_binding_split:
decode requests and tokens, or why it ran whole), the median time per step
of plan + forward and of forward alone (CUDA events on the current torch
stream around 10 steps back to back, >= 20 timings, configurations
interleaved), and checks that the three outputs agree with each other and
with a float32 reference on a few requests (relative L2 over 2e-2 is a
failure). The table comes last; its "vs split" column is each
configuration's plan+forward time over the split one's (> 1: split faster).

A split plan copies the prefill part's rebased query_start_loc to the device
on the step's stream (ah_binding_plan); plan+forward includes the split's
second plan and that copy, forward alone does not.

    # H100, PyTorch with CUDA, the CUDA plugins built in build-gpu/
    ATTNHOST_LIB=build-gpu/lib/libattnhost.so python3 python/bench/mixed_step.py
    ... --decode cuda_flashinfer --prefill triton --prefix 4096 --timings 40

    # CPU (NumPy and cpu_amx; a tiny step that checks the logic)
    ATTNHOST_LIB=build-cpu/lib/libattnhost.so python3 python/bench/mixed_step.py \
        --device cpu --small

A plugin that is not found or not usable here is reported and its rows are
skipped. Exit status: 0, 1 when outputs disagree, 2 on an error.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

REL_L2_MAX = 2e-2          # bf16 outputs: relative L2 above this is a failure
SMALL = dict(num_decode=4, decode_context=100, chunk=40, prefix=24)
FULL = dict(num_decode=60, decode_context=8192, chunk=2048, prefix=0)


# ---------------------------------------------------------------------------
# bf16 on NumPy (no bfloat16 dtype: uint16 bit patterns)
# ---------------------------------------------------------------------------

def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even; returns the uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype(np.uint16)


def bf16_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class NumpyOps:
    """Host arrays for cpu_amx: bf16 tensors are uint16 arrays behind a
    DLTensor of dtype bfloat16."""

    allocator = "numpy"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def describe(self) -> str:
        cpu = "?"
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return (f"{cpu}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}, "
                f"NumPy {np.__version__} (CPU mode: host wall clock, no CUDA events)")

    def randn(self, shape):
        return f32_to_bf16(self.rng.standard_normal(shape, dtype=np.float32))

    def nans(self, shape):
        from attnhost.kvcache import aligned_empty

        n = int(np.prod(shape))
        x = aligned_empty(n * 2).view(np.uint16).reshape(shape)
        x[...] = 0x7FC0  # bf16 NaN: a row left unwritten shows
        return x

    def held(self, x):
        from attnhost import _ffi
        from attnhost._dlpack import OwnedTensor

        assert x.dtype == np.uint16 and x.flags.c_contiguous
        return OwnedTensor(x.ctypes.data, (_ffi.kDLCPU, 0), (_ffi.kDLBfloat, 16), x.shape, x)

    def f32(self, x) -> np.ndarray:
        return bf16_to_f32(x)

    def gather(self, x, blocks: np.ndarray, offs: np.ndarray) -> np.ndarray:
        return bf16_to_f32(x[blocks, offs])

    def fill_cache(self, dst, logical, hnd: bool) -> None:
        dst[...] = logical.transpose(0, 2, 1, 3) if hnd else logical

    def stream(self):
        return None

    def sync(self) -> None:
        pass

    def time_ms(self, fn, steps: int) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            fn()
        return (time.perf_counter_ns() - t0) / 1e6

    def free(self) -> None:
        pass


class TorchOps:
    """torch CUDA tensors on a side stream made current (a non-null handle,
    so DLPack imports on it need no cross-stream synchronisation)."""

    allocator = "torch"

    def __init__(self, device: str, seed: int) -> None:
        import torch

        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: use --device cpu")
        self.dev = torch.device(device)
        if self.dev.index is None:
            self.dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(self.dev)
        self.side = torch.cuda.Stream(self.dev)
        torch.cuda.set_stream(self.side)
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(seed)

    def describe(self) -> str:
        t = self.torch
        p = t.cuda.get_device_properties(self.dev)
        s = (f"{t.cuda.get_device_name(self.dev)} (cuda:{self.dev.index}, sm_{p.major}{p.minor}, "
             f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB); "
             f"torch {t.__version__}, CUDA {t.version.cuda}; Python {platform.python_version()}, "
             f"NumPy {np.__version__}")
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                r = subprocess.run([smi, "--query-gpu=serial,clocks.sm,clocks.mem",
                                    "--format=csv"],
                                   capture_output=True, text=True, timeout=20)
                s += "\nnvidia-smi: " + " | ".join(
                    l.strip() for l in (r.stdout or r.stderr).splitlines() if l.strip())
            except (OSError, subprocess.SubprocessError) as e:
                s += f"\nnvidia-smi: failed ({e})"
        else:
            s += "\nnvidia-smi: not found"
        return s

    def randn(self, shape):
        t = self.torch
        return t.randn(shape, dtype=t.bfloat16, device=self.dev, generator=self.gen)

    def nans(self, shape):
        t = self.torch
        return t.full(shape, float("nan"), dtype=t.bfloat16, device=self.dev)

    def held(self, x):
        import attnhost

        return attnhost.Tensor(x, self.stream())

    def f32(self, x) -> np.ndarray:
        return x.float().cpu().numpy()

    def gather(self, x, blocks: np.ndarray, offs: np.ndarray) -> np.ndarray:
        t = self.torch
        b = t.from_numpy(np.ascontiguousarray(blocks, dtype=np.int64)).to(self.dev)
        o = t.from_numpy(np.ascontiguousarray(offs, dtype=np.int64)).to(self.dev)
        return x[b, o].float().cpu().numpy()

    def fill_cache(self, dst, logical, hnd: bool) -> None:
        dst.copy_(logical.permute(0, 2, 1, 3) if hnd else logical)

    def stream(self) -> int:
        return int(self.torch.cuda.current_stream(self.dev).cuda_stream)

    def sync(self) -> None:
        self.torch.cuda.current_stream(self.dev).synchronize()

    def time_ms(self, fn, steps: int) -> float:
        t = self.torch
        s = t.cuda.current_stream(self.dev)
        e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        e0.record(s)
        for _ in range(steps):
            fn()
        e1.record(s)
        e1.synchronize()
        return float(e0.elapsed_time(e1))

    def free(self) -> None:
        self.torch.cuda.synchronize(self.dev)
        self.torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------

class Step:
    """Requests, scrambled block table and the shared random data."""

    def __init__(self, a, ops) -> None:
        nd, bs = a.num_decode, a.page
        self.nd, self.bs = nd, bs
        self.query_lens = np.array([1] * nd + [a.chunk], dtype=np.int64)
        self.context_lens = np.array([a.decode_context] * nd + [a.prefix], dtype=np.int64)
        self.seq_lens = self.context_lens + self.query_lens
        self.qsl = np.concatenate([[0], np.cumsum(self.query_lens)]).astype(np.int64)
        self.num_reqs = nd + 1
        self.T = int(self.qsl[-1])
        need = (self.seq_lens + bs - 1) // bs
        self.mb = int(need.max())
        total = int(need.sum())
        self.num_blocks = total + a.spare_blocks
        rng = np.random.default_rng(a.seed)
        perm = rng.permutation(self.num_blocks).astype(np.int32)
        self.table = np.zeros((self.num_reqs, self.mb), dtype=np.int32)
        at = 0
        for r in range(self.num_reqs):
            n = int(need[r])
            self.table[r, :n] = perm[at: at + n]
            at += n
        hq, hk, d = a.q_heads, a.kv_heads, a.head_size
        # the cache as NHD [num_blocks, block_size, Hk, D], copied into each
        # configuration's cache in its layout; q/k/v of the step's tokens
        self.logical_k = ops.randn((self.num_blocks, bs, hk, d))
        self.logical_v = ops.randn((self.num_blocks, bs, hk, d))
        self.q = ops.randn((self.T, hq, d))
        self.k = ops.randn((self.T, hk, d))
        self.v = ops.randn((self.T, hk, d))
        ops.sync()
        self.held_q, self.held_k, self.held_v = (ops.held(x) for x in (self.q, self.k, self.v))

    def describe(self, a) -> str:
        kv_tokens = int(self.seq_lens.sum())
        kv_bytes = kv_tokens * a.kv_heads * a.head_size * 2 * 2
        return (f"step: {self.nd} decode requests (query 1 after {a.decode_context} cached tokens) "
                f"then 1 prefill chunk of {a.chunk} tokens after a prefix of {a.prefix}; "
                f"{self.T} tokens, {self.num_reqs} requests; layer: bf16 {a.q_heads}/{a.kv_heads} "
                f"heads of {a.head_size}, page {self.bs}, causal decoder, kv_layout {a.kv_layout}; "
                f"{self.num_blocks} blocks (scrambled), {kv_bytes / 2**30:.2f} GiB of K/V read "
                f"per step")

    def kv_of(self, ops, r: int):
        """K and V of request r as float32 [seq, Hk, D]: the cache's old
        tokens from the logical cache, the new ones from the step's k/v."""
        ctx, s = int(self.context_lens[r]), int(self.seq_lens[r])
        pos = np.arange(ctx)
        blocks, offs = self.table[r, pos // self.bs].astype(np.int64), pos % self.bs
        t0, t1 = int(self.qsl[r]), int(self.qsl[r + 1])
        kn, vn = ops.f32(self.k[t0:t1]), ops.f32(self.v[t0:t1])
        if ctx:
            k = np.concatenate([ops.gather(self.logical_k, blocks, offs), kn])
            v = np.concatenate([ops.gather(self.logical_v, blocks, offs), vn])
        else:
            k, v = kn, vn
        assert k.shape[0] == s
        return k, v


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, ctx: int, scale: float) -> np.ndarray:
    """Causal grouped-query attention of q [n, Hq, D] (positions ctx..ctx+n-1)
    over k/v [ctx+n, Hk, D], float32."""
    n, hq, _ = q.shape
    s, hk, dv = v.shape
    g = hq // hk
    vis = np.arange(s)[None, :] <= (ctx + np.arange(n))[:, None]        # [n, s]
    out = np.empty((n, hq, dv), np.float32)
    for h in range(hk):
        qh = q[:, h * g:(h + 1) * g, :].transpose(1, 0, 2)              # [g, n, D]
        sc = (qh @ k[:, h, :].T) * np.float32(scale)                   # [g, n, s]
        sc = np.where(vis[None], sc, np.float32(-np.inf))
        sc -= sc.max(axis=-1, keepdims=True)
        w = np.exp(sc)
        w /= w.sum(axis=-1, keepdims=True)
        out[:, h * g:(h + 1) * g, :] = (w @ v[:, h, :]).transpose(1, 0, 2)
    return out


def diff(a: np.ndarray, b: np.ndarray):
    """(max abs diff, relative L2 of a against b)."""
    d = a.astype(np.float64) - b.astype(np.float64)
    den = float(np.sqrt((b.astype(np.float64) ** 2).sum()))
    m = float(np.abs(d).max()) if d.size else 0.0
    return m, float(np.sqrt((d ** 2).sum())) / max(den, 1e-30)


# ---------------------------------------------------------------------------
# One configuration: Host + selection + binding + cache + builder
# ---------------------------------------------------------------------------

class Config:
    def __init__(self, label: str, config_text: str, want_decode: str, want_prefill: str):
        self.label = label
        self.config_text = config_text
        self.want = (want_decode, want_prefill)
        self.skip = None       # why the rows are skipped (a plugin missing)
        self.error = None      # an exception's text
        self.got = ("?", "?")
        self.split = None
        self.out = None
        self.out_f32 = None
        self.t_step, self.t_fwd = [], []

    def open(self, a) -> None:
        """The host and its plugin scan (before torch initialises CUDA, so
        even a forked scanner child could probe the GPU)."""
        import attnhost

        self.host = attnhost.Host(config_text=self.config_text, cache_path=a.scan_cache)
        for w in self.host.config_warnings:
            print(f"  [{self.label}] config warning: {w}")
        for name in sorted(set(self.want)):
            p = self.host.plugin(name)
            if p is None:
                found = ", ".join(x.name for x in self.host.plugins()) or "none"
                self.skip = f"plugin {name} not found (found: {found})"
                return
            if not p.available:
                self.skip = f"plugin {name} is {p.state}: {p.reason}"
                return

    def setup(self, a, ops, step: Step, model) -> None:
        import attnhost

        self.sel = self.host.select(model)
        dd, dp = self.sel.decision(0, "decode"), self.sel.decision(0, "prefill")
        self.got = (dd.plugin, dp.plugin)
        for w in self.sel.warnings:
            print(f"  [{self.label}] selection warning: {w}")
        if self.got != self.want:
            raise RuntimeError(f"selection gave decode {self.got[0]}, prefill {self.got[1]}; "
                               f"expected {self.want[0]}, {self.want[1]}:\n"
                               + self.sel.explain(0))
        self.spec = dp.spec
        self.b = attnhost.Binding(self.host, self.sel, max_num_reqs=step.num_reqs,
                                  max_num_tokens=step.T, max_blocks_per_req=step.mb,
                                  max_seq_len=step.mb * step.bs, num_blocks=step.num_blocks,
                                  validate=not a.no_validate, device_index=a.device_index)
        self.cache = attnhost.PagedKVCache(self.b, allocator=ops.allocator, zero=False)
        kd, vd = self.cache.descs[0]
        hnd = self.spec.kv_layout == "hnd"
        want_shape = ((step.num_blocks, a.kv_heads, step.bs, a.head_size) if hnd
                      else (step.num_blocks, step.bs, a.kv_heads, a.head_size))
        if kd.shape != want_shape or vd is None or vd.shape != want_shape \
                or kd.dtype != "bfloat16":
            raise RuntimeError(f"cache {kd} / {vd}: expected {want_shape} bfloat16 "
                               f"({self.spec.kv_layout})")
        ops.fill_cache(self.cache.key(0), step.logical_k, hnd)
        ops.fill_cache(self.cache.value(0), step.logical_v, hnd)
        self.kc, self.vc = self.cache.tensors(0)
        self.out = ops.nans((step.T, a.q_heads, a.head_size))
        self.held_out = ops.held(self.out)
        ops.sync()
        self.builder = attnhost.BatchBuilder(self.b)
        self.batch = self.builder.build(step.query_lens, step.context_lens, step.table)
        self.stream = ops.stream()
        self.step_obj = step

    def plan(self) -> None:
        self.b.plan(self.batch, stream=self.stream)

    def forward(self) -> None:
        s = self.step_obj
        self.b.forward(0, s.held_q, s.held_k, s.held_v, self.kc, self.vc, self.held_out,
                       stream=self.stream)

    def step(self) -> None:
        self.plan()
        self.forward()

    def first(self, ops) -> None:
        """The correctness step: plan, forward, read back."""
        self.step()
        self.split = self.b.split
        ops.sync()
        self.out_f32 = ops.f32(self.out)

    def served(self, step: Step) -> str:
        if self.split is None:
            return "-"
        n, toks, why = self.split
        if n == step.num_reqs:
            return f"all {n} requests on the decode winner"
        if n:
            return (f"split: {n} reqs / {toks} tok on {self.got[0]}, {step.num_reqs - n} reqs / "
                    f"{step.T - toks} tok on {self.got[1]}")
        return f"whole on {self.got[1]}" + (f" ({why})" if why else "")

    def close(self) -> None:
        for name in ("builder", "cache", "b", "sel", "host"):
            obj = self.__dict__.pop(name, None)
            if obj is not None and hasattr(obj, "close"):
                obj.close()
        self.__dict__.pop("kc", None)
        self.__dict__.pop("vc", None)


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--decode", default=None,
                    help="decode plugin (default cuda_flashinfer; cpu_amx with --device cpu)")
    ap.add_argument("--prefill", dest="prefill_plugin", default=None,
                    help="prefill plugin (default cuda_fa3; cpu_amx with --device cpu)")
    ap.add_argument("--small", action="store_true",
                    help=f"a tiny step for CPU checks: {SMALL}")
    ap.add_argument("--num-decode", type=int, default=None, help="decode requests (60)")
    ap.add_argument("--decode-context", type=int, default=None,
                    help="cached tokens of each decode request (8192)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="new tokens of the prefill chunk (2048)")
    ap.add_argument("--prefix", type=int, default=None,
                    help="cached tokens before the prefill chunk (0)")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-size", type=int, default=128)
    ap.add_argument("--page", type=int, default=16, help="block size in tokens (16)")
    ap.add_argument("--kv-layout", default="auto", choices=("auto", "nhd", "hnd"))
    ap.add_argument("--spare-blocks", type=int, default=64,
                    help="cache blocks beyond those the step uses (64)")
    ap.add_argument("--steps", type=int, default=10, help="steps per timing (10)")
    ap.add_argument("--timings", type=int, default=30, help="timings per configuration (30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (5)")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the float32 reference on a few requests")
    ap.add_argument("--no-validate", action="store_true",
                    help="bind with validate=False (no batch/tensor checks per call)")
    ap.add_argument("--scan-cache", default="",
                    help="the hosts' plugin scan cache ('' = none, fresh probes; default '')")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    cpu = a.device == "cpu"
    sizes = SMALL if a.small else FULL
    a.num_decode = sizes["num_decode"] if a.num_decode is None else a.num_decode
    a.decode_context = sizes["decode_context"] if a.decode_context is None else a.decode_context
    a.prefix = sizes["prefix"] if a.prefix is None else a.prefix
    a.chunk = sizes["chunk"] if a.chunk is None else a.chunk
    a.decode = a.decode or ("cpu_amx" if cpu else "cuda_flashinfer")
    a.prefill_plugin = a.prefill_plugin or ("cpu_amx" if cpu else "cuda_fa3")
    a.device_index = 0
    if a.num_decode < 1 or a.chunk < 2 or a.decode_context < 0 or a.prefix < 0:
        ap.error("need --num-decode >= 1, --chunk >= 2, --decode-context/--prefix >= 0")
    if a.q_heads % a.kv_heads:
        ap.error("--q-heads must be a multiple of --kv-heads")
    if a.timings < 20:
        print(f"note: --timings {a.timings} < 20: medians of few timings")
    if not os.environ.get("ATTNHOST_LIB"):
        guess = ROOT / ("build-cpu" if cpu else "build-gpu") / "lib" / "libattnhost.so"
        if guess.exists():
            os.environ["ATTNHOST_LIB"] = str(guess)

    import attnhost

    print(f"# mixed_step: decode {a.decode} / prefill {a.prefill_plugin}, split vs whole")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    d, p = a.decode, a.prefill_plugin
    configs = [
        Config("split", f"[select]\ndecode_priority = {d}\nprefill_priority = {p}\n"
               "fallback = error\n", d, p),
        Config("decode plugin alone", f"[select]\npriority = {d}\nfallback = error\n", d, d),
        Config("prefill plugin alone", f"[select]\npriority = {p}\nfallback = error\n", p, p),
    ]
    if d == p:
        print(f"note: decode and prefill plugin are both {d}: the three configurations are "
              "the same plugin (the split one cannot split)")

    errors = 0
    for c in configs:
        try:
            c.open(a)
        except Exception as e:  # noqa: BLE001 - reported, then the next configuration
            errors += 1
            c.error = f"{type(e).__name__}: {e}"
            print(f"[{c.label}] ERROR {c.error}")
            traceback.print_exc()
            c.close()

    ops = NumpyOps(a.seed) if cpu else TorchOps(a.device, a.seed)
    if not cpu:
        a.device_index = ops.dev.index
    print(f"machine: {ops.describe()}")
    print(f"attnhost {attnhost.version()} (ABI {'.'.join(map(str, attnhost.abi_version()))}), "
          f"{attnhost.library_path()}")

    step = Step(a, ops)
    print(step.describe(a))
    print(f"timing: median over {a.timings} timings of {a.steps} steps back to back, "
          f"configurations interleaved, after {a.warmup} untimed steps; "
          + ("host wall clock" if cpu else "CUDA events on the current torch stream"))

    spec = attnhost.LayerSpec(num_q_heads=a.q_heads, num_kv_heads=a.kv_heads,
                              head_size=a.head_size, dtype="bf16", block_size=a.page,
                              kv_layout=a.kv_layout, attn_type="decoder")
    model = attnhost.Model.from_specs("mixed-step", [spec])

    for c in configs:
        if c.error:
            continue
        if c.skip:
            print(f"[{c.label}] skipped: {c.skip}")
            c.close()
            continue
        try:
            c.setup(a, ops, step, model)
            c.first(ops)
            print(f"[{c.label}] decode {c.got[0]}, prefill {c.got[1]}, kv_layout "
                  f"{c.spec.kv_layout}: split = "
                  f"{tuple(c.split)} -> {c.served(step)}")
        except Exception as e:  # noqa: BLE001 - reported, then the next configuration
            errors += 1
            c.error = f"{type(e).__name__}: {e}"
            print(f"[{c.label}] ERROR {c.error}")
            traceback.print_exc()
            c.close()
    ran = [c for c in configs if c.out_f32 is not None]

    # -- correctness -------------------------------------------------------
    failed = []
    rows = {"decode rows": slice(0, step.nd), "prefill rows": slice(step.nd, step.T)}
    if len(ran) >= 2:
        print("\nagreement (max abs diff, relative L2 of the first against the second):")
    for i in range(len(ran)):
        for j in range(i + 1, len(ran)):
            x, y = ran[i], ran[j]
            parts = []
            for name, sl in rows.items():
                m, r = diff(x.out_f32[sl], y.out_f32[sl])
                bad = not (r <= REL_L2_MAX) or not np.isfinite(x.out_f32[sl]).all()
                parts.append(f"{name}: max {m:.3g}, rel L2 {r:.3g}{'  <-- FAIL' if bad else ''}")
                if bad:
                    failed.append(f"{x.label} vs {y.label}, {name}: rel L2 {r:.3g}")
            print(f"  {x.label} vs {y.label}: " + "; ".join(parts))
    if ran and not a.no_reference:
        picks = sorted({0, step.nd // 2, step.nd - 1, step.num_reqs - 1})
        scale = ran[0].spec.scale or 1.0 / np.sqrt(a.head_size)
        print(f"\nfloat32 reference on requests {picks} (scale {scale:.6g}):")
        refs = {}
        for r in picks:
            k, v = step.kv_of(ops, r)
            t0, t1 = int(step.qsl[r]), int(step.qsl[r + 1])
            refs[r] = (t0, t1, reference(ops.f32(step.q[t0:t1]), k, v,
                                         int(step.context_lens[r]), scale))
        for c in ran:
            parts = []
            for r, (t0, t1, ref) in refs.items():
                m, e = diff(c.out_f32[t0:t1], ref)
                bad = not (e <= REL_L2_MAX)
                parts.append(f"req {r}: max {m:.3g}, rel L2 {e:.3g}{' <-- FAIL' if bad else ''}")
                if bad:
                    failed.append(f"{c.label} vs reference, request {r}: rel L2 {e:.3g}")
            print(f"  {c.label}: " + "; ".join(parts))

    # -- timing ------------------------------------------------------------
    try:
        for c in ran:
            for _ in range(a.warmup):
                c.step()
            ops.sync()
        for _ in range(a.timings):
            for c in ran:
                c.t_step.append(ops.time_ms(c.step, a.steps) / a.steps)
                c.plan()
                c.t_fwd.append(ops.time_ms(c.forward, a.steps) / a.steps)
        ops.sync()
        for c in ran:  # the timed steps rewrote the same K/V: the output must not move
            after = ops.f32(c.out)
            m, r = diff(after, c.out_f32)
            if not (r <= REL_L2_MAX):
                failed.append(f"{c.label}: output after the timings differs (rel L2 {r:.3g})")
    except Exception as e:  # noqa: BLE001
        errors += 1
        print(f"ERROR while timing: {type(e).__name__}: {e}")
        traceback.print_exc()

    if failed:
        print(f"\nCORRECTNESS FAILURE (relative L2 > {REL_L2_MAX:g}):\n  " + "\n  ".join(failed))
    elif len(ran) >= 2:
        print(f"\ncorrectness: {len(ran)} configurations agree (relative L2 <= {REL_L2_MAX:g})")
    if errors:
        print(f"{errors} error(s); see above")

    # -- table (last) ---------------------------------------------------------
    split_cfg = configs[0]
    base = float(np.median(split_cfg.t_step)) if split_cfg.t_step else None
    print()
    print("| configuration | decode / prefill plugin | served as (ah_binding_split) "
          "| plan+forward ms/step (median) | p10-p90 | forward ms/step (median) | vs split |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in configs:
        if c.skip or c.error:
            why = (c.skip or c.error).splitlines()[0][:160]
            print(f"| {c.label} | {c.want[0]} / {c.want[1]} | "
                  f"{'skipped' if c.skip else 'ERROR'}: {why} | - | - | - | - |")
            continue
        if not c.t_step:
            print(f"| {c.label} | {c.got[0]} / {c.got[1]} | {c.served(step)} | - | - | - | - |")
            continue
        ms, mf = float(np.median(c.t_step)), float(np.median(c.t_fwd))
        rel = f"{ms / base:.2f}x" if base else "-"
        print(f"| {c.label} | {c.got[0]} / {c.got[1]} | {c.served(step)} | {ms:.4f} "
              f"| {pct(c.t_step, 10):.4f}-{pct(c.t_step, 90):.4f} | {mf:.4f} | {rel} |")

    for c in configs:
        c.close()
    ops.free()
    return 1 if failed else 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
