#!/usr/bin/env python3
"""One table of the zoo: model x layer spec x step, with the time of the
default binding (its plugins, the cache's block size it resolved, for a
mixed step whether it split the step between them, and the plugin of a
ragged prefill form where the step ran one), of each plugin
forced, and of each peer, the default's fraction of the ceilings
zoo_peers.py measured (HBM read for a decode, dense bf16 matmul for a
prefill; the highest of several --peers files; the HBM read at least the
rate the fastest peer of the same bytes reached on a decode step), and the ratio of the default to the best peer (below 1:
attnhost's default is faster); where no peer computed the step exactly,
the ratio to the best peer that did the same work less a per-score feature
(sinks, soft-cap, ALiBi), marked *.

    python3 bench/zoo_table.py zoo-*.json [--peers peers.json ...] [--metric ms|tflops|gbs]

Inputs: `attnhost bench --model M --json` outputs and the JSON of
bench/peers/zoo_peers.py. A peer row that only approximates the step
(soft-cap, sinks, ALiBi or a prefill window left out) is marked *; one that
refused the shape is "-". A bench output cut short by a time limit keeps
its whole rows (stderr says so). Prints Markdown.
"""
import argparse
import json
import sys


def of_ceiling(rates, ceil):
    """The default's GB/s over the HBM read rate for a step with decodes,
    its TFLOP/s over the matmul rate for one with prefills."""
    if not rates or not ceil or rates[0] is None:
        return ""
    gbs, tflops, n_dec, n_pre = rates
    out = []
    if n_dec:
        out.append(f"{100 * gbs / ceil['hbm_read_gbs']:.0f}% HBM")
    if n_pre:
        out.append(f"{100 * tflops / ceil['bf16_matmul_tflops']:.0f}% MMA")
    return ", ".join(out)


# What a peer may leave out and still do the step's work: per-score
# features. A window or another KV dtype changes the work or the bytes.
SAME_WORK = {"no sinks", "no softcap", "no alibi"}


def same_work(approx):
    return all(a.strip() in SAME_WORK for a in approx.split(","))


