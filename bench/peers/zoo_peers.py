#!/usr/bin/env python3
"""The zoo's peers: the same (model, layer spec, step) rows that
`attnhost bench --model M --json` timed, on PyTorch SDPA (cuDNN and
FlashAttention-2, dense KV) and, when it imports, the real FlashInfer
(paged KV in the default binding's block size; MLA layers through its MLA
wrapper, the absorbed form, for decode and for a prefill over cached
tokens; a row that ran the layer's ragged prefill form through its ragged
prefill wrapper, with the form's heads and sizes). Reads one or more attnhost JSON files, writes one JSON object
({"device": ..., "ceilings": ..., "peers": [...]}) on stdout for
bench/zoo_table.py; the ceilings are the HBM read rate and the dense bf16
matmul rate, measured in the same run.

Each step is the attnhost step: n_decode requests of one new token on
decode_context cached tokens, then n_prefill requests of prefill_len new
tokens on prefill_context cached (a mixed step is both, timed as one
decode call and one prefill call back to back). Medians of CUDA-event
timings after warm-up (peerlib.py); --batch N times N calls back to back
per timing, as `attnhost bench --back-to-back N` does.

What SDPA cannot express is left out and the row says so ("approx"):
soft-cap, sinks, ALiBi, a window inside a prefill (a decode's window is
exact: the last W keys), FP8 KV (run in the query dtype). FlashInfer runs
soft-cap, windows, ALiBi (its slopes, 2^(-8 (h + 1) / H) for a power-of-two
head count H, are the ones attnhost bench uses) and FP8 KV, not sinks. A cached prefix in a causal
prefill uses torch's lower-right causal bias. MLA runs as GQA with 576-wide
keys and 512-wide values where a backend accepts it.

    python3 zoo_peers.py zoo-llama-3-8b.json [...] [--reps 20] [--batch 10] > peers.json
    python3 zoo_peers.py zoo-*.json --warm-flashinfer   (builds FlashInfer's JIT
        kernels for every row at small lengths, times nothing: run it while
        something else holds the GPU's timings, or before them)
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from peerlib import BACKENDS, hbm_gbps, median_ms, refusal, tensor_tflops

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}  # FlashInfer's FP8 KV


def rows_of(files):
    """Distinct (model, spec, step) rows with their shapes, in file order."""
    seen, out = set(), []
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        for r in doc["results"]:
            key = (r["model"], r["spec"], r["step"])
            if key not in seen:
                seen.add(key)
                out.append(r)
    return out


def approximations(r, peer):
    """What peer leaves out of row r: SDPA soft-cap, sinks, ALiBi, a prefill
    window and FP8 KV (run in the query's dtype); FlashInfer sinks."""
    fi = peer == "flashinfer"
    a = []
    if r.get("alibi") and not fi:
        a.append("no alibi")
    if r["softcap"] and not fi:
        a.append("no softcap")
    if r["sinks"]:
        a.append("no sinks")
    if r["window"] and r["n_prefill"] and not fi:
        a.append("no window in prefill")
    if r["kv_dtype"] not in DT and r["kv_dtype"] != "auto" and not (fi and r["kv_dtype"] in FP8):
        a.append(f"{r['dtype']} KV, not {r['kv_dtype']}")  # auto: the query's dtype
    return a


def heads_and_sizes(r):
    """(query heads, KV heads, qk size, v size) the step attends with: a row
    that ran the layer's ragged prefill form (DeepSeek's 192 / 128 over 128
    KV heads) has the form's."""
    if r.get("ragged"):
        hq, hk = (int(x) for x in r["ragged_heads"].split("/"))
        return hq, hk, r["ragged_qk"], r["ragged_v"]
    hq, hk = (int(x) for x in r["heads"].split("/"))
    return hq, hk, r["qk_head_size"], r["v_head_size"]


def sdpa_step(r, backend, reps, batch):
    dt = DT.get(r["dtype"], torch.bfloat16)
    hq, hk, dq, dv = heads_and_sizes(r)
    calls = []
    if r["n_decode"]:
        ctx = r["decode_context"] + 1
        if r["window"]:
            ctx = min(ctx, r["window"])  # a decode's window: exactly the last W keys
        n = r["n_decode"]
        q = torch.randn(n, hq, 1, dq, device="cuda", dtype=dt)
        k = torch.randn(n, hk, ctx, dq, device="cuda", dtype=dt)
        v = torch.randn(n, hk, ctx, dv, device="cuda", dtype=dt)
        calls.append((q, k, v, None, False))
    if r["n_prefill"]:
        n, L, c = r["n_prefill"], r["prefill_len"], r["prefill_context"]
        q = torch.randn(n, hq, L, dq, device="cuda", dtype=dt)
        k = torch.randn(n, hk, c + L, dq, device="cuda", dtype=dt)
        v = torch.randn(n, hk, c + L, dv, device="cuda", dtype=dt)
        mask, causal = None, r["causal"]
        if causal and c:
            from torch.nn.attention.bias import causal_lower_right
            mask, causal = causal_lower_right(L, c + L), False
        calls.append((q, k, v, mask, causal))

    def one(q, k, v, mask, causal):
        gqa = q.shape[1] != k.shape[1]
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                      enable_gqa=gqa)

    fns = [one(*c) for c in calls]
    with sdpa_kernel([BACKENDS[backend]]):
        for fn in fns:
            fn()  # raises when the backend refuses the shape
        return median_ms(lambda: [fn() for fn in fns], reps, warmup=3, batch=batch)


