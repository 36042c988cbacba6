"""docs/python.md's examples run as written, and the overhead benchmark
still runs (small sizes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="the docs example needs NumPy (apt-get install python3-numpy)")

ROOT = Path(__file__).resolve().parents[2]


def test_docs_example(cpu_amx, capsys):
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = re.findall(r"<!-- example:begin -->\s*```python\n(.*?)```\s*<!-- example:end -->",
                        text, re.S)
    assert len(blocks) == 3, ("docs/python.md lost its example markers (paged decode, "
                              "KV-cache groups, cp)")
    for code in blocks:
        exec(compile(code, "docs/python.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "-> cpu_amx" in printed
    assert "INVALID_ARGUMENT layer 0: q: dtype float64" in printed
    assert "[-1 -1 -1 -1 12 13 14 15]" in printed  # the KV-cache groups example's release


def test_overhead_bench_runs(cpu_amx):
    r = subprocess.run([sys.executable, str(ROOT / "python" / "bench" / "overhead.py"),
                        "--batch", "8", "--layers", "2", "--reps", "2"],
                       capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Python layer's own cost" in r.stdout
