#!/usr/bin/env python3
"""The man page and `attnhost --help` say the same: every command (with its
synopsis and summary) and every option (with its argument and description),
in the same sections and order. Both come from core/cli/cli_help.def; this
compares what the built binary prints with what the generated page says.

usage: man_help.py ATTNHOST MANPAGE(.1 or .1.gz)
"""
import gzip
import re
import subprocess
import sys


def norm(s):
    return " ".join(s.split())


def from_help(text):
    """{section: [(term, description)]} from the help's indented blocks."""
    out, sec, item = {}, None, None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line) and not line.startswith("usage:"):
            sec = line[:-1].lower()
            out[sec], item = [], None
        elif sec and re.match(r"^  \S", line):
            m = re.match(r"^  (\S.*?)(?: {2,}(.*))?$", line)
            item = [m.group(1), m.group(2) or ""]
            out[sec].append(item)
        elif sec and item and re.match(r"^ {3,}\S", line):
            item[1] += " " + line.strip()
        elif not line.strip():
            item = None
    return {k: [(norm(t), norm(d)) for t, d in v] for k, v in out.items()}


def plain(troff):
    s = re.sub(r"\\f[BIRP]", "", troff)
    return s.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")


def from_man(text):
    out, sec, item = {}, None, None
    for line in text.splitlines():
        if line.startswith(".SH "):
            name = line[4:].strip('"').lower()
            sec = "commands" if name == "commands" else None
            if sec:
                out[sec] = []
            item = None
        elif line.startswith(".SS ") and (sec or item is None):
            sec = line[4:].strip('"').lower()
            out[sec], item = [], None
        elif line == ".TP" and sec:
            item = "term"
        elif sec and item == "term":
            item = [plain(line), ""]
            out[sec].append(item)
        elif sec and isinstance(item, list) and not line.startswith("."):
            item[1] += " " + plain(line)
        elif line.startswith("."):
            item = None
    return {k: [(norm(t), norm(d)) for t, d in v] for k, v in out.items() if v}


def main():
    ah, page = sys.argv[1], sys.argv[2]
    helptext = subprocess.run([ah, "--help"], capture_output=True, text=True, check=True).stdout
    raw = gzip.open(page, "rt").read() if page.endswith(".gz") else open(page).read()
    h, m = from_help(helptext), from_man(raw)
    if not h.get("commands") or not h.get("common options"):
        sys.exit("man_help: could not read the commands and common options from --help")
    bad = 0
    for sec in sorted(set(h) | set(m)):
        if h.get(sec) != m.get(sec):
            bad = 1
            print(f"section '{sec}' differs:\n  --help: {h.get(sec)}\n  man:    {m.get(sec)}")
    # every command --help lists is one the binary accepts
    for term, _ in h["commands"]:
        cmd = term.split()[0]
        r = subprocess.run([ah, cmd, "--no-such-option"], capture_output=True, text=True)
        if "unknown command" in r.stderr:
            bad = 1
            print(f"--help lists '{cmd}' but attnhost does not know it")
    n = sum(len(v) for v in h.values())
    print(f"man_help: {len(h)} sections, {n} entries: " + ("differ" if bad else "the man page matches --help"))
    return bad


if __name__ == "__main__":
    sys.exit(main())