def paged_pool(n, seq, page, *shape, dt):
    """A pool of n requests' pages in a random order: the cache tensors of
    `shape` per token, their page indices, indptr and last-page lengths."""
    pages = (seq + page - 1) // page
    caches = [torch.randn(n * pages, page, *s, device="cuda").to(dt) for s in shape]
    indices = torch.randperm(n * pages, device="cuda", dtype=torch.int32)
    indptr = torch.arange(n + 1, device="cuda", dtype=torch.int32) * pages
    last = torch.full((n,), seq - (pages - 1) * page, device="cuda", dtype=torch.int32)
    return caches, indices, indptr, last


def flashinfer_mla_step(fi, ws, r, reps, batch):
    """The absorbed MLA form (latent v_head_size wide, rotary the rest of
    qk) through BatchMLAPagedAttentionWrapper: decode, a prefill over its
    cached tokens, or both back to back."""
    dt = DT.get(r["dtype"], torch.bfloat16)
    kvdt = FP8.get(r["kv_dtype"], dt)
    hq = int(r["heads"].split("/")[0])
    ckv, kpe, page = r["v_head_size"], r["qk_head_size"] - r["v_head_size"], r["block_size"]
    # an FP8 cache's dequantisation scales (FlashInfer requires them)
    scales = {"ckv_scale": 1.0, "kpe_scale": 1.0} if kvdt in FP8.values() else {}
    fns = []
    parts = [(r["n_decode"], 1, r["decode_context"] + 1, ws[0])] if r["n_decode"] else []
    if r["n_prefill"]:
        L = r["prefill_len"]
        parts.append((r["n_prefill"], L, r["prefill_context"] + L, ws[1]))
    for n, q_len, seq, buf in parts:
        (c_cache, p_cache), indices, indptr, _ = paged_pool(n, seq, page, (ckv,), (kpe,), dt=kvdt)
        qo = torch.arange(n + 1, device="cuda", dtype=torch.int32) * q_len
        lens = torch.full((n,), seq, device="cuda", dtype=torch.int32)
        w = fi.BatchMLAPagedAttentionWrapper(buf)
        w.plan(qo, indptr, indices, lens, hq, ckv, kpe, page, r["causal"],
               r["qk_head_size"] ** -0.5, dt, kvdt)
        qn = torch.randn(n * q_len, hq, ckv, device="cuda", dtype=dt)
        qp = torch.randn(n * q_len, hq, kpe, device="cuda", dtype=dt)
        fns.append(lambda w=w, qn=qn, qp=qp, c=c_cache, p=p_cache: w.run(qn, qp, c, p, **scales))
    return median_ms(lambda: [fn() for fn in fns], reps, warmup=3, batch=batch)


def flashinfer_ragged_step(fi, ws, r, reps, batch):
    """A prefill over packed (ragged) K/V, each request's cached context and
    new tokens, as the layer's ragged form runs it (causal, bottom-right)."""
    dt = DT.get(r["dtype"], torch.bfloat16)
    hq, hk, dq, dv = heads_and_sizes(r)
    n, L, c = r["n_prefill"], r["prefill_len"], r["prefill_context"]
    qo = torch.arange(n + 1, device="cuda", dtype=torch.int32) * L
    kvp = torch.arange(n + 1, device="cuda", dtype=torch.int32) * (c + L)
    w = fi.BatchPrefillWithRaggedKVCacheWrapper(ws[1], "NHD")
    w.plan(qo, kvp, hq, hk, dq, head_dim_vo=dv, causal=r["causal"], q_data_type=dt)
    q = torch.randn(n * L, hq, dq, device="cuda", dtype=dt)
    k = torch.randn(n * (c + L), hk, dq, device="cuda", dtype=dt)
    v = torch.randn(n * (c + L), hk, dv, device="cuda", dtype=dt)
    return median_ms(lambda: w.run(q, k, v), reps, warmup=3, batch=batch)


