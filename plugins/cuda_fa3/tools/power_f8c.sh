#!/bin/bash
# What the GPU's clock and power do while a prefill runs sustained (run on
# the GPU machine after test/run_gpu.sh has built build-fa3-gpu): each case
# is fa3_bench one-shape with FA3_POWER_BATCH forwards per timing (default
# 100: a few seconds of load)
# while nvidia-smi samples every 100 ms; the table gives the figure and,
# over the samples taken under load, the median SM clock, power and
# temperature and the throttle reasons seen.
#   FA3_POWER_CASES  space-separated NAME:KV8:CAUSAL:L[:fa3_bench options
#                    joined by commas] (KV8 1 = FP8 compute), e.g.
#                    "f8c:1:1:16384 f8c_zero_v:1:1:16384:--zero-v"
#   FA3_POWER_ROUNDS rounds (default 2), cases interleaved
# Logs under $OUT (smi_*.csv, power.txt).
set -u
OUT=${OUT:-/tmp/fa3_power}
mkdir -p "$OUT"
. "$(dirname "$0")/bench_setup.sh"
CASES=${FA3_POWER_CASES:-"bf16:0:1:16384 f8c:1:1:16384 f8c_zero_v:1:1:16384:--zero-v"}
: > "$OUT/power.log"
for r in $(seq 1 "${FA3_POWER_ROUNDS:-2}"); do
  for c in $CASES; do
    IFS=: read -r name kv8 causal L vars <<< "$c"
    csv="$OUT/smi_${name}_$r.csv"
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active,utilization.gpu \
      --format=csv,noheader,nounits -lms 100 > "$csv" 2>&1 &
    smi=$!
    tf=$(one_shape 60 "$kv8" "$causal" "$L" $(echo "${vars:-}" | tr ',' ' ') --batch=${FA3_POWER_BATCH:-100})
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    echo "$r $name ${tf:-nan} $csv" >> "$OUT/power.log"
    sleep 2
  done
done
python3 - "$OUT/power.log" <<'EOF' | tee "$OUT/power.txt"
import sys, statistics, collections
med = statistics.median
print("case".ljust(14) + "TFLOP/s".rjust(9) + "SM MHz".rjust(8) + "W".rjust(7) + "C".rjust(5) + "  reasons (samples)")
for line in open(sys.argv[1]):
    r, name, tf, csv = line.split()
    rows = []
    for l in open(csv):
        f = [x.strip() for x in l.split(",")]
        try: rows.append((float(f[0]), float(f[1]), float(f[2]), f[3], float(f[4])))
        except (ValueError, IndexError): pass
    busy = [x for x in rows if x[4] >= 90]
    if not busy:
        print(f"{name:<14}{tf:>9}  (no samples under load)"); continue
    why = collections.Counter(x[3] for x in busy).most_common(2)
    print(f"{name:<14}{tf:>9}{med(x[0] for x in busy):>8.0f}{med(x[1] for x in busy):>7.0f}"
          f"{med(x[2] for x in busy):>5.0f}  {why} of {len(busy)}")
EOF
