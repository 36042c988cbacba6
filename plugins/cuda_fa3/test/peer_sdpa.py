#!/usr/bin/env python3
"""Peers for the cuda_fa3 benchmark, run in the same session on the same GPU:
PyTorch SDPA with its cuDNN and FlashAttention-2 backends on the prefill
shapes of fa3_bench, and the machine's HBM bandwidth (a read-only reduction
and a device-to-device copy), each a median of CUDA-event timings on random
data (bench/peers/peerlib.py). Prints RESULT lines like fa3_bench.
--batch=N times N calls back to back per timing, as fa3_bench's --batch does.

    peer_sdpa.py [--batch=N] [HEAD_SIZE ...]   (default head sizes 128 64 256)"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench", "peers"))
from peerlib import hbm_gbps, sdpa_ms  # noqa: E402

BATCH = 1


def bandwidth():
    read, copy = hbm_gbps()
    print(f"RESULT hbm read-only (sum of 2 GiB bf16) {read:8.1f} GB/s")
    print(f"RESULT hbm copy 2 GiB (read+write counted) {copy:8.1f} GB/s")


def prefill(dims):
    for d in dims:
        h = 2048 // d
        for causal in (True, False):
            for L in (4096, 8192, 16384):
                b = 16384 // L
                q, k, v = (torch.randn(b, h, L, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
                flops = 4 * b * h * L * L * d * (0.5 if causal else 1.0)
                for name, be in (("cudnn", "cudnn"), ("flash2", "flash")):
                    try:
                        ms = sdpa_ms(be, q, k, v, causal, reps=30, batch=BATCH)
                        print(f"RESULT sdpa-{name:6s} prefill d{d:<3d} h{h:<2d} batch {b:<2d} L {L:<5d} "
                              f"{'causal' if causal else 'noncausal':10s} {ms:8.3f} ms {flops/ms/1e9:7.1f} TFLOP/s",
                              flush=True)
                    except Exception as e:  # a backend may refuse a shape
                        print(f"RESULT sdpa-{name} prefill d{d} L {L} unavailable: {type(e).__name__}: {e}"[:200])
                del q, k, v


def decode():
    # Contiguous-KV decode peer (no paging): batch 64, GQA 32/8, head 128.
    for L in (4096, 8192, 16384):
        q = torch.randn(64, 32, 1, 128, dtype=torch.bfloat16, device="cuda")
        k, v = (torch.randn(64, 8, L, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2))
        nbytes = 2 * k.numel() * 2
        for name, be in (("cudnn", "cudnn"), ("flash2", "flash"), ("efficient", "efficient")):
            try:
                ms = sdpa_ms(be, q, k, v, False, reps=30, batch=BATCH)
                print(f"RESULT sdpa-{name:6s} decode d128 32/8 batch 64 kv {L:<5d} {ms:8.3f} ms {nbytes/ms/1e6:7.1f} GB/s",
                      flush=True)
            except Exception as e:
                print(f"RESULT sdpa-{name} decode kv {L} unavailable: {type(e).__name__}: {e}"[:200])
        del q, k, v


if __name__ == "__main__":
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    bandwidth()
    args = sys.argv[1:]
    for a in [a for a in args if a.startswith("--batch=")]:
        BATCH = max(1, min(1000, int(a.split("=", 1)[1])))
        args.remove(a)
    prefill([int(x) for x in args] or [128, 64, 256])
    decode()