def load_bench(path):
    """An `attnhost bench --json` document. One cut short (the bench stopped
    by a time limit mid-row) keeps its whole rows, one a line, and says so
    on stderr."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        cut = e
    lines = text.splitlines()
    try:
        head = json.loads(lines[0].split('"results"')[0] + '"results": []}')
    except (IndexError, json.JSONDecodeError):
        raise SystemExit(f"zoo_table: {path}: not an `attnhost bench --json` output ({cut})")
    rows = []
    for line in lines[1:]:
        try:
            rows.append(json.loads(line.strip().rstrip(",")))
        except json.JSONDecodeError:
            break
    print(f"zoo_table: {path} is cut short ({cut.msg}, line {cut.lineno}); "
          f"its {len(rows)} whole rows kept", file=sys.stderr)
    head["results"] = rows
    return head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--peers", action="append", default=[])
    args = ap.parse_args()
    rows, order, plugins = {}, [], []
    ceilings = []
    for path in args.files:
        doc = load_bench(path)
        if "bw_ceiling_gbs" in doc:  # a document cut short has none
            ceilings.append(f"{doc.get('model', path)}: {doc['bw_ceiling_gbs']:.0f} GB/s")
        for r in doc["results"]:
            key = (r["model"], r["spec"], r["step"])
            if key not in rows:
                rows[key] = {"layers": r["layers"], "attnhost": {}, "peers": {}, "default": None}
                order.append(key)
            cell = f"{r['median_ms']:.3f}" if "median_ms" in r else "-"
            if r["backend"] == "default":
                rows[key]["default"] = r.get("median_ms")
                rows[key]["rates"] = (r.get("gbs"), r.get("tflops"), r["n_decode"], r["n_prefill"])
                mixed = {True: ", split", False: ", whole"}.get(r.get("split"), "")
                ragged = f", ragged on {r['ragged_plugin']}" if r.get("ragged_plugin") else ""
                rows[key]["bind"] = (f"{r['prefill_plugin']}/{r['decode_plugin']}, "
                                     f"block {r.get('block_size', '?')}{mixed}{ragged}")
                rows[key]["default_cell"] = cell
            else:
                rows[key]["attnhost"][r["backend"]] = cell
                if r["backend"] not in plugins:
                    plugins.append(r["backend"])
    peers, device, ceil = [], "", {}
    for path in args.peers:
        with open(path) as f:
            doc = json.load(f)
        device = doc.get("device", device)
        # several calls' peers: a ceiling is the highest rate any of them measured
        for k, v in doc.get("ceilings", {}).items():
            ceil[k] = max(ceil.get(k, 0), v)
        for p in doc.get("peers", []):
            key = (p["model"], p["spec"], p["step"])
            if key not in rows:
                continue
            if p["peer"] not in peers:
                peers.append(p["peer"])
            ms = p.get("median_ms")
            rows[key]["peers"][p["peer"]] = (ms, p.get("approx"))
    # A decode kernel that reads faster than the peers' synthetic reader
    # (torch's sum) shows the ceiling is at least its rate: the HBM figure is
    # the highest of that reader's and the fastest peer's on a decode step
    # (the default's byte count over the peer's time; a peer that left out
    # only a per-score feature reads the same bytes).
    fastest = None
    for key in order:
        r = rows[key]
        gbs, _, _, n_pre = r.get("rates") or (None, None, 0, 1)
        if gbs is None or n_pre or not r["default"]:
            continue
        for p, (ms, approx) in r["peers"].items():
            same = not approx or same_work(approx)
            if ms and same and (fastest is None or gbs * r["default"] / ms > fastest[0]):
                fastest = (gbs * r["default"] / ms, p, key)
    reader = ceil.get("hbm_read_gbs")
    if ceil and fastest and fastest[0] > (reader or 0):
        ceil["hbm_read_gbs"] = fastest[0]
    plugins.sort()  # one column order, whichever file came first
    head = ["model", "spec (layers)", "step", "default (prefill/decode, block)"] + plugins + \
        peers + ["default, of ceiling", "default / best peer"]
    print(f"zoo: median ms per step{', ' + device if device else ''}; "
          f"bandwidth ceilings {'; '.join(ceilings)}")
    if ceil:
        src = ""
        if reader is not None and ceil["hbm_read_gbs"] > reader:
            src = (f" ({fastest[1]}'s decode of {fastest[2][0]} {fastest[2][2]}; "
                   f"the read kernel {reader:.0f})")
        print(f"ceilings measured with the peers: HBM read {ceil['hbm_read_gbs']:.0f} GB/s{src}, "
              f"dense bf16 matmul {ceil['bf16_matmul_tflops']:.0f} TFLOP/s")
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for key in order:
        r = rows[key]
        cells = [key[0], f"{key[1]} ({r['layers']})", key[2],
                 f"{r.get('default_cell', '-')} ({r.get('bind', '?')})"]
        cells += [r["attnhost"].get(p, "") for p in plugins]
        best = {False: None, True: None}  # the fastest exact and approximate peer
        for p in peers:
            ms, approx = r["peers"].get(p, (None, None))
            cells.append("-" if ms is None else f"{ms:.3f}{'*' if approx else ''}")
            if ms is None or (approx and not same_work(approx)):
                continue
            if best[bool(approx)] is None or ms < best[bool(approx)]:
                best[bool(approx)] = ms
        cells.append(of_ceiling(r.get("rates"), ceil))
        approx = best[False] is None
        ref = best[approx]
        cells.append(f"{r['default'] / ref:.2f}{'*' if approx else ''}"
                     if ref and r["default"] else "")
        print("| " + " | ".join(cells) + " |")
    if peers:
        print("\n* the peer left out a feature it cannot express (soft-cap, sinks, ALiBi, a "
              "prefill window, FP8 KV); in the ratio, marked *, only where no peer computed "
              "the step exactly and this one left out only sinks, soft-cap or ALiBi")
    return 0


if __name__ == "__main__":
    sys.exit(main())
