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
# Prefill/cascade first, the SDPA peers, and the full bench (decode
# included: about 70 s) last, so a tight BUDGET cuts the decode rows, not
# the prefill ones.
step bench_tc ${BENCH1_MAX:-30} $B/bin/fi_bench --tc --reps ${REPS:-20}
cat "$OUT/bench_tc.log"
# HBM read bandwidth (read-only kernel), the decode ceiling, then the B64
# decode rows and every decode row (DECODE_ARGS: fi_bench options for the
# B64 rows, e.g. "--layout hnd --page 1").
step readbw ${READBW_MAX:-40} $B/bin/fi_readbw 4
cat "$OUT/readbw.log"
step decode ${DEC_MAX:-30} $B/bin/fi_bench --decode --reps ${REPS:-20} ${DECODE_ARGS:-}
grep decode "$OUT/decode.log"
step decode_all ${DECA_MAX:-120} $B/bin/fi_bench --decode-all --reps ${REPS:-20} ${DECODE_ARGS:-}
grep decode "$OUT/decode_all.log"
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
