#!/bin/bash
# One device session for cuda_fa3: build, correctness, benchmarks and peers,
# logs under $OUT. Usage (from the repository root): plugins/cuda_fa3/test/run_gpu.sh
set -u
OUT=${OUT:-/tmp/fa3_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
{ cmake -S . -B build-fa3 -DATTNHOST_PLUGINS=cuda_fa3 -DCMAKE_BUILD_TYPE=Release -DATTNHOST_BUILD_TESTS=ON \
  && cmake --build build-fa3 -j16 --target cuda_fa3 fa3_check fa3_bench; } > "$OUT/build.log" 2>&1
echo "build rc=$?"; tail -3 "$OUT/build.log"
timeout 200 build-fa3/bin/fa3_check > "$OUT/check.log" 2>&1; echo "check rc=$?"
grep -E "FAIL|passed|cases|error|forward|plan" "$OUT/check.log" | head -40
timeout 150 build-fa3/bin/fa3_bench build-fa3/lib/attnhost/plugins/cuda_fa3.so ${FA3_BENCH:-all} > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep RESULT "$OUT/bench.log"; grep -v RESULT "$OUT/bench.log" | tail -5
PYTHONUNBUFFERED=1 timeout 150 python3 plugins/cuda_fa3/test/peer_sdpa.py > "$OUT/peers.log" 2>&1
echo "peers rc=$?"; grep RESULT "$OUT/peers.log"
if [ -x build-fa3/bin/attnhost ]; then
  timeout 60 build-fa3/bin/attnhost check --plugin cuda_fa3 > "$OUT/attnhost_check.log" 2>&1; echo "attnhost check rc=$?"
  tail -20 "$OUT/attnhost_check.log"
fi
