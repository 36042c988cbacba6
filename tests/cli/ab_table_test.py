#!/usr/bin/env python3
"""bench/ab_table.py: each row's median over the rounds on each side, the
ratio after / before, --backend keeping one backend's rows, a row one side
lacks left out and named, and the closing count of faster, level and
slower rows."""
import json
import os
import subprocess
import sys
import tempfile

TABLE = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "ab_table.py")


def bench(rows):
    return {"model": "m", "results": [{"model": "m", "spec": "s", "step": step, "backend": b,
                                       "median_ms": ms} for step, b, ms in rows]}


def main():
    before = [bench([("d1", "p", 1.0), ("d2", "p", 2.0), ("d3", "p", 1.0), ("d1", "default", 5.0),
                     ("gone", "p", 1.0)]),
              bench([("d1", "p", 1.2), ("d2", "p", 2.0), ("d3", "p", 1.0), ("d1", "default", 5.0)]),
              bench([("d1", "p", 1.4), ("d2", "p", 2.0), ("d3", "p", 1.0), ("d1", "default", 5.0)])]
    after = [bench([("d1", "p", 0.6), ("d2", "p", 2.01), ("d3", "p", 1.5), ("d1", "default", 1.0),
                    ("new", "p", 1.0)]),
             bench([("d1", "p", 0.5), ("d2", "p", 2.05), ("d3", "p", 1.5), ("d1", "default", 1.0)]),
             bench([("d1", "p", 0.7), ("d2", "p", 2.0), ("d3", "p", 1.5), ("d1", "default", 1.0)])]
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for side, docs in (("before", before), ("after", after)):
            paths[side] = []
            for i, doc in enumerate(docs):
                paths[side].append(os.path.join(d, f"{side}{i}.json"))
                with open(paths[side][-1], "w") as f:
                    json.dump(doc, f)
        res = subprocess.run([sys.executable, TABLE, "--backend", "p", "--before", *paths["before"],
                              "--after", *paths["after"]], capture_output=True, text=True)
    out = res.stdout
    cells = {line.split("|")[3].strip(): [c.strip() for c in line.split("|")[5:8]]
             for line in out.splitlines() if line.startswith("| m |")}
    want = {"d1": ["1.2000 (1.0000-1.4000)", "0.6000 (0.5000-0.7000)", "0.500"],
            "d2": ["2.0000 (2.0000-2.0000)", "2.0100 (2.0000-2.0500)", "1.005"],
            "d3": ["1.0000 (1.0000-1.0000)", "1.5000 (1.5000-1.5000)", "1.500"]}
    if res.returncode != 0 or cells != want:
        print(f"ab_table: rows {cells}, want {want}\n{out}{res.stderr}")
        return 1
    if "1 faster, 1 level (within 2%), 1 slower" not in out or "0.500-1.500" not in out:
        print(f"ab_table: the closing count\n{out}")
        return 1
    if "gone p only before" not in res.stderr or "new p only after" not in res.stderr:
        print(f"ab_table: rows one side lacks not named\n{res.stderr}")
        return 1
    print("ab_table: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
