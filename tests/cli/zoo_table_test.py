#!/usr/bin/env python3
"""bench/zoo_table.py's ratio column: against the fastest exact peer; where
no peer computed the step exactly, against one that left out only a
per-score feature (marked *); else none. The binding column names the
plugin of a ragged prefill form where the step ran one."""
import json
import os
import subprocess
import sys
import tempfile

TABLE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "zoo_table.py")


def row(step, ms):
    return {"model": "m", "spec": "s", "layers": 2, "step": step, "backend": "default",
            "median_ms": ms, "gbs": 1000.0, "tflops": 100.0, "n_decode": 0, "n_prefill": 1,
            "prefill_plugin": "a", "decode_plugin": "b", "block_size": 64}


def peer(step, name, ms, approx=None):
    p = {"model": "m", "spec": "s", "step": step, "peer": name, "median_ms": ms}
    if approx:
        p["approx"] = approx
    return p


def main():
    ragged = dict(row("ragged", 2.0), ragged=True, ragged_plugin="c")
    bench = {"model": "m", "bw_ceiling_gbs": 3000.0,
             "results": [row("exact", 1.0), row("sinks", 0.8), row("window", 0.1), ragged]}
    peers = {"device": "test", "ceilings": {"hbm_read_gbs": 3000.0, "bf16_matmul_tflops": 700.0},
             "peers": [peer("exact", "p1", 2.0), peer("exact", "p2", 0.5, "no sinks"),
                       peer("sinks", "p1", 1.0, "no sinks, no softcap"),
                       peer("sinks", "p2", 2.0, "no sinks"),
                       peer("window", "p1", 1.0, "no sinks, no window in prefill")]}
    # a second call's peers measured lower ceilings: the table keeps the highest
    later = {"device": "test", "ceilings": {"hbm_read_gbs": 2000.0, "bf16_matmul_tflops": 500.0},
             "peers": []}
    # a decode step whose peer, without sinks (the same bytes), reads faster
    # than the peers' read kernel: 1000 GB/s in 1.0 ms by the default is 4000
    # GB/s in the peer's 0.25 ms; one without FP8 KV reads other bytes and
    # does not count
    bench["results"].append(dict(row("decode", 1.0), n_decode=4, n_prefill=0))
    bench["results"].append(dict(row("fp8", 1.0), n_decode=4, n_prefill=0))
    peers["peers"].append(peer("decode", "p1", 0.25, "no sinks"))
    peers["peers"].append(peer("fp8", "p2", 0.1, "no fp8 kv"))
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, doc in (("bench.json", bench), ("peers.json", peers), ("later.json", later)):
            paths.append(os.path.join(d, name))
            with open(paths[-1], "w") as f:
                json.dump(doc, f)
        out = subprocess.run([sys.executable, TABLE, paths[0], "--peers", paths[1],
                              "--peers", paths[2]],
                             capture_output=True, text=True, check=True).stdout
    if ("HBM read 4000 GB/s (p1's decode of m decode; the read kernel 3000), dense bf16 matmul "
            "700 TFLOP/s") not in out:
        print(f"zoo_table: not the highest ceilings of the peers' files and decodes\n{out}")
        return 1
    of_ceiling = {line.split("|")[3].strip(): line.split("|")[-3].strip()
                  for line in out.splitlines() if line.startswith("| m |")}
    if of_ceiling["exact"] != "14% MMA" or of_ceiling["decode"] != "25% HBM":
        print(f"zoo_table: the exact step at {of_ceiling['exact']} of the ceiling, want 14% MMA; "
              f"the decode at {of_ceiling['decode']}, want 25% HBM\n{out}")
        return 1
    ratio = {line.split("|")[3].strip(): line.split("|")[-2].strip()
             for line in out.splitlines() if line.startswith("| m |")}
    want = {"exact": "0.50", "sinks": "0.80*", "window": "", "ragged": "", "decode": "4.00*",
            "fp8": ""}
    if ratio != want:
        print(f"zoo_table: ratios {ratio}, want {want}\n{out}")
        return 1
    bind = {line.split("|")[3].strip(): line.split("|")[4].strip()
            for line in out.splitlines() if line.startswith("| m |")}
    if bind["ragged"] != "2.000 (a/b, block 64, ragged on c)" or bind["exact"] != "1.000 (a/b, block 64)":
        print(f"zoo_table: binding cells {bind}\n{out}")
        return 1
    # a bench stopped by a time limit mid-row: its whole rows are kept, and stderr says so
    with tempfile.TemporaryDirectory() as d:
        text = ('{"model": "m", "results": [\n  ' + json.dumps(row("exact", 1.0)) + ",\n  " +
                json.dumps(row("sinks", 0.8))[:40] + "\n")
        path = os.path.join(d, "cut.json")
        with open(path, "w") as f:
            f.write(text)
        res = subprocess.run([sys.executable, TABLE, path], capture_output=True, text=True)
    steps = [line.split("|")[3].strip() for line in res.stdout.splitlines()
             if line.startswith("| m |")]
    if res.returncode != 0 or steps != ["exact"] or "cut short" not in res.stderr:
        print(f"zoo_table: a cut-short bench file: rc {res.returncode}, rows {steps}\n"
              f"{res.stdout}{res.stderr}")
        return 1
    print("zoo_table: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
