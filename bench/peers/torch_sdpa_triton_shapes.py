#!/usr/bin/env python3
"""PyTorch peers on the triton plugin's benchmark shapes, same machine, same
process conventions (CUDA events, warm-up, median):

  prefill: causal and non-causal bf16, 32 query / 8 KV heads, head 128, 16k tokens as
           4x4096, 2x8192, 1x16384, through SDPA's FlashAttention-2 and cuDNN
           backends (K/V expanded to 32 heads, outside the timing, since
           FA2 through SDPA takes equal head counts);
  decode:  batch 64, 32/8 heads, head 128, contiguous KV of 4k/8k/16k via
           SDPA (flash backend, q_len 1), for reference only: not paged;
  hbm:     device-to-device copy bandwidth (read + write counted).

Usage: python3 torch_sdpa_triton_shapes.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    n = 1 << 30
    x = torch.empty(n, dtype=torch.uint8, device=dev).random_()
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x))
    print(f"hbm      torch copy of {n >> 20} MiB: {ms:.3f} ms, {2 * n / ms / 1e6:.1f} GB/s (read + write)")
    del x, y
    hq, hk, d = 32, 8, 128
    for seq in (4096, 8192, 16384):
        b = 16384 // seq
        q = torch.randn(b, hq, seq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        ke, ve = k.repeat_interleave(hq // hk, 1), v.repeat_interleave(hq // hk, 1)
        for causal in (True, False):
            kind = "prefill " if causal else "prefill-nc"
            flops = 4.0 * b * hq * d * seq * seq / (2 if causal else 1)
            for name, be in (("flash", SDPBackend.FLASH_ATTENTION),
                             ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(be):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(
                            q, ke, ve, is_causal=causal), 10)
                    print(f"{kind} sdpa-{name:5s} batch {b} seq {seq} hq {hq} hk {hk} d {d}: "
                          f"{ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
                except RuntimeError as e:
                    print(f"{kind} sdpa-{name} seq {seq}: unavailable ({str(e).splitlines()[0][:80]})")
        del q, k, v, ke, ve
    for seq in (4096, 8192, 16384):
        b = 64
        q = torch.randn(b, hq, 1, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, hk, seq, d, device=dev, dtype=torch.bfloat16)
        byts = 2.0 * b * seq * hk * d * 2
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            print(f"decode   sdpa-flash batch {b} kv {seq} (contiguous, gqa): {ms:8.4f} ms "
                  f"{byts / ms / 1e6:7.1f} GB/s")
        except RuntimeError as e:
            print(f"decode   sdpa-flash kv {seq}: unavailable ({str(e).splitlines()[0][:80]})")
        del q, k, v


if __name__ == "__main__":
    main()
