#!/usr/bin/env python3
"""PyTorch peers on the triton plugin's benchmark shapes, same machine, same
conventions (CUDA events, warm-up, median; peerlib.py):

  prefill: causal and non-causal bf16, 32 query / 8 KV heads, head 128, 16k tokens as
           4x4096, 2x8192, 1x16384, through SDPA's FlashAttention-2 and cuDNN
           backends;
  decode:  batch 64, 32/8 heads, head 128, contiguous KV of 4k/8k/16k via
           SDPA (flash backend, q_len 1), for reference only: not paged;
  hbm:     read-only bandwidth (a reduction) and device-to-device copy
           bandwidth (read + write counted).

Usage: python3 torch_sdpa_triton_shapes.py
"""
import torch

from peerlib import hbm_gbps, refusal, sdpa_ms


def main():
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    read, copy = hbm_gbps()
    print(f"hbm      read-only sum of 2048 MiB: {read:.1f} GB/s")
    print(f"hbm      torch copy of 2048 MiB: {copy:.1f} GB/s (read + write)")
    hq, hk, d = 32, 8, 128
    for seq in (4096, 8192, 16384):
        b = 16384 // seq
        q = torch.randn(b, hq, seq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        for causal in (True, False):
            kind = "prefill " if causal else "prefill-nc"
            flops = 4.0 * b * hq * d * seq * seq / (2 if causal else 1)
            for name in ("flash", "cudnn"):
                try:
                    ms = sdpa_ms(name, q, k, v, causal, reps=10)
                    print(f"{kind} sdpa-{name:5s} batch {b} seq {seq} hq {hq} hk {hk} d {d}: "
                          f"{ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
                except RuntimeError as e:
                    print(f"{kind} sdpa-{name} seq {seq}: unavailable ({refusal(e)})")
        del q, k, v
    for seq in (4096, 8192, 16384):
        b = 64
        q = torch.randn(b, hq, 1, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        byts = 2.0 * b * seq * hk * d * 2
        try:
            ms = sdpa_ms("flash", q, k, v, False)
            print(f"decode   sdpa-flash batch {b} kv {seq} (contiguous, gqa): {ms:8.4f} ms "
                  f"{byts / ms / 1e6:7.1f} GB/s")
        except RuntimeError as e:
            print(f"decode   sdpa-flash kv {seq}: unavailable ({refusal(e)})")
        del q, k, v


if __name__ == "__main__":
    main()
