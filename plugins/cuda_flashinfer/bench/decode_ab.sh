#!/bin/bash
# Interleaved A/B of the B64 paged decode rows (fi_bench --decode): each
# round runs every variant (a space-separated list of VAR=value[,VAR=value]
# settings; "default" runs none) over every page order, so drift in clocks
# and power falls on all of them alike; then the median per variant, order
# and context. Run after gpu_run.sh's build (build-fi-gpu, the .deps under
# /tmp/fi-deps).
#
#   FI_AB_VARIANTS="default AH_FI_DECODE_REGS=0" FI_AB_ORDERS="shuffled ordered" \
#   FI_AB_ROUNDS=3 bash plugins/cuda_flashinfer/bench/decode_ab.sh
B=${B:-build-fi-gpu}
export LD_LIBRARY_PATH=/tmp/fi-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export FI_BENCH_BATCH=${FI_BENCH_BATCH:-20}
VARIANTS=${FI_AB_VARIANTS:-default AH_FI_DECODE_REGS=0}
ORDERS=${FI_AB_ORDERS:-shuffled ordered}
ROUNDS=${FI_AB_ROUNDS:-3}
rows=$(mktemp)
for r in $(seq "$ROUNDS"); do
  for v in $VARIANTS; do
    for o in $ORDERS; do
      settings=()
      [ "$v" != default ] && IFS=, read -ra settings <<< "$v"
      env "${settings[@]}" FI_BENCH_ORDER="$o" "$B/bin/fi_bench" --decode --reps "${FI_AB_REPS:-30}" |
        awk -v v="$v" -v o="$o" -v r="$r" -F'|' '/^\| decode B64/ {
          split($2, w, " "); sub("ctx", "", w[3]); printf "%s %s %s %s %s\n", v, o, w[3], r, $3 + 0 }' |
        tee -a "$rows"
    done
  done
done
echo "median ms over $ROUNDS rounds (variant, order, context):"
sort -k1,1 -k2,2 -k3,3n -k5,5g "$rows" | awk '
  { key = $1 " " $2 " " $3; n[key]++; v[key, n[key]] = $5; if (!(key in seen)) { seen[key] = 1; keys[++nk] = key } }
  END { for (i = 1; i <= nk; i++) { k = keys[i]; c = n[k]; m = c % 2 ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2
        printf "  %-28s %.4f (%d)\n", k, m, c } }'
rm -f "$rows"
