#!/bin/bash
# One GPU session for cuda_flashinfer: build (sm_90 only, to save device
# time), correctness driver, host conformance suite (when the CLI builds),
# benchmarks, PyTorch SDPA peer. Logs go to $OUT (or ./gpu-out).
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
B=build-fi-gpu
# The device image lacks inih and DLPack: unpack the carried .debs (./.deps)
# under /tmp and point pkg-config and CMake there.
D=/tmp/fi-deps
mkdir -p $D && for f in .deps/*.deb; do dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -DATTNHOST_PLUGINS=cuda_flashinfer -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
start=$(date +%s)
cmake --build $B -j16 --target cuda_flashinfer fi_check fi_bench > "$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
(cmake --build $B -j16 --target attnhost_cli > "$OUT/cli_build.log" 2>&1 && echo "cli built") || echo "cli did not build"
timeout 200 $B/bin/fi_check ${CHECK_ARGS:-} > "$OUT/check.log" 2>&1; echo "fi_check rc=$?"
grep -E "^FAIL|summary|device" -A1 "$OUT/check.log" | head -60
timeout 150 $B/bin/fi_bench --reps ${REPS:-30} > "$OUT/bench.log" 2>&1; echo "fi_bench rc=$?"
cat "$OUT/bench.log"
timeout 100 python3 bench/peers/torch_sdpa.py --reps 30 > "$OUT/peer.log" 2>&1; echo "peer rc=$?"
cat "$OUT/peer.log"
if [ -x $B/bin/attnhost ]; then
  timeout 120 $B/bin/attnhost check --plugin cuda_flashinfer > "$OUT/conformance.log" 2>&1
  echo "attnhost check rc=$?"; tail -25 "$OUT/conformance.log"
fi
