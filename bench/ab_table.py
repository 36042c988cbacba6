#!/usr/bin/env python3
"""Before and after: the rows of `attnhost bench --json` outputs of two
builds, timed in alternation, as one table. Each row (model, layer spec,
step, backend) gets the median of its per-round medians on each side, their
range, and after / before (below 1: the change is faster); a closing line
counts the rows faster, level (within --level) and slower, with the
geometric mean of the ratios.

    python3 bench/ab_table.py --before base_r1.json base_r2.json \\
        --after new_r1.json new_r2.json [--backend P] [--level 0.02]

--backend keeps one backend's rows (a plugin's name, or "default"). A row
one side lacks is left out and named on stderr. A bench output cut short
by a time limit keeps its whole rows (zoo_table.load_bench). Prints
Markdown.
"""
import argparse
import math
import statistics
import sys

from zoo_table import load_bench


def medians(paths, backend):
    """(model, spec, step, backend) -> the row's median_ms in each file."""
    out = {}
    for path in paths:
        for r in load_bench(path).get("results", []):
            if r.get("median_ms") is None or (backend and r.get("backend") != backend):
                continue
            key = (r.get("model", ""), r.get("spec", ""), r["step"], r.get("backend", ""))
            out.setdefault(key, []).append(r["median_ms"])
    return out


def cell(ms):
    m = statistics.median(ms)
    return f"{m:.4f}" if len(ms) == 1 else f"{m:.4f} ({min(ms):.4f}-{max(ms):.4f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", nargs="+", required=True)
    ap.add_argument("--after", nargs="+", required=True)
    ap.add_argument("--backend", default="")
    ap.add_argument("--level", type=float, default=0.02,
                    help="a ratio within 1 +- this counts as level")
    args = ap.parse_args()
    before, after = medians(args.before, args.backend), medians(args.after, args.backend)
    for key in sorted(set(before) ^ set(after)):
        side = "before" if key in before else "after"
        print(f"ab_table: {' '.join(key)} only {side}; left out", file=sys.stderr)
    keys = [k for k in before if k in after]  # the order the bench printed them
    if not keys:
        raise SystemExit("ab_table: no row is on both sides")
    print("| model | spec | step | backend | before ms | after ms | after / before |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for k in keys:
        r = statistics.median(after[k]) / statistics.median(before[k])
        ratios.append(r)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {cell(before[k])} | {cell(after[k])} | "
              f"{r:.3f} |")
    faster = sum(r < 1 - args.level for r in ratios)
    slower = sum(r > 1 + args.level for r in ratios)
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"\n{len(ratios)} rows: {faster} faster, {len(ratios) - faster - slower} level "
          f"(within {100 * args.level:g}%), {slower} slower; after / before "
          f"{min(ratios):.3f}-{max(ratios):.3f}, geometric mean {geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
