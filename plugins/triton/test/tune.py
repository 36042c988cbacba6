#!/usr/bin/env python3
"""Tuning and a numerics cross-check of the triton plugin's kernels, run on
a GPU machine with Triton JIT (the shipped path is the AOT build through C;
this script picks the launch shapes generate.py compiles, and checks the
kernels against PyTorch when the C path cannot say why it fails).

For each candidate (BLOCK_M/TILE_N/num_warps/num_stages) it times the
unified kernel on causal prefill (bf16, 32/8 heads, head 128, 4x4096 in
16-token pages) and the split-KV decode (batch 64, kv 8192) for several
split counts, with triton.testing.do_bench (median).
Usage: python3 tune.py [--quick] [--prefill-only]
"""
import math
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
from decode_split import decode_split_reduce, decode_split_stage1  # noqa: E402
from unified_attention import unified_attention  # noqa: E402

dev = "cuda"
BS = 16


def paged(batch, seq, hk, d, dtype=torch.bfloat16):
    nblk = batch * seq // BS
    kc = torch.randn(nblk, BS, hk, d, device=dev, dtype=dtype)
    vc = torch.randn(nblk, BS, hk, d, device=dev, dtype=dtype)
    bt = torch.randperm(nblk, device=dev, dtype=torch.int32).view(batch, seq // BS).contiguous()
    return kc, vc, bt


def run_unified(q, kc, vc, out, bt, seq_lens, qsl, counts, hq, hk, d, cfg, heads, causal=1,
                plain=True):
    bm, tn, w, st = cfg
    block_q = bm // heads
    T = q.shape[0]
    grid = (T // block_q + seq_lens.numel() + 1, hq // heads)
    dummy = torch.empty(1, device=dev, dtype=torch.float32)
    unified_attention[grid](
        q, kc, vc, out, dummy, dummy, dummy, bt, seq_lens, qsl, counts,
        1.0 / math.sqrt(d), 1.0, 1.0, hq // hk, heads, d, bt.stride(0),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), hq,
        kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
        BS, 0, causal, 0, 0, 0, 0,
        HEAD_PAD=d, BLOCK_M=bm, TILE_N=tn, PLAIN=plain, num_warps=w, num_stages=st)


def run_decode(q, kc, vc, out, bt, seq_lens, counts, hq, hk, d, cfg, splits, mid_o, mid_lse):
    bh, tn, w, st = cfg
    B = q.shape[0]
    dummy = torch.empty(1, device=dev, dtype=torch.float32)
    decode_split_stage1[(B, hk * triton.cdiv(hq // hk, bh), splits)](
        q, kc, vc, mid_o, mid_lse, dummy, bt, seq_lens, counts,
        1.0 / math.sqrt(d), 1.0, hq // hk, d, bt.stride(0), q.stride(0), q.stride(1),
        kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
        BS, 0, splits, 256, 64, hq, 0, 0,
        HEAD_PAD=d, BLOCK_H=bh, TILE_N=tn, num_warps=w, num_stages=st)
    decode_split_reduce[(B, hq)](
        mid_o, mid_lse, out, dummy, dummy, counts, 1.0, d, splits, 64, out.stride(0), out.stride(1),
        hq, 0, 0, HEAD_PAD=d, MAX_SPLITS=64, num_warps=4, num_stages=1)


def torch_ref(q, kc, vc, bt, lens, qlens, hq, hk):
    outs, t0 = [], 0
    for r in range(len(lens)):
        L, Q = lens[r], qlens[r]
        blocks = bt[r, :(L + BS - 1) // BS].long()
        k = kc[blocks].reshape(-1, hk, kc.shape[-1])[:L].transpose(0, 1).float()
        v = vc[blocks].reshape(-1, hk, kc.shape[-1])[:L].transpose(0, 1).float()
        k = k.repeat_interleave(hq // hk, 0)
        v = v.repeat_interleave(hq // hk, 0)
        qq = q[t0:t0 + Q].transpose(0, 1).float()
        s = qq @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        pos = torch.arange(L - Q, L, device=dev)[:, None]
        s = s.masked_fill(torch.arange(L, device=dev)[None, :] > pos, float("-inf"))
        outs.append((s.softmax(-1) @ v).transpose(0, 1))
        t0 += Q
    return torch.cat(outs)


def main():
    quick = "--quick" in sys.argv
    hq, hk, d = 32, 8, 128
    torch.manual_seed(0)
    # Numerics: a small mixed batch through both paths.
    lens, qlens = [300, 77, 1000], [300, 1, 45]
    kc, vc, _ = paged(1, 4096, hk, d)
    bt = torch.randperm(kc.shape[0], device=dev, dtype=torch.int32)[:3 * 64].view(3, 64).contiguous()
    q = torch.randn(sum(qlens), hq, d, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    qsl = torch.tensor([0, 300, 301, 346], device=dev, dtype=torch.int32)
    sl = torch.tensor(lens, device=dev, dtype=torch.int32)
    counts = torch.tensor([3, sum(qlens)], device=dev, dtype=torch.int32)
    ref = torch_ref(q, kc, vc, bt, lens, qlens, hq, hk)
    for plain in (False, True):
        run_unified(q, kc, vc, out, bt, sl, qsl, counts, hq, hk, d, (128, 64, 8, 3), 4, plain=plain)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        print(f"numerics unified mixed plain={plain}: rel L2 {err:.2e} "
              f"{'ok' if err < 1.6e-2 else 'FAIL'}")
    qd = torch.randn(3, hq, d, device=dev, dtype=torch.bfloat16)
    outd = torch.empty_like(qd)
    mid_o = torch.empty(3 * hq * 64 * d, device=dev, dtype=torch.float32)
    mid_l = torch.empty(3 * hq * 64, device=dev, dtype=torch.float32)
    run_decode(qd, kc, vc, outd, bt, sl, counts, hq, hk, d, (16, 64, 4, 3), 4, mid_o, mid_l)
    refd = torch_ref(qd, kc, vc, bt, lens, [1, 1, 1], hq, hk)
    err = ((outd.float() - refd).norm() / refd.norm()).item()
    print(f"numerics split decode: rel L2 {err:.2e} {'ok' if err < 1.6e-2 else 'FAIL'}")

    # Prefill tuning.
    seq, B = 4096, 4
    kc, vc, bt = paged(B, seq, hk, d)
    q = torch.randn(B * seq, hq, d, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    qsl = torch.arange(0, B + 1, device=dev, dtype=torch.int32) * seq
    sl = torch.full((B,), seq, device=dev, dtype=torch.int32)
    counts = torch.tensor([B, B * seq], device=dev, dtype=torch.int32)
    flops = 4.0 * B * hq * d * seq * seq / 2
    cfgs = [(128, 64, 8, 3), (256, 64, 8, 2), (128, 32, 8, 5), (64, 64, 4, 3), (128, 128, 8, 3),
            (64, 32, 4, 4), (256, 32, 8, 3), (128, 64, 4, 3)]
    if quick:
        cfgs = cfgs[:4]
    for cfg in cfgs:
        for causal in (1, 0):
            try:
                ms = triton.testing.do_bench(
                    lambda: run_unified(q, kc, vc, out, bt, sl, qsl, counts, hq, hk, d, cfg, 4,
                                        causal), warmup=25, rep=150, return_mode="median")
                fl = flops * (1 if causal else 2)
                print(f"tune prefill plain causal={causal} {cfg}: {ms:.3f} ms "
                      f"{fl / ms / 1e9:.1f} TFLOP/s", flush=True)
            except Exception as e:  # out of shared memory and the like
                print(f"tune prefill {cfg}: failed {str(e).splitlines()[0][:100]}")
    del kc, vc
    if "--prefill-only" in sys.argv:
        return
    # Decode tuning.
    B, seq = 64, 8192
    kc, vc, bt = paged(B, seq, hk, d)
    q = torch.randn(B, hq, d, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    sl = torch.full((B,), seq, device=dev, dtype=torch.int32)
    counts = torch.tensor([B, B], device=dev, dtype=torch.int32)
    mid_o = torch.empty(B * hq * 64 * d, device=dev, dtype=torch.float32)
    mid_l = torch.empty(B * hq * 64, device=dev, dtype=torch.float32)
    byts = 2.0 * B * seq * hk * d * 2
    dcfgs = [(16, 64, 4, 3), (16, 64, 4, 4), (16, 32, 4, 4), (16, 128, 4, 3), (16, 64, 8, 3),
             (16, 128, 8, 2)]
    if quick:
        dcfgs = dcfgs[:2]
    for cfg in dcfgs:
        for splits in (1, 2, 4, 8):
            try:
                ms = triton.testing.do_bench(
                    lambda: run_decode(q, kc, vc, out, bt, sl, counts, hq, hk, d, cfg, splits, mid_o,
                                       mid_l), warmup=50, rep=300, return_mode="median")
                print(f"tune decode {cfg} splits {splits}: {ms:.3f} ms {byts / ms / 1e6:.0f} GB/s",
                      flush=True)
            except Exception as e:
                print(f"tune decode {cfg}: failed {str(e).splitlines()[0][:100]}")


if __name__ == "__main__":
    main()
