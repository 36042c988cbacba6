#!/bin/bash
# One GPU session for cuda_flashinfer: build (sm_90 only, to save device
# time), the plan's page-listing test, host conformance suite, correctness
# driver, benchmarks, PyTorch SDPA peer, the host's generic bench. Logs go
# to $OUT (or ./gpu-out). Each step gets a time limit from what is left of
# BUDGET seconds, and prints as it goes (line-buffered), so a stall shows
# which case it was in.
OUT=${OUT:-gpu-out}
BUDGET=${BUDGET:-400}
mkdir -p "$OUT"
B=build-fi-gpu
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() { # step NAME MAXSECONDS CMD...: run with min(MAX, left - 5) seconds
  local name=$1 max=$2; shift 2
  local l=$(( $(left) - 5 )); [ $l -lt $max ] && max=$l
  if [ $max -le 5 ]; then echo "== $name: skipped (no time left)"; return; fi
  echo "== $name (limit ${max}s)"
  timeout $max stdbuf -oL -eL "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name rc=$rc after $(( $(date +%s) - T0 )) s"
}
# The device image lacks inih and DLPack: unpack the carried .debs (./.deps)
# under /tmp and point pkg-config and CMake there.
D=/tmp/fi-deps
mkdir -p $D && for f in .deps/*.deb; do dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
git log -1 --format='commit %H %cd' >> "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -DATTNHOST_PLUGINS=cuda_flashinfer -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build $B -j16 --target cuda_flashinfer fi_check fi_plan_test fi_bench fi_readbw attnhost_cli > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - T0 )) s"
step plan 30 $B/bin/fi_plan_test
grep -E "FAIL|fi_plan_test" "$OUT/plan.log"
step conformance ${CONF_MAX:-150} $B/bin/attnhost check --plugin cuda_flashinfer
grep -vE "^cuda_flashinfer  PASS" "$OUT/conformance.log" | tail -30
grep -cE "^cuda_flashinfer  PASS" "$OUT/conformance.log"
step check ${CHECK_MAX:-60} $B/bin/fi_check ${CHECK_ARGS:---quick}
grep -E "FAIL|summary|device|passed" "$OUT/check.log" | head -40
# ALT (e.g. "AH_FI_DECODE_STAGES=3 AH_FI_MERGE_PDL=1"): the suite and the
# driver again under those settings.
if [ -n "$ALT" ]; then
  echo "== alt: $ALT"
  ( export $ALT; step conformance_alt ${CONF_MAX:-150} $B/bin/attnhost check --plugin cuda_flashinfer
    grep -vE "^cuda_flashinfer  PASS" "$OUT/conformance_alt.log" | tail -30
    grep -cE "^cuda_flashinfer  PASS" "$OUT/conformance_alt.log"
    step check_alt ${CHECK_MAX:-60} $B/bin/fi_check ${CHECK_ARGS:---quick}
    grep -E "FAIL|summary|device|passed" "$OUT/check_alt.log" | head -40 )
fi
# Prefill/cascade first (default build, then the alternatives), the SDPA
# peers, and the full bench (decode included: about 70 s) last, so a tight
# BUDGET cuts the decode rows, not the prefill ones.
step bench_tc ${BENCH1_MAX:-30} $B/bin/fi_bench --tc --reps ${REPS:-20}
cat "$OUT/bench_tc.log"
# The d128 mma.sync kernel (128-row CTAs) on the H100, the A/B against the
# default wgmma kernel; SM90_ALT=0 skips it.
if [ "${SM90_ALT:-1}" != 0 ]; then
  AH_FI_PREFILL_SM90=0 step bench_mma ${BENCH2_MAX:-30} $B/bin/fi_bench --tc --reps ${REPS:-20}
  cat "$OUT/bench_mma.log"
fi
# HBM read bandwidth (read-only kernel), the decode ceiling, then the
# B64 decode rows for each FILL:STAGES:PDL in DECODES (AH_FI_DECODE_FILL,
# AH_FI_DECODE_STAGES, AH_FI_MERGE_PDL; empty fields keep the defaults),
# then every decode row for each such setting in DECODES_ALL (default: the
# defaults).
step readbw ${READBW_MAX:-40} $B/bin/fi_readbw 4
cat "$OUT/readbw.log"
i=0
decode_runs() { # decode_runs LABEL MAXSECONDS FI_BENCH_FLAG CONFIGS...
  local label=$1 max=$2 flag=$3 c f ns pdl; shift 3
  for c in "$@"; do
    IFS=: read -r f ns pdl <<< "$c"; i=$((i + 1))
    AH_FI_DECODE_FILL=$f AH_FI_DECODE_STAGES=$ns AH_FI_MERGE_PDL=$pdl \
      step ${label}_$i $max $B/bin/fi_bench $flag --reps ${REPS:-20}
    echo "$label fill=$f stages=$ns pdl=$pdl"; grep decode "$OUT/${label}_$i.log"
  done
}
decode_runs decode ${DEC_MAX:-30} --decode ${DECODES:-::}
decode_runs decode_all ${DECA_MAX:-120} --decode-all ${DECODES_ALL:-::}
# The d128 fast kernel's 64-row build (16 rows per warp), the A/B against the
# default 128-row CTAs; ROWS_ALT=0 skips it.
if [ "${ROWS_ALT:-0}" != 0 ]; then
  AH_FI_PREFILL_ROWS=64 step bench_64rows ${BENCH2_MAX:-30} $B/bin/fi_bench --tc --reps ${REPS:-20}
  cat "$OUT/bench_64rows.log"
fi
if [ "${TC_ALT:-0}" != 0 ]; then # d64's other register fit (3 CTAs/SM)
  AH_FI_PREFILL_CTAS=3 step bench_3cta ${BENCH2_MAX:-30} $B/bin/fi_bench --tc --reps ${REPS:-20}
  cat "$OUT/bench_3cta.log"
fi
step peer_long ${PEERL_MAX:-60} python3 plugins/cuda_flashinfer/bench/sdpa_long.py --reps 10
cat "$OUT/peer_long.log"
if [ "${PEER:-1}" != 0 ]; then
  step peer ${PEER_MAX:-45} python3 bench/peers/torch_sdpa.py --reps 20
  grep -v Warning "$OUT/peer.log" | grep -v "fn = lambda"
fi
if [ "${FULL:-1}" != 0 ]; then
  step bench ${BENCH_MAX:-110} $B/bin/fi_bench --reps ${REPS:-20}
  cat "$OUT/bench.log"
fi
if [ -n "$HOST_BENCH" ]; then
  step hostbench 60 $B/bin/attnhost bench --plugin cuda_flashinfer
  tail -40 "$OUT/hostbench.log"
fi
echo "total $(( $(date +%s) - T0 )) s"
