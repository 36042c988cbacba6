#!/usr/bin/env python3
"""Summary of one run_gpu.sh session: reads the logs under the given
directory (steps.txt, check.log, check_f8c.log, attnhost_check*.log (default and fp8_compute off),
bench.log, peers.log) and prints the verdicts and tables for d128 prefill
(bf16 KV, fp8 KV widened, fp8 KV with FP8 compute, SDPA cuDNN), d64 and
d256 prefill (bf16 KV against cuDNN) and decode (bf16 KV, fp8 KV both ways,
HBM read bandwidth). Missing logs or rows print as '-' rather than failing,
so a partial run still summarises."""
import os
import re
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/fa3_out"


def read(name):
    try:
        with open(os.path.join(out, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def fmt(x, spec="7.1f"):
    return format(x, spec) if isinstance(x, float) else "-".rjust(int(spec.split(".")[0] or 1))


print("=" * 78)
print("cuda_fa3 summary", read("commit.txt").strip())
for line in read("steps.txt").splitlines():
    print("  step:", line)
m = re.search(r"(\d+) of (\d+) cases passed", read("check.log"))
print("  fa3_check:", f"{m.group(1)} of {m.group(2)} cases passed" if m else "no verdict (see check.log)")
fails = [l.strip() for l in read("check.log").splitlines() if "FAIL" in l or "DIFFER" in l]
for l in fails[:8]:
    print("    ", l)
m = re.search(r"(\d+) of (\d+) cases passed", read("check_f8c.log"))
print("  fa3_check FP8 math (fp8kv):", f"{m.group(1)} of {m.group(2)} cases passed" if m else "no verdict")
for l in [l.strip() for l in read("check_f8c.log").splitlines() if "FAIL" in l][:6]:
    print("    ", l)
for name in ("attnhost_check.log", "attnhost_check_f8off.log"):
    ac = [l for l in read(name).splitlines() if re.search(r"passed|failed", l)]
    print(f"  {name[:-4]}:", ac[-1].strip() if ac else f"no verdict (see {name})")

fa3 = {}  # (kind, kv, L, causal) -> (ms, tflops, gbs)
for l in read("bench.log").splitlines():
    m = re.match(r"RESULT fa3 (\w+)\s+(\w+)\s+d(\d+).*?kv (\d+)\s+(\w+)\s+([\d.]+) ms\s+([\d.]+) TFLOP/s\s+([\d.]+) GB/s", l)
    if m and m.group(3) == "128":
        fa3[(m.group(1), m.group(2), int(m.group(4)), m.group(5))] = tuple(float(m.group(i)) for i in (6, 7, 8))
    if m:
        fa3[(m.group(1), m.group(2), int(m.group(4)), m.group(5), int(m.group(3)))] = tuple(
            float(m.group(i)) for i in (6, 7, 8))
peer = {}
hbm = None
for l in read("peers.log").splitlines():
    m = re.match(r"RESULT sdpa-(\w+)\s+prefill d(\d+) .*?L (\d+)\s+(\w+)\s+([\d.]+) ms\s+([\d.]+) TFLOP/s", l)
    if m:
        peer[("prefill", m.group(1), int(m.group(3)), m.group(4), int(m.group(2)))] = float(m.group(6))
        if m.group(2) == "128":
            peer[("prefill", m.group(1), int(m.group(3)), m.group(4))] = float(m.group(6))
    m = re.match(r"RESULT sdpa-(\w+)\s+decode d128 .*?kv (\d+)\s+([\d.]+) ms", l)
    if m:
        peer[("decode", m.group(1), int(m.group(2)))] = float(m.group(3))
    m = re.match(r"RESULT hbm read-only .*?([\d.]+) GB/s", l)
    if m:
        hbm = float(m.group(1))

print("\nprefill d128, bf16 queries, TFLOP/s (ratios to SDPA cuDNN bf16 and to fa3 bf16 KV)")
print(f"  {'shape':<10} {'bf16KV':>7} {'fp8KV':>7} {'fp8cmp':>7} {'cuDNN':>7} {'bf16/cuDNN':>10}"
      f" {'fp8KV/bf16':>10} {'fp8cmp/bf16':>11} {'fp8cmp/cuDNN':>12}")
for causal in ("causal", "noncausal"):
    for L in (4096, 8192, 16384):
        b, f, c8 = (fa3.get(("prefill", kv, L, causal)) for kv in ("bf16", "kv8", "f8c"))
        c = peer.get(("prefill", "cudnn", L, causal))
        bt, ft, ct = (x[1] if x else None for x in (b, f, c8))
        r = lambda a, d: a / d if a and d else None
        print(f"  {causal[:6] + ' ' + str(L // 1024) + 'k':<10} {fmt(bt)} {fmt(ft)} {fmt(ct)} {fmt(c)}"
              f" {fmt(r(bt, c), '10.2f')} {fmt(r(ft, bt), '10.2f')} {fmt(r(ct, bt), '11.2f')} {fmt(r(ct, c), '12.2f')}")

for d in (64, 256):
    print(f"\nprefill d{d}, bf16, TFLOP/s (ratio to SDPA cuDNN of this call)")
    for causal in ("causal", "noncausal"):
        cells = []
        for L in (4096, 8192, 16384):
            b = fa3.get(("prefill", "bf16", L, causal, d))
            c = peer.get(("prefill", "cudnn", L, causal, d))
            bt = b[1] if b else None
            cells.append(f"{L // 1024}k {fmt(bt, '6.1f')} / {fmt(c, '6.1f')} = {fmt(bt / c if bt and c else None, '4.2f')}")
        print(f"  {causal:<10} " + "   ".join(cells))

print(f"\ndecode B64 GQA 32/8 d128 page 16: ms (KV GB/s, % of HBM read {fmt(hbm, '.0f').strip()} GB/s)")
print(f"  {'kv len':<8} {'fa3 bf16KV':>22} {'fa3 fp8KV':>22} {'fa3 fp8 compute':>22} {'fp8 speedup':>11} {'cuDNN bf16 contig':>17}")
for L in (4096, 8192, 16384):
    cells = []
    for kv in ("bf16", "kv8", "f8c"):
        r = fa3.get(("decode", kv, L, "causal"))
        if r:
            pct = f"{100 * r[2] / hbm:3.0f}%" if hbm else "  -"
            cells.append(f"{r[0]:7.3f} ({r[2]:6.0f}, {pct})")
        else:
            cells.append("-")
    b, f = fa3.get(("decode", "bf16", L, "causal")), fa3.get(("decode", "kv8", L, "causal"))
    sp = b[0] / f[0] if b and f else None
    c = peer.get(("decode", "cudnn", L))
    print(f"  {L:<8} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22} {fmt(sp, '11.2f')} {fmt(c, '17.3f')}")
print("=" * 78)
