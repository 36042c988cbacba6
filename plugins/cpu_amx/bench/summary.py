"""Summary table of one device_run.sh session (cpu_amx on the Xeon).

Reads the logs device_run.sh wrote (cpu_amx_bench lines and the PyTorch
peer's lines, both `key=value` formatted) and prints, per shape, the
plugin's figure, its fraction of the measured ceiling, PyTorch CPU SDPA's
best figure on the same shape, and the ratio; then the targets (decode >=
80% of DRAM read, prefill >= 2x PyTorch) as met / not met / not measured.

Usage: python3 summary.py OUT_DIR
"""
import glob
import os
import sys


def fields(line):
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, _, v = tok.partition("=")
            out[k] = v
    return out


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    dram = amx_peak = None
    dec, pre = {}, {}  # (variant, shape) -> figure
    for path in sorted(glob.glob(os.path.join(out, "bench_*.log"))):
        for line in read(path):
            f = fields(line)
            if line.startswith("peak dram_read"):
                dram = float(f["GB/s"])
            elif line.startswith("peak amx_bf16"):
                amx_peak = float(f["GFLOP/s"])
            elif line.startswith("decode "):
                var = f["path"] + ("/" + f["set"] if "set" in f else "")
                dec[(var, (int(f["B"]), int(f["ctx"])))] = float(f["GB/s"])
            elif line.startswith("prefill "):
                var = f["path"] + ("/" + f["set"] if "set" in f else "")
                pre[(var, int(f["T"]))] = float(f["GFLOP/s"])
    for line in read(os.path.join(out, "torch.log")):
        f = fields(line)
        if line.startswith("torch decode") and f.get("variant") == "best":
            dec[("torch", (int(f["B"]), int(f["ctx"])))] = float(f["GB/s"])
        elif line.startswith("torch prefill") and f.get("variant") == "best":
            pre[("torch", int(f["T"]))] = float(f["GFLOP/s"])

    def fmt(x, spec="%.1f"):
        return spec % x if x is not None else "-"

    print("ceilings: DRAM read %s GB/s, AMX-BF16 %s GFLOP/s" % (fmt(dram), fmt(amx_peak, "%.0f")))
    dvars = sorted({v for v, _ in dec if v != "torch"})
    print("\n| decode B:ctx | " + " | ".join("%s GB/s (of DRAM)" % v for v in dvars) + " | torch GB/s | best/torch |")
    print("|---" * (len(dvars) + 3) + "|")
    verdict_dec = []
    for shape in sorted({s for _, s in dec}):
        cells, best = [], None
        for v in dvars:
            x = dec.get((v, shape))
            cells.append("%s (%s)" % (fmt(x), fmt(x / dram if x and dram else None, "%.2f")))
            if x is not None and (best is None or x > best):
                best = x
        t = dec.get(("torch", shape))
        main_fig = dec.get(("amx", shape))
        if main_fig is not None and dram:
            verdict_dec.append(main_fig / dram)
        print("| %d:%d | %s | %s | %s |" % (shape[0], shape[1], " | ".join(cells), fmt(t),
                                          fmt(best / t if best and t else None, "%.2fx")))
    pvars = sorted({v for v, _ in pre if v != "torch"})
    print("\n| prefill T | " + " | ".join("%s GFLOP/s (of AMX)" % v for v in pvars) + " | torch GFLOP/s | amx/torch |")
    print("|---" * (len(pvars) + 3) + "|")
    verdict_pre = []
    for T in sorted({t for _, t in pre}):
        cells = []
        for v in pvars:
            x = pre.get((v, T))
            cells.append("%s (%s)" % (fmt(x), fmt(x / amx_peak if x and amx_peak else None, "%.2f")))
        t, a = pre.get(("torch", T)), pre.get(("amx", T))
        if a and t:
            verdict_pre.append(a / t)
        print("| %d | %s | %s | %s |" % (T, " | ".join(cells), fmt(t), fmt(a / t if a and t else None, "%.2fx")))
    print("\ntargets:")
    ndec, npre = len({s for v, s in dec if v != "torch"}), len({t for v, t in pre if v != "torch"})
    target("decode (amx path, default kernel) >= 0.80 of DRAM read", "decode >= 0.80 of DRAM read",
           verdict_dec, 0.8, "%.2f", ndec, "measured")
    target("prefill (amx) >= 2x PyTorch CPU SDPA", "prefill >= 2x PyTorch CPU SDPA",
           verdict_pre, 2, "%.2fx", npre, "compared")


def target(name, short, ratios, goal, ratio_fmt, n, done):
    """One target line: met when the lowest ratio reaches goal."""
    if not ratios:
        print("  %s: not measured" % short)
        return
    lo = min(ratios)
    print("  %s: %s (lowest %s, %d of %d shapes %s)"
          % (name, "met" if lo >= goal else "NOT met", ratio_fmt % lo, len(ratios), n, done))


if __name__ == "__main__":
    main()
