#!/bin/sh
# `attnhost config --dump` lists the plugins' declared keys and reads back;
# --effective shows the values in force; explain shows the keys off their
# defaults. Needs cpu_amx in the build.
# Usage: config_dump.sh ATTNHOST INI (tests/cli/plugin_keys.ini)
set -eu
ah=$1 ini=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qxF -- "$2" "$1" || fail "$1 lacks the line '$2'"; }
"$ah" config --dump --no-cache > "$tmp/dump.ini"
has "$tmp/dump.ini" "[plugin.cpu_amx]"
has "$tmp/dump.ini" "# Value: an integer in 0..4096. Default: 0."
has "$tmp/dump.ini" "#threads = 0"
has "$tmp/dump.ini" "# Value: one of auto|amx|avx512bf16|avx512|avx2|scalar. Default: auto."
# The documented dump reads back as the defaults.
: > "$tmp/empty.ini"
"$ah" config --dump --effective --no-cache --config "$tmp/dump.ini" | tail -n +2 > "$tmp/a"
"$ah" config --dump --effective --no-cache --config "$tmp/empty.ini" | tail -n +2 > "$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || { diff "$tmp/a" "$tmp/b"; fail "the dump does not read back as the defaults"; }
# Effective: set keys as set, the others commented at their defaults; reads back.
"$ah" config --dump --effective --no-cache --config "$ini" > "$tmp/eff.ini"
has "$tmp/eff.ini" "threads = 2"
has "$tmp/eff.ini" "amx_decode = on"
has "$tmp/eff.ini" "#isa = auto"
"$ah" config --dump --effective --no-cache --config "$tmp/eff.ini" | tail -n +2 > "$tmp/a"
tail -n +2 "$tmp/eff.ini" > "$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || { diff "$tmp/a" "$tmp/b"; fail "the effective dump does not read back"; }
# explain: the bound plugin's keys off their defaults (amx_decode = on is the default).
"$ah" explain --no-cache --layer 0 --config "$ini" > "$tmp/explain"
grep -qE '^  cpu_amx +threads = 2$' "$tmp/explain" || { cat "$tmp/explain"; fail "explain lacks cpu_amx's threads = 2 alone"; }
echo "ok"
