#!/bin/bash
# Side-by-side timing of FP8-compute kernel variants (run on the GPU machine
# after test/run_gpu.sh has built build-fa3-gpu): for every shape, the bf16-KV
# kernel and each variant as fa3_bench one-shape runs, ROUNDS rounds
# interleaved (so clock drift hits every column alike), then the medians
# and each variant's ratio to the bf16 figure of the same call.
#   FA3_VARIANTS  space-separated; "default", "bf16" or VAR=value settings
#                 joined by commas (e.g. FA3_F8C_TR=2,FA3_F8C_EMU=2); "bf16,"
#                 followed by settings times the bf16-KV kernel with them
#   FA3_SHAPES    space-separated CAUSAL:L pairs (head size 128)
#   FA3_ROUNDS    rounds (default 2);  FA3_CMP_S  time bound (default 200 s)
#   FA3_CHECK_VARIANTS  variants also put through fa3_check fp8kv and the
#                 conformance suite (env settings reach the plugin in-process)
# Logs and the table go under $OUT (compare.log, compare.txt).
set -u
OUT=${OUT:-/tmp/fa3_cmp}
mkdir -p "$OUT"
. "$(dirname "$0")/deadline.sh" "${FA3_CMP_S:-200}"
. "$(dirname "$0")/bench_setup.sh"
VARS=${FA3_VARIANTS:-"bf16 default"}
SHAPES=${FA3_SHAPES:-"1:4096 1:8192 1:16384 0:4096 0:8192 0:16384"}

# Per checked variant: fa3_check (all cases, FP8 math off; then the fp8kv
# cases with FP8 math on) and the conformance suite with fp8_compute auto
# (its fp8-attn case runs the FP8 kernel) and off. Log names drop the '='.
printf '[plugin.cuda_fa3]\nfp8_compute = off\n' > "$OUT/f8off.ini"
for v in ${FA3_CHECK_VARIANTS:-}; do
  envs=$(echo "$v" | tr ',' ' '); n=$(echo "$v" | tr -c 'A-Za-z0-9\n' '_')
  env $envs timeout "$(tmo 90)" $B/bin/fa3_check $SO > "$OUT/check_all_$n.log" 2>&1
  echo "check $v: fa3_check rc=$? $(grep -E 'cases passed' "$OUT/check_all_$n.log")"
  env $envs FA3_FP8_COMPUTE=on timeout "$(tmo 60)" $B/bin/fa3_check $SO fp8kv > "$OUT/check_$n.log" 2>&1
  echo "check $v: fa3_check fp8kv FP8 math rc=$? $(grep -E 'cases passed' "$OUT/check_$n.log")"
  grep -hE "FAIL" "$OUT/check_all_$n.log" "$OUT/check_$n.log" | head -5
  if [ -x $B/bin/attnhost ]; then
    for cfg in auto off; do
      extra=$( [ $cfg = off ] && echo "--config $OUT/f8off.ini")
      env $envs ATTNHOST_PLUGIN_PATH=$PWD/$B/lib/attnhost/plugins timeout "$(tmo 75)" $B/bin/attnhost check \
        --plugin cuda_fa3 $extra > "$OUT/conf_${cfg}_$n.log" 2>&1
      echo "check $v: attnhost check fp8_compute=$cfg rc=$? $(tail -1 "$OUT/conf_${cfg}_$n.log")"
      grep -iE "fail|fp8-attn" "$OUT/conf_${cfg}_$n.log" | head -4
    done
  fi
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
