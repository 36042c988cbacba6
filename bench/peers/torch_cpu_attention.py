"""PyTorch CPU scaled_dot_product_attention on the cpu_amx bench shapes.

The peer for plugins/cpu_amx: same shapes as cpu_amx_bench (bf16, 32 query
heads over 8 KV heads, head size 128), same statistics (median of --reps
timed calls after one warm-up), printed in the same line format so the two
can be read side by side:

  decode:  q [B, 32, 1, 128] over contiguous K/V [B, 8, ctx, 128]
  prefill: q [1, 32, T, 128] over K/V [1, 8, T, 128], causal

PyTorch gets contiguous (unpaged) K/V, which favours it. Each shape runs
with enable_gqa=True on the 8 KV heads and (except decode caches over 512K
tokens) with K/V expanded to 32 heads before timing, so the fused CPU flash
kernel applies; the faster is reported as `best`. Prefill shapes run first.
Large tensors are filled by tiling one 16M-element random block (torch's
serial RNG would spend tens of seconds on the multi-GiB decode caches; the
kernels' speed does not depend on the values).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


_BLOCK = None
_CALLS = 0


def rand_bf16(*shape):
    """Random bf16 tensor of this shape, tiled from one random block (rotated
    differently on each call, so q, k and v of a shape differ)."""
    global _BLOCK, _CALLS
    if _BLOCK is None:
        _BLOCK = torch.randn(1 << 24, dtype=torch.bfloat16)
    _CALLS += 1
    base = torch.roll(_BLOCK, shifts=_CALLS * 104729)
    n = 1
    for x in shape:
        n *= x
    if n <= base.numel():
        return base[:n].clone().view(*shape)
    reps = (n + base.numel() - 1) // base.numel()
    return base.repeat(reps)[:n].view(*shape)


def timed(fn, reps):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > 2.0:  # a slow fallback: one more call is enough to report it
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run(q, k, v, causal, reps, expand=True):
    """Median seconds with GQA and with K/V expanded (when expand); a variant
    PyTorch does not support is left out."""
    out = {}
    rep = q.shape[1] // k.shape[1]
    if expand:
        ke = k.repeat_interleave(rep, dim=1).contiguous()
        ve = v.repeat_interleave(rep, dim=1).contiguous()
        out["expanded"] = timed(lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal), reps)
        del ke, ve
    try:
        out["gqa"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), reps)
    except (RuntimeError, TypeError) as e:
        print(f"# enable_gqa unsupported: {e}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--decode", default="16:4096,32:8192,64:4096,1:16384")
    ap.add_argument("--prefill", default="2048,4096,8192")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}")
    hq, hk, d = 32, 8, 128
    for item in filter(None, a.prefill.split(",")):
        t = int(item)
        q = rand_bf16(1, hq, t, d)
        k = rand_bf16(1, hk, t, d)
        v = rand_bf16(1, hk, t, d)
        r = run(q, k, v, True, max(3, a.reps // 2))
        fl = 4.0 * hq * d * t * (t + 1) / 2
        for name, sec in r.items():
            print(f"torch prefill variant={name} threads={a.threads} T={t} median_ms={sec * 1e3:.3f} "
                  f"GFLOP/s={fl / sec / 1e9:.1f}")
        best = min(r.values())
        print(f"torch prefill variant=best threads={a.threads} T={t} median_ms={best * 1e3:.3f} "
              f"GFLOP/s={fl / best / 1e9:.1f}", flush=True)
    for item in filter(None, a.decode.split(",")):
        b, ctx = (int(x) for x in item.split(":"))
        q = rand_bf16(b, hq, 1, d)
        k = rand_bf16(b, hk, ctx, d)
        v = rand_bf16(b, hk, ctx, d)
        # Expanding multi-GiB caches four-fold costs more than it tells: GQA only there.
        r = run(q, k, v, False, a.reps, expand=b * ctx <= 512 * 1024)
        nbytes = b * ctx * hk * d * 2 * 2
        for name, sec in r.items():
            print(f"torch decode variant={name} threads={a.threads} B={b} ctx={ctx} median_ms={sec * 1e3:.3f} "
                  f"GB/s={nbytes / sec / 1e9:.1f}")
        if not r:
            print(f"torch decode B={b} ctx={ctx}: no variant ran")
            continue
        best = min(r.values())
        print(f"torch decode variant=best threads={a.threads} B={b} ctx={ctx} median_ms={best * 1e3:.3f} "
              f"GB/s={nbytes / best / 1e9:.1f}", flush=True)
        del q, k, v


if __name__ == "__main__":
    main()
