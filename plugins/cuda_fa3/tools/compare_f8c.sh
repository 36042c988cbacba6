#!/bin/bash
# Side-by-side timing of the FP8-compute kernel under different plugin
# settings (run on the GPU machine after test/run_gpu.sh has built
# build-fa3-gpu): for every shape, the bf16-KV kernel and each variant as
# fa3_bench one-shape runs, ROUNDS rounds interleaved (so clock drift hits
# every column alike), then the medians and each variant's ratio to the
# bf16 figure of the same call.
#   FA3_VARIANTS  space-separated; "default", "bf16" or fa3_bench options
#                 joined by commas (e.g. --vt-scratch-mib=0,--batch=5);
#                 "bf16," followed by options times the bf16-KV kernel with them
#   FA3_SHAPES    space-separated CAUSAL:L pairs (head size 128)
#   FA3_ROUNDS    rounds (default 2);  FA3_CMP_S  time bound (default 200 s)
#   FA3_CHECK_VARIANTS  variants also put through fa3_check (all cases, and
#                 the fp8kv cases with FP8 math) with the same options
# Logs and the table go under $OUT (compare.log, compare.txt).
set -u
OUT=${OUT:-/tmp/fa3_cmp}
mkdir -p "$OUT"
. "$(dirname "$0")/deadline.sh" "${FA3_CMP_S:-200}"
. "$(dirname "$0")/bench_setup.sh"
VARS=${FA3_VARIANTS:-"bf16 default"}
SHAPES=${FA3_SHAPES:-"1:4096 1:8192 1:16384 0:4096 0:8192 0:16384"}

# Per checked variant: fa3_check (all cases, FP8 math off; then the fp8kv
# cases with FP8 math on), with the variant's options (fa3_bench's own,
# --batch and --zero-v, do not apply there). Log names keep [A-Za-z0-9_].
for v in ${FA3_CHECK_VARIANTS:-}; do
  opts=$(echo "$v" | tr ',' '\n' | grep -vE '^(--batch=|--zero-v$|default$|bf16$)' | tr '\n' ' ')
  n=$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')
  timeout "$(tmo 90)" $B/bin/fa3_check $opts $SO > "$OUT/check_all_$n.log" 2>&1
  echo "check $v: fa3_check rc=$? $(grep -E 'cases passed' "$OUT/check_all_$n.log")"
  timeout "$(tmo 60)" $B/bin/fa3_check $opts --fp8-attention $SO fp8kv > "$OUT/check_$n.log" 2>&1
  echo "check $v: fa3_check fp8kv FP8 math rc=$? $(grep -E 'cases passed' "$OUT/check_$n.log")"
  grep -hE "FAIL" "$OUT/check_all_$n.log" "$OUT/check_$n.log" | head -5
done

: > "$OUT/compare.log"
for r in $(seq 1 "${FA3_ROUNDS:-2}"); do
  for sh in $SHAPES; do
    c=${sh%%:*}; L=${sh##*:}
    for v in $VARS; do
      [ $(( DEADLINE - $(date +%s) )) -gt 3 ] || break 3
      if [ "${v%%,*}" = bf16 ]; then
        tf=$(one_shape "$(tmo 20)" 0 $c $L $(echo "${v#bf16}" | tr ',' ' '))
      else
        tf=$(one_shape "$(tmo 20)" 1 $c $L $( [ "$v" = default ] || echo "$v" | tr ',' ' '))
      fi
      echo "$r $c $L $v ${tf:-nan}" | tee -a "$OUT/compare.log"
    done
  done
done
python3 - "$OUT/compare.log" "$VARS" <<'EOF' | tee "$OUT/compare.txt"
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 5]
vars_ = sys.argv[2].split()
tab = {}
for r, c, L, v, tf in rows:
    try: x = float(tf)
    except ValueError: continue
    if x == x: tab.setdefault((c, L), {}).setdefault(v, []).append(x)
print("median TFLOP/s (ratio to bf16 of this call), d128, 16k tokens per shape")
print("shape".ljust(16) + "".join(v[:22].rjust(24) for v in vars_))
for (c, L), d in tab.items():
    b = statistics.median(d["bf16"]) if "bf16" in d else None
    cells = []
    for v in vars_:
        if v not in d: cells.append("-".rjust(24)); continue
        m = statistics.median(d[v])
        cells.append((f"{m:.1f}" + (f" ({m / b:.3f})" if b and v != "bf16" else "")).rjust(24))
    print(f"{'causal' if c == '1' else 'noncausal'} {L}".ljust(16) + "".join(cells))
EOF
echo "compare total $(el)"
