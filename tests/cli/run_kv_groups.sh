#!/bin/sh
# attnhost run on imported models of several KV-cache groups (cpu_amx):
# one ah_kv_group per group, each with its own block table, slots and cache,
# the sliding-window group releasing the blocks its window passes, every
# layer checked against the oracle. gpt-oss: windowed and global layers
# (one block size); Gemma 3 with its global layers on blocks of 32 (groups
# of different block sizes); Whisper: cross layers in a group of their own.
# usage: run_kv_groups.sh ATTNHOST SOURCE_DIR WORK_DIR
set -eu
AH=$1 SRC=$2 WORK=$3
CFG=$SRC/tests/data/hf_configs
mkdir -p "$WORK"
fail() { echo "FAIL: $*"; cat "$WORK/out" 2>/dev/null; exit 1; }

if "$AH" model import "$CFG/gpt-oss-120b.json" --kv-groups hybrid -o "$WORK/gpt-oss.ini" 2>"$WORK/err"; then :; else
  grep -q "built without json-c" "$WORK/err" && { echo "skipped: no json-c"; exit 0; }
  cat "$WORK/err"; fail "import gpt-oss"
fi
"$AH" run --no-cache --plugin cpu_amx --model "$WORK/gpt-oss.ini" --batch 2 --prompt-len 16 \
  --steps 2 --layers 2 > "$WORK/out" 2>&1 || fail "run gpt-oss"
grep -q "^kv groups: 2, each with its own block table, slots and cache$" "$WORK/out" || fail "gpt-oss: groups"
grep -q "^  group 0: 1 layer (the first 0), block size 16, [0-9]* blocks, window 128: releases the blocks it passes$" "$WORK/out" || fail "gpt-oss: group 0"
grep -q "^  group 1: 1 layer (the first 1), block size 16, [0-9]* blocks$" "$WORK/out" || fail "gpt-oss: group 1"
# request 1 reaches position 161 past a 128-token window: blocks 0 and 1 released
grep -q "^kv group 0: 2 block-table entries released as the window passed them$" "$WORK/out" || fail "gpt-oss: released"
grep -q "^PASS: every layer's output matches the double-precision oracle (2 layers checked)$" "$WORK/out" || fail "gpt-oss: PASS"

"$AH" model import "$CFG/gemma-3-12b.json" --kv-groups hybrid --dtype fp32 -o "$WORK/gemma-3.ini" 2>/dev/null
printf '\n[layers.5-47/6]\nblock_size = 32\n' >> "$WORK/gemma-3.ini"
"$AH" run --no-cache --plugin cpu_amx --model "$WORK/gemma-3.ini" --batch 3 --prompt-len 40 \
  --steps 3 --layers 4-6 > "$WORK/out" 2>&1 || fail "run gemma-3"
grep -q "^  group 0: 2 layers (the first 4), block size 16, [0-9]* blocks, window 1024: releases" "$WORK/out" || fail "gemma-3: group 0"
grep -q "^  group 1: 1 layer (the first 5), block size 32, [0-9]* blocks$" "$WORK/out" || fail "gemma-3: group 1"
grep -q "^kv group 0: [1-9][0-9]* block-table entries released" "$WORK/out" || fail "gemma-3: released"
grep -q "^PASS: every layer's output matches the double-precision oracle (3 layers checked)$" "$WORK/out" || fail "gemma-3: PASS"

# --layers 1-1 keeps only group 1 of the import: numbered 0 in the run
"$AH" run --no-cache --plugin cpu_amx --model "$WORK/gpt-oss.ini" --batch 2 --prompt-len 16 \
  --steps 1 --layers 1-1 > "$WORK/out" 2>&1 || fail "run gpt-oss layer 1"
grep -q "^kv groups" "$WORK/out" && fail "one kept group printed as several"
grep -q "^PASS: every layer's output matches the double-precision oracle (1 layer checked)$" "$WORK/out" || fail "gpt-oss layer 1: PASS"

"$AH" model import "$CFG/whisper-large-v3.json" --kv-groups hybrid -o "$WORK/whisper.ini" 2>/dev/null
"$AH" run --no-cache --plugin cpu_amx --model "$WORK/whisper.ini" --batch 2 --prompt-len 24 \
  --steps 2 --layers 0-1,32-35 > "$WORK/out" 2>&1 || fail "run whisper"
grep -q "^  group 1: 2 layers (the first 33), block size 16" "$WORK/out" || fail "whisper: cross group"
grep -q "^decode: .*ok$" "$WORK/out" || fail "whisper: decode"
grep -q "^PASS: every layer's output matches the double-precision oracle (6 layers checked)$" "$WORK/out" || fail "whisper: PASS"
echo "run kv groups: ok"