def flashinfer_step(fi, ws, r, reps, batch):
    """ws: two workspaces, the decode wrapper's and the prefill wrapper's."""
    if r.get("ragged"):
        return flashinfer_ragged_step(fi, ws, r, reps, batch)
    if r["mla"]:
        return flashinfer_mla_step(fi, ws, r, reps, batch)
    dt = DT.get(r["dtype"], torch.bfloat16)
    kvdt = FP8.get(r["kv_dtype"], dt)
    hq, hk = (int(x) for x in r["heads"].split("/"))
    d, page = r["qk_head_size"], r.get("block_size") or 16
    window_left = r["window"] - 1 if r["window"] else -1
    cap = float(r["softcap"]) if r["softcap"] else 0.0
    pos = "ALIBI" if r.get("alibi") else "NONE"
    fns = []

    def paged(n, seq):
        (kc, vc), indices, indptr, last = paged_pool(n, seq, page, (hk, d), (hk, d), dt=kvdt)
        return kc, vc, indices, indptr, last

    if r["n_decode"]:
        n = r["n_decode"]
        kc, vc, indices, indptr, last = paged(n, r["decode_context"] + 1)
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws[0], "NHD", use_tensor_cores=hq // hk >= 4)
        w.plan(indptr, indices, last, hq, hk, d, page, window_left=window_left,
               logits_soft_cap=cap, pos_encoding_mode=pos, q_data_type=dt, kv_data_type=kvdt)
        q = torch.randn(n, hq, d, device="cuda", dtype=dt)
        fns.append(lambda w=w, q=q, kc=kc, vc=vc: w.run(q, (kc, vc)))
    if r["n_prefill"]:
        n, L, c = r["n_prefill"], r["prefill_len"], r["prefill_context"]
        kc, vc, indices, indptr, last = paged(n, c + L)
        qo = torch.arange(n + 1, device="cuda", dtype=torch.int32) * L
        w2 = fi.BatchPrefillWithPagedKVCacheWrapper(ws[1], "NHD")
        w2.plan(qo, indptr, indices, last, hq, hk, d, page, causal=r["causal"],
                window_left=window_left, logits_soft_cap=cap, pos_encoding_mode=pos, q_data_type=dt,
                kv_data_type=kvdt)
        q = torch.randn(n * L, hq, d, device="cuda", dtype=dt)
        fns.append(lambda w=w2, q=q, kc=kc, vc=vc: w.run(q, (kc, vc)))
    return median_ms(lambda: [fn() for fn in fns], reps, warmup=3, batch=batch)


def warm(fi, ws, rows):
    """FlashInfer builds a kernel the first time a configuration runs; the
    lengths do not select kernels, so each row runs once, shrunk."""
    for r in rows:
        small = dict(r, n_decode=min(r["n_decode"], 2), decode_context=min(r["decode_context"], 200),
                     n_prefill=min(r["n_prefill"], 2), prefill_len=min(r["prefill_len"], 100),
                     prefill_context=min(r["prefill_context"], 100))
        try:
            flashinfer_step(fi, ws, small, 1, 1)
            print(f"# warm {r['spec']} {r['step']}: ok", file=sys.stderr, flush=True)
        except Exception as e:
            print(f"# warm {r['spec']} {r['step']}: {refusal(e)}", file=sys.stderr, flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", help="attnhost bench --model M --json outputs")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--warm-flashinfer", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device", "peers": []}))
        return 77
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peers": []}
    fi = None
    if not args.no_flashinfer:
        try:
            import flashinfer as fi
            out["flashinfer"] = fi.__version__
        except Exception as e:  # not carried in: SDPA only
            out["flashinfer"] = f"not available: {refusal(e)}"
    ws = [torch.zeros(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(2)] if fi else None
    if args.warm_flashinfer:
        return warm(fi, ws, rows_of(args.files)) if fi else 1
    read, _ = hbm_gbps()
    out["ceilings"] = {"hbm_read_gbs": round(read, 1), "bf16_matmul_tflops": round(tensor_tflops(), 1)}
    for r in rows_of(args.files):
        base = {"model": r["model"], "spec": r["spec"], "step": r["step"]}
        peers = [("sdpa-cudnn", lambda r=r: sdpa_step(r, "cudnn", args.reps, args.batch)),
                 ("sdpa-fa2", lambda r=r: sdpa_step(r, "flash", args.reps, args.batch))]
        if fi:
            peers.append(("flashinfer", lambda r=r: flashinfer_step(fi, ws, r, args.reps, args.batch)))
        for name, fn in peers:
            row = dict(base, peer=name)
            try:
                row["median_ms"] = round(fn(), 4)
                a = approximations(r, name)
                if a:
                    row["approx"] = ", ".join(a)
            except Exception as e:  # the peer refuses the shape: say why, go on
                row["skipped"] = refusal(e)
            out["peers"].append(row)
            print(f"# {r['model']} {r['spec']} {r['step']} {name}: "
                  f"{row.get('median_ms', row.get('skipped'))}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
