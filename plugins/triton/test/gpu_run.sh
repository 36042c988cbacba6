#!/bin/bash
# One GPU-machine session for the triton plugin: build (plugin, correctness
# driver, bench), run the correctness driver, the benchmark with several
# split counts, the PyTorch peers and HBM copy bandwidth, and (optionally)
# the Triton JIT tuning sweep. Logs go to $OUT (or ./gpu-out).
# Usage: bash plugins/triton/test/gpu_run.sh [--tune]
set -o pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
    date -u; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
} 2>&1 | tee "$OUT/env.log"
build() {
    cmake -S . -B build-triton -DATTNHOST_PLUGINS=triton -DCMAKE_BUILD_TYPE=Release >> "$OUT/build.log" 2>&1 &&
        cmake --build build-triton -j16 --target triton triton_check triton_bench >> "$OUT/build.log" 2>&1
}
# Other folders of this (copied) tree may be mid-edit: if the whole-project
# configure fails, retry without the optional bench/ subproject.
build || { tail -5 "$OUT/build.log"; rm -rf build-triton; mv bench/CMakeLists.txt bench/CMakeLists.txt.off 2>/dev/null; build; } ||
    { tail -30 "$OUT/build.log"; exit 1; }
timeout 240 build-triton/bin/triton_check 2>&1 | tee "$OUT/check.log"
timeout 200 build-triton/bin/triton_bench --splits auto,1,2,4,8,16 2>&1 | tee "$OUT/bench.log"
timeout 120 python3 bench/peers/torch_sdpa_triton_shapes.py 2>&1 | tee "$OUT/peers.log"
if [ "$1" = --tune ]; then
    timeout 150 python3 plugins/triton/test/tune.py 2>&1 | tee "$OUT/tune.log"
fi
echo "=== summary"; grep -E "passed|FAIL" "$OUT/check.log" | tail -15
grep -E "^(decode|prefill|hbm)" "$OUT/bench.log" "$OUT/peers.log"
