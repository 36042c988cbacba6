#!/bin/bash
# One device session for cuda_fa3: build, correctness, benchmarks, host
# conformance suite (when the CLI builds) and peers, logs under $OUT.
# Run from the repository root with .deps carried (the device image lacks
# inih and DLPack): plugins/cuda_fa3/test/run_gpu.sh
set -u
OUT=${OUT:-/tmp/fa3_out}
mkdir -p "$OUT"
D=/tmp/fa3-deps
mkdir -p $D && for f in .deps/*.deb; do dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=build-fa3-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
start=$(date +%s)
{ cmake -S . -B $B -DATTNHOST_PLUGINS=cuda_fa3 -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include \
  && cmake --build $B -j16 --target cuda_fa3 fa3_check fa3_bench; } > "$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - start )) s"; grep -E "error" -A3 "$OUT/build.log" | head -30
(cmake --build $B -j16 --target attnhost_cli >> "$OUT/build.log" 2>&1 && echo "cli built") || echo "cli did not build"
timeout 150 $B/bin/fa3_check > "$OUT/check.log" 2>&1; echo "check rc=$?"
grep -vE "^  (eager|graph)" "$OUT/check.log" | head -5; grep -E "FAIL|passed|:" "$OUT/check.log" | head -60
timeout 120 $B/bin/fa3_bench $B/lib/attnhost/plugins/cuda_fa3.so ${FA3_BENCH:-all} > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep RESULT "$OUT/bench.log"; grep -v RESULT "$OUT/bench.log" | tail -4
if [ -x $B/bin/attnhost ]; then
  timeout 60 $B/bin/attnhost check --plugin cuda_fa3 > "$OUT/attnhost_check.log" 2>&1; echo "attnhost check rc=$?"
  tail -25 "$OUT/attnhost_check.log"
fi
timeout 90 python3 plugins/cuda_fa3/test/peer_sdpa.py 128 > "$OUT/peers.log" 2>&1
echo "peers rc=$?"; grep RESULT "$OUT/peers.log"
