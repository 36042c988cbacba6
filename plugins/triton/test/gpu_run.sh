#!/bin/bash
# One GPU-machine session for the triton plugin: build (plugin, correctness
# driver, bench), run the correctness driver, the benchmark with several
# split counts and ragged MLA prefill, the PyTorch peers and HBM copy
# bandwidth, and (optionally) the Triton JIT tuning sweep. Logs go to $OUT
# (or ./gpu-out).
# Usage: bash plugins/triton/test/gpu_run.sh [--tune]
# Prefill runs causal and bidirectional; decode runs auto, 2 and 8 splits.
set -o pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The device image lacks inih and DLPack: unpack the carried .debs (./.deps,
# carried with the call) under /tmp and point pkg-config and CMake there.
D=/tmp/tk-deps
mkdir -p $D && for f in .deps/*.deb; do dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
{
    date -u; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
} 2>&1 | tee "$OUT/env.log"
build() {
    cmake -S . -B build-triton -DATTNHOST_PLUGINS=triton -DCMAKE_BUILD_TYPE=Release \
        -DDLPACK_INCLUDE_DIR=$D/usr/include >> "$OUT/build.log" 2>&1 &&
        cmake --build build-triton -j16 --target triton triton_check triton_bench >> "$OUT/build.log" 2>&1
}
# Other folders of this (copied) tree may be mid-edit: if the whole-project
# configure fails, retry without the optional bench/ subproject.
build || { tail -5 "$OUT/build.log"; rm -rf build-triton; mv bench/CMakeLists.txt bench/CMakeLists.txt.off 2>/dev/null; build; } ||
    { tail -30 "$OUT/build.log"; exit 1; }
timeout 240 build-triton/bin/triton_check 2>&1 | tee "$OUT/check.log"
# The host's conformance suite through the CLI, when the CLI builds.
if timeout 120 cmake --build build-triton -j16 --target attnhost_cli >> "$OUT/build.log" 2>&1; then
    timeout 150 build-triton/bin/attnhost check --plugin triton > "$OUT/conformance.log" 2>&1
    echo "attnhost check rc=$?"; tail -25 "$OUT/conformance.log"
else
    echo "attnhost CLI did not build" | tee "$OUT/conformance.log"
fi
timeout 200 build-triton/bin/triton_bench --splits auto,2,8 2>&1 | tee "$OUT/bench.log"
timeout 120 python3 bench/peers/torch_sdpa_triton_shapes.py 2>&1 | tee "$OUT/peers.log"
# The JIT tuning sweep only while the session stays inside its budget.
if [ "${1:-}" = --tune ] && [ $SECONDS -lt 260 ]; then
    timeout $((320 - SECONDS)) python3 plugins/triton/test/tune.py --prefill-only 2>&1 | tee "$OUT/tune.log"
fi
echo "=== summary"; grep -E "passed|FAIL" "$OUT/check.log" | tail -15
grep -E "passed|failed" "$OUT/conformance.log" | tail -3
grep -hE "^(decode|prefill|ragged|hbm)" "$OUT/bench.log" "$OUT/peers.log" | sed -E 's/ +/ /g'
grep -h "TFLOP" "$OUT/tune.log" 2>/dev/null
