"""PyTorch SDPA peer for the long prefills fi_bench times (bf16, 32/8 heads,
d128, one sequence of 4k/8k/16k, causal and not): FlashAttention-2 and cuDNN
backends on dense tensors, CUDA-event medians after warm-up, random data
(bench/peers/peerlib.py).
TFLOP/s counts the visible (query, key) pairs as fi_bench does:
4 * heads * d * pairs, pairs = n(n+1)/2 causal, n^2 otherwise. Then the
decode rows fi_bench --decode times (B64, context 4k/8k/16k) on dense KV
through bench/peers/peerlib.py's sdpa_ms (as bench/peers/torch_sdpa.py does),
with GB/s of K and V read. --batch N times N decode calls back to back per
timing, so the host's launch time (Python and ATen dispatch) drops out.

    python3 sdpa_long.py [--reps N] [--batch N] [--decode-only] [--backends flash,cudnn,...]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "peers"))
from peerlib import refusal, sdpa_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1,
                    help="decode rows: time this many calls back to back per timing (device time only)")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--backends", default="flash,cudnn",
                    help="comma-separated SDPA backends to time (flash, cudnn, efficient)")
    args = ap.parse_args()
    backends = args.backends.split(",")
    hq, hk, d = 32, 8, 128
    print("| shape | backend | ms | TFLOP/s |")
    for n in () if args.decode_only else (4096, 8192, 16384):
        q = torch.randn(1, hq, n, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, hk, n, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, hk, n, d, device="cuda", dtype=torch.bfloat16)
        ke, ve = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
        for causal in (True, False):
            pairs = n * (n + 1) // 2 if causal else n * n
            flops = 4.0 * hq * d * pairs
            name = f"prefill B1 {n} {'causal' if causal else 'non-causal'} 32/8 d128"
            for bname in backends:
                try:
                    ms = sdpa_ms(bname, q, ke, ve, causal, args.reps)
                    print(f"| {name} | {bname} | {ms:.3f} | {flops / ms / 1e9:.1f} |", flush=True)
                except Exception as e:  # a backend that cannot run this shape
                    print(f"| {name} | {bname} | unsupported: {refusal(e)} | |", flush=True)
    print("| shape | backend | ms | GB/s |")
    for ctx in (4096, 8192, 16384):
        b = 64
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, hk, ctx, d, device="cuda", dtype=torch.bfloat16)
        kv_bytes = 2 * b * hk * ctx * d * 2 + 2 * b * hq * d * 2
        for bname in backends:
            try:
                ms = sdpa_ms(bname, q, k, v, False, max(20, args.reps), warmup=5, batch=args.batch)
                how = f" x{args.batch} back to back" if args.batch > 1 else ""
                print(f"| decode B64 ctx{ctx} 32/8 d128{how} | {bname} | {ms:.3f} | {kv_bytes / ms / 1e6:.0f} |",
                      flush=True)
            except Exception as e:  # a backend that cannot run this shape
                print(f"| decode B64 ctx{ctx} 32/8 d128 | {bname} | unsupported: {refusal(e)} | |", flush=True)
        del q, k, v


if __name__ == "__main__":
    main()
