#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention as a peer: times each SDPA backend
(FlashAttention-2, cuDNN, memory-efficient) on the standard attention shapes
with CUDA events (median of --reps after warm-up, random bf16 data), so a
plugin's figure in the same run is a ratio, not a guess. --batch N times N
calls back to back per timing, leaving out the host's launch time (as
`attnhost bench --back-to-back N` does for a plugin).

Decode shapes use a dense KV of the context length per request (SDPA has no
paged KV); GQA goes through enable_gqa where the backend accepts it, else
K/V are expanded to the query heads beforehand (outside the timing).

Prints a markdown table: shape | backend | median ms | GB/s | TFLOP/s.
"""
import argparse
import sys

import torch

from peerlib import refusal, sdpa_ms


def run(name, b, hq, hk, sq, sk, d, causal, reps, batch=1):
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(b, hq, sq, d, device=dev, dtype=dt)
    k = torch.randn(b, hk, sk, d, device=dev, dtype=dt)
    v = torch.randn(b, hk, sk, d, device=dev, dtype=dt)
    kv_bytes = 2 * b * hk * sk * d * 2 + 2 * b * hq * sq * d * 2
    # SDPA's is_causal aligns the mask top-left; with sq != sk (extend) that
    # is not the paged-KV meaning, so those shapes run without a mask and
    # count the full sq x sk work.
    causal = causal and sq == sk
    vis = sq * (sq + 1) // 2 if causal else sq * sk
    flops = 4.0 * b * hq * d * vis
    for bname in ("flash", "cudnn", "efficient"):
        try:
            ms = sdpa_ms(bname, q, k, v, causal, reps, warmup=5, batch=batch)
            print(f"| {name} | {bname} | {ms:.3f} | {kv_bytes / ms / 1e6:.0f} | "
                  f"{flops / ms / 1e9:.1f} |", flush=True)
        except Exception as e:  # a backend that cannot run this shape
            print(f"| {name} | {bname} | unsupported: {refusal(e)} | | |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=1,
                    help="time this many calls back to back per timing (device time only)")
    ap.add_argument("--standard", action="store_true",
                    help="the shapes `attnhost bench` runs by default on a GPU plugin")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| shape (bf16) | backend | median ms | GB/s | TFLOP/s |")
    print("| --- | --- | --- | --- | --- |")
    if args.standard:
        for b in (16, 64):
            for ctx in (4096, 16384):
                run(f"decode B{b} ctx{ctx} 32/8 d128", b, 32, 8, 1, ctx, 128, True, args.reps, args.batch)
        for t in (4096, 16384):
            for causal in (True, False):
                run(f"prefill B1 {t} {'causal' if causal else 'non-causal'} 32/8 d128", 1, 32, 8, t, t,
                    128, causal, args.reps, args.batch)
        return 0
    for ctx in (4096, 8192, 16384):
        run(f"decode B64 ctx{ctx} 32/8 d128", 64, 32, 8, 1, ctx, 128, True, args.reps, args.batch)
    run("decode B1 ctx32768 32/8 d128", 1, 32, 8, 1, 32768, 128, True, args.reps, args.batch)
    run("prefill B1 4096 causal 32/8 d128", 1, 32, 8, 4096, 4096, 128, True, args.reps, args.batch)
    run("prefill B4 1024 causal 32/8 d128", 4, 32, 8, 1024, 1024, 128, True, args.reps, args.batch)
    run("extend B4 512 new on 3584 cached 32/8 d128", 4, 32, 8, 512, 4096, 128, True, args.reps, args.batch)
    run("prefill B1 4096 causal 32/32 d64", 1, 32, 32, 4096, 4096, 64, True, args.reps, args.batch)
    run("prefill B1 4096 causal 16/16 d256", 1, 16, 16, 4096, 4096, 256, True, args.reps, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
