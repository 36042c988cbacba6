#!/usr/bin/env python3
"""The real FlashInfer (flashinfer-python, JIT-compiled on first use) as the
peer of the cuda_flashinfer plugin, on the plugin's benchmark shapes:

  decode:  paged bf16 KV, NHD, page 16, GQA 32/8, head 128, batch 64,
           context 4k/8k/16k, pages a random permutation of the pool (as
           fi_bench lays them out); FlashInfer's CUDA-core decode kernel and
           its tensor-core one (use_tensor_cores), each timed;
  prefill: one ragged sequence of 4k/8k/16k bf16 tokens, 32/8 heads, head
           128, causal and not, through the backends named by --prefill
           (fa2: FlashInfer's mma.sync kernel, fa3: its Hopper kernel).

CUDA-event medians after warm-up (peerlib.py), random data; --batch N times
N decode calls back to back per timing, leaving out the host's launch time. Output lines
match fi_bench's: "| shape | ms | GB/s | TFLOP/s |" rows tagged flashinfer.
The wheel is not on the device image: carry it (bench/RESULTS.md names the
command). A step that fails prints why and the rest still runs.

    python3 flashinfer_peer.py [--reps N] [--prefill fa2,fa3] [--decode-only] [--batch N]
"""
import argparse
import os
import sys
import time

import torch

from peerlib import median_ms, refusal

HQ, HK, D, PAGE = 32, 8, 128, 16


def decode(fi, ws, ctx, tensor_cores, reps, batch):
    b = 64
    pages_per = ctx // PAGE
    pool = b * pages_per
    k = torch.randn(pool, PAGE, HK, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(pool, PAGE, HK, D, dtype=torch.bfloat16, device="cuda")
    indices = torch.randperm(pool, device="cuda", dtype=torch.int32)
    indptr = torch.arange(b + 1, device="cuda", dtype=torch.int32) * pages_per
    last = torch.full((b,), PAGE, device="cuda", dtype=torch.int32)
    q = torch.randn(b, HQ, D, dtype=torch.bfloat16, device="cuda")
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tensor_cores)
    w.plan(indptr, indices, last, HQ, HK, D, PAGE, q_data_type=torch.bfloat16,
           kv_data_type=torch.bfloat16)
    ms = median_ms(lambda: w.run(q, (k, v)), reps, batch=batch)
    nbytes = 2 * k.numel() * 2 + 2 * q.numel() * 2
    kind = "tensor-core" if tensor_cores else "cuda-core"
    how = f", x{batch} back to back" if batch > 1 else ""
    print(f"| flashinfer decode B{b} ctx{ctx} 32/8 d128 page16 ({kind}{how}) | {ms:.3f} | "
          f"{nbytes / ms / 1e6:.0f} | |", flush=True)
    del k, v


def prefill(fi, ws, n, causal, backend, reps):
    q = torch.randn(n, HQ, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(n, HK, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(n, HK, D, dtype=torch.bfloat16, device="cuda")
    indptr = torch.tensor([0, n], dtype=torch.int32, device="cuda")
    w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
    w.plan(indptr, indptr, HQ, HK, D, causal=causal, q_data_type=torch.bfloat16,
           kv_data_type=torch.bfloat16)
    ms = median_ms(lambda: w.run(q, k, v), reps)
    pairs = n * (n + 1) // 2 if causal else n * n
    name = f"prefill B1 {n} {'causal' if causal else 'non-causal'} 32/8 d128"
    print(f"| flashinfer-{backend} {name} | {ms:.3f} | | {4.0 * HQ * D * pairs / ms / 1e9:.1f} |",
          flush=True)


def attempt(what, fn):
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # a JIT or API failure: say which step, go on
        print(f"| flashinfer {what} | failed: {type(e).__name__}: {refusal(e)} | | |", flush=True)
    print(f"#   {what}: {time.time() - t0:.1f} s (JIT compile included on first use)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--prefill", default="fa2", help="comma-separated backends, or empty")
    ap.add_argument("--decode-only", action="store_true")
    ap.add_argument("--batch", type=int, default=1,
                    help="decode rows: time this many calls back to back per timing (device time only)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 8))
    t0 = time.time()
    import flashinfer as fi
    print(f"# flashinfer {fi.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}; import {time.time() - t0:.1f} s", flush=True)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    print("| shape | ms | GB/s | TFLOP/s |")
    print("| --- | --- | --- | --- |")
    for tc in (False, True):
        for ctx in (4096, 8192, 16384):
            attempt(f"decode ctx{ctx} tc={tc}", lambda: decode(fi, ws, ctx, tc, args.reps, args.batch))
    if args.decode_only:
        return 0
    for backend in filter(None, args.prefill.split(",")):
        for n in (4096, 8192, 16384):
            for causal in (True, False):
                attempt(f"prefill-{backend} {n} causal={causal}",
                        lambda: prefill(fi, ws, n, causal, backend, max(5, args.reps // 3)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
