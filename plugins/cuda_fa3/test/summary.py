#!/usr/bin/env python3
"""Summary of one run_gpu.sh session: reads the logs under the given
directory (steps.txt, check.log, attnhost_check.log, bench.log, peers.log)
and prints the verdicts and one table each for d128 prefill (bf16 KV, fp8
KV, SDPA cuDNN) and decode (bf16 KV, fp8 KV, HBM read bandwidth). Missing
logs or rows print as '-' rather than failing, so a partial run still
summarises."""
import os
import re
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/fa3_out")


def read(name):
    try:
        with open(os.path.join(out, name), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def fmt(x, spec="7.1f"):
    return format(x, spec) if isinstance(x, float) else "-".rjust(int(spec.split(".")[0]))


print("=" * 78)
print("cuda_fa3 summary", read("commit.txt").strip())
for line in read("steps.txt").splitlines():
    print("  step:", line)
m = re.search(r"(\d+) of (\d+) cases passed", read("check.log"))
print("  fa3_check:", f"{m.group(1)} of {m.group(2)} cases passed" if m else "no verdict (see check.log)")
fails = [l.strip() for l in read("check.log").splitlines() if "FAIL" in l or "DIFFER" in l]
for l in fails[:8]:
    print("    ", l)
ac = [l for l in read("attnhost_check.log").splitlines() if re.search(r"passed|failed", l)]
print("  attnhost check:", ac[-1].strip() if ac else "no verdict (see attnhost_check.log)")

fa3 = {}  # (kind, kv, L, causal) -> (ms, tflops, gbs)
for l in read("bench.log").splitlines():
    m = re.match(r"RESULT fa3 (\w+)\s+(\w+)\s+d(\d+).*?kv (\d+)\s+(\w+)\s+([\d.]+) ms\s+([\d.]+) TFLOP/s\s+([\d.]+) GB/s", l)
    if m and m.group(3) == "128":
        fa3[(m.group(1), m.group(2), int(m.group(4)), m.group(5))] = tuple(float(m.group(i)) for i in (6, 7, 8))
peer = {}
hbm = None
for l in read("peers.log").splitlines():
    m = re.match(r"RESULT sdpa-(\w+)\s+prefill d128 .*?L (\d+)\s+(\w+)\s+([\d.]+) ms\s+([\d.]+) TFLOP/s", l)
    if m:
        peer[("prefill", m.group(1), int(m.group(2)), m.group(3))] = float(m.group(5))
    m = re.match(r"RESULT sdpa-(\w+)\s+decode d128 .*?kv (\d+)\s+([\d.]+) ms", l)
    if m:
        peer[("decode", m.group(1), int(m.group(2)))] = float(m.group(3))
    m = re.match(r"RESULT hbm read-only .*?([\d.]+) GB/s", l)
    if m:
        hbm = float(m.group(1))

print("\nprefill d128, bf16 queries, TFLOP/s (ratio to SDPA cuDNN bf16)")
print(f"  {'shape':<16} {'fa3 bf16KV':>10} {'fa3 fp8KV':>10} {'cuDNN':>8} {'bf16/cuDNN':>10} {'fp8/cuDNN':>9} {'fp8/bf16':>8}")
for causal in ("causal", "noncausal"):
    for L in (4096, 8192, 16384):
        b = fa3.get(("prefill", "bf16", L, causal))
        f = fa3.get(("prefill", "kv8", L, causal))
        c = peer.get(("prefill", "cudnn", L, causal))
        bt, ft = (b[1] if b else None), (f[1] if f else None)
        r1 = bt / c if bt and c else None
        r2 = ft / c if ft and c else None
        r3 = ft / bt if ft and bt else None
        print(f"  {causal[:6] + ' ' + str(L // 1024) + 'k':<16} {fmt(bt, '10.1f')} {fmt(ft, '10.1f')} {fmt(c, '8.1f')}"
              f" {fmt(r1, '10.2f')} {fmt(r2, '9.2f')} {fmt(r3, '8.2f')}")

print(f"\ndecode B64 GQA 32/8 d128 page 16: ms (KV GB/s, % of HBM read {fmt(hbm, '.0f').strip()} GB/s)")
print(f"  {'kv len':<8} {'fa3 bf16KV':>22} {'fa3 fp8KV':>22} {'fp8 speedup':>11} {'cuDNN bf16 contig':>17}")
for L in (4096, 8192, 16384):
    cells = []
    for kv in ("bf16", "kv8"):
        r = fa3.get(("decode", kv, L, "causal"))
        if r:
            pct = f"{100 * r[2] / hbm:3.0f}%" if hbm else "  -"
            cells.append(f"{r[0]:7.3f} ({r[2]:6.0f}, {pct})")
        else:
            cells.append("-")
    b, f = fa3.get(("decode", "bf16", L, "causal")), fa3.get(("decode", "kv8", L, "causal"))
    sp = b[0] / f[0] if b and f else None
    c = peer.get(("decode", "cudnn", L))
    print(f"  {L:<8} {cells[0]:>22} {cells[1]:>22} {fmt(sp, '11.2f')} {fmt(c, '17.3f')}")
print("=" * 78)
