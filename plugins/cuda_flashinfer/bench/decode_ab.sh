#!/bin/bash
# Interleaved A/B of the B64 paged decode rows (fi_bench --decode): each
# round runs every variant (a space-separated list of fi_bench options with
# commas for spaces, e.g. "--layout,hnd" or "--page,1"; "default" adds
# none) over every page order, so drift in clocks
# and power falls on all of them alike; then the median per variant, order
# and context. A variant "sdpa-BACKEND" (sdpa-cudnn, sdpa-flash,
# sdpa-efficient) times PyTorch SDPA on dense KV of the same shapes in its
# place in the round (sdpa_long.py; order "dense"). FI_AB_BASE ("variant
# order", e.g. "sdpa-cudnn dense") pairs every row with the base's row of the
# same round and context: the median of the per-round ratios and the rounds
# in which the row was faster. Where nvidia-smi runs, the GPU is named first
# (serial, power limit, clocks: lent machines differ), every run is sampled
# every 50 ms and the summary gives each variant's median SM and memory
# clock, power, GPU and HBM temperature while the GPU was busy (utilization
# >= 90%): whether a machine that runs a kernel slower runs it at a lower
# clock or a hotter memory (which refreshes more often). Run after
# gpu_run.sh's build (build-fi-gpu, the .deps under /tmp/fi-deps).
#
#   FI_AB_VARIANTS="default sdpa-cudnn" FI_AB_ORDERS="ordered shuffled" \
#   FI_AB_BASE="sdpa-cudnn dense" FI_AB_ROUNDS=6 bash plugins/cuda_flashinfer/bench/decode_ab.sh
B=${B:-build-fi-gpu}
HERE=$(dirname "$0")
export LD_LIBRARY_PATH=/tmp/fi-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BATCH=${FI_AB_BATCH:-20} # forwards back to back per timing (fi_bench --batch)
VARIANTS=${FI_AB_VARIANTS:-default sdpa-cudnn}
ORDERS=${FI_AB_ORDERS:-shuffled ordered}
ROUNDS=${FI_AB_ROUNDS:-3}
REPS=${FI_AB_REPS:-30}
rows=$(mktemp) samples=$(mktemp) clocks=$(mktemp)
# median(a, m): the median of a[1..m] (sorted in place), for every awk below.
MEDIAN='function median(a, m,   i, j, x) {
  for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
  return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }'
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,serial,power.limit,clocks.max.sm,clocks.max.mem,ecc.mode.current --format=csv
sampled() { # sampled LABEL CMD...: CMD's output; the busy samples' medians go to $clocks
  command -v nvidia-smi > /dev/null || { "${@:2}"; return; }
  nvidia-smi --query-gpu=utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory \
    --format=csv,noheader,nounits -lms 50 > "$samples" 2> /dev/null &
  local smi=$!
  "${@:2}"
  kill $smi 2> /dev/null; wait $smi 2> /dev/null
  awk -F', ' -v label="$1" "$MEDIAN"'
    $1 >= 90 { n++; for (i = 2; i <= 6; i++) x[i, n] = $i }
    function col(i,   j) { for (j = 1; j <= n; j++) a[j] = x[i, j]; return median(a, n) }
    END { if (n) printf "%s %.0f %.0f %.0f %.0f %.0f %d\n", label, col(2), col(3), col(4), col(5), col(6), n }' \
    "$samples" >> "$clocks"
}
for r in $(seq "$ROUNDS"); do
  for v in $VARIANTS; do
    if [[ $v == sdpa-* ]]; then # "| decode B64 ctx4096 ... | cudnn | ms | GB/s |"
      sampled "$v dense" python3 "$HERE/sdpa_long.py" --decode-only --backends "${v#sdpa-}" \
        --batch "$BATCH" --reps "$REPS" |
        awk -v v="$v" -v r="$r" -F'|' '/^\| decode B64/ && $4 + 0 > 0 {
          split($2, w, " "); sub("ctx", "", w[3]); printf "%s dense %s %s %s\n", v, w[3], r, $4 + 0 }' |
        tee -a "$rows"
      continue
    fi
    for o in $ORDERS; do
      opts=()
      [ "$v" != default ] && IFS=, read -ra opts <<< "$v"
      sampled "$v $o" "$B/bin/fi_bench" --decode --order "$o" --batch "$BATCH" --reps "$REPS" "${opts[@]}" |
        awk -v v="$v" -v o="$o" -v r="$r" -F'|' '/^\| decode B64/ {
          split($2, w, " "); sub("ctx", "", w[3]); printf "%s %s %s %s %s\n", v, o, w[3], r, $3 + 0 }' |
        tee -a "$rows"
    done
  done
done
echo "median ms over $ROUNDS rounds (variant, order, context)${FI_AB_BASE:+; against $FI_AB_BASE round by round:}"
sort -k1,2 -k3,3n "$rows" | awk -v base="${FI_AB_BASE:-}" "$MEDIAN"'
  { key = $1 " " $2 " " $3; n[key]++; v[key, n[key]] = $5; t[$1 " " $2, $3, $4] = $5
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key; vo[key] = $1 " " $2; ctx[key] = $3 } }
  END { for (i = 1; i <= nk; i++) {
          k = keys[i]; c = n[k]; for (j = 1; j <= c; j++) a[j] = v[k, j]
          line = sprintf("  %-34s %.4f (%d)", k, median(a, c), c)
          if (base != "" && vo[k] != base) { # ratios to the base, round by round
            m = 0; wins = 0
            for (r = 1; r <= c; r++) { b = t[base, ctx[k], r]; if (b > 0 && (vo[k], ctx[k], r) in t) {
              q[++m] = t[vo[k], ctx[k], r] / b; wins += q[m] < 1 } }
            if (m) line = line sprintf("  x%.4f of base (median), faster in %d of %d rounds", median(q, m), wins, m)
          }
          print line } }'
if [ -s "$clocks" ]; then
  echo "while busy, medians over the rounds (variant, order): SM / memory MHz, W, GPU / HBM degrees C (samples):"
  sort -k1,2 "$clocks" | awk "$MEDIAN"'
    { k = $1 " " $2; m = ++n[k]; for (i = 3; i <= 7; i++) x[k, i, m] = $i; s[k] += $8
      if (!(k in seen)) { seen[k] = 1; keys[++nk] = k } }
    function of(k, i,   j) { for (j = 1; j <= n[k]; j++) a[j] = x[k, i, j]; return median(a, n[k]) }
    END { for (i = 1; i <= nk; i++) { k = keys[i]
            printf "  %-34s %.0f / %.0f MHz  %.0f W  %.0f / %.0f C  (%d)\n", k, of(k, 3), of(k, 4), of(k, 5),
              of(k, 6), of(k, 7), s[k] } }'
fi
rm -f "$rows" "$samples" "$clocks"
