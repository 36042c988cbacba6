#!/bin/bash
# One session on the GPU machine's Xeon (AMX) for cpu_amx: build, the kernel
# test on the amx and avx512bf16 paths, attnhost check on both, the bench
# (ceilings: DRAM read, vdpbf16ps and AMX peaks; decode and prefill shapes;
# OpenBLAS sbgemm), and the PyTorch CPU SDPA peer on the same shapes, all
# with 16 threads. Logs go to $OUT (at most 8 files).
# Usage: OUT=dir bash plugins/cpu_amx/bench/device_run.sh   (run tool: carry .deps)
set -o pipefail
OUT=${OUT:-$PWD/cpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_PROC_BIND=close OMP_PLACES=cores
B=build-cpu-dev
# The device image lacks inih and DLPack: unpack the carried .debs (./.deps,
# pass carry=[".deps"]) under /tmp and point pkg-config and CMake there.
D=/tmp/cpu-deps
mkdir -p $D && for f in .deps/*.deb; do dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
{
    date -u; git rev-parse HEAD 2>/dev/null; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|NUMA|L3|Flags" | cut -c1-400
    grep -E "MemTotal" /proc/meminfo; cat /sys/kernel/mm/transparent_hugepage/enabled
} > "$OUT/env.log" 2>&1
build() {
    cmake -S . -B $B -DATTNHOST_PLUGINS=cpu_amx -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include >> "$OUT/build.log" 2>&1 &&
        cmake --build $B -j16 --target cpu_amx cpu_amx_test cpu_amx_amxemu cpu_amx_bench >> "$OUT/build.log" 2>&1
}
build || { rm -rf $B; mv bench/CMakeLists.txt bench/CMakeLists.txt.off 2>/dev/null; build; } || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build $B -j16 --target attnhost_cli >> "$OUT/build.log" 2>&1 || echo "attnhost CLI did not build" >> "$OUT/build.log"
{
    timeout 90 $B/bin/cpu_amx_test $B/lib/attnhost/plugins/cpu_amx.so; echo "exit $? (every path)"
    timeout 30 $B/bin/cpu_amx_test $B/lib/cpu_amx_amxemu.so amx | tail -2
} > "$OUT/test.log" 2>&1
DEC=16:4096,32:8192,64:4096,64:16384,1:16384
PRE=2048,4096,8192
timeout 120 $B/bin/cpu_amx_bench --peaks --bw-gib 4 --isa amx --threads 16 --decode $DEC --prefill $PRE --reps 7 --blas > "$OUT/bench_amx.log" 2>&1
timeout 110 python3 bench/peers/torch_cpu_attention.py --threads 16 --reps 7 --decode $DEC --prefill $PRE > "$OUT/torch.log" 2>&1
if [ -x $B/bin/attnhost ]; then
    for isa in amx avx512bf16; do
        printf '[plugin.cpu_amx]\nisa = %s\nthreads = 16\n' $isa > /tmp/cpu_amx_$isa.ini
        echo "== isa $isa"; timeout 50 $B/bin/attnhost check --plugin cpu_amx --config /tmp/cpu_amx_$isa.ini 2>&1 | grep -E "FAIL|conformance:|unavailable|error" | head -20
    done > "$OUT/check.log" 2>&1
fi
timeout 60 $B/bin/cpu_amx_bench --isa avx512bf16 --threads 16 --decode 32:8192 --prefill 2048,8192 --reps 5 > "$OUT/bench_avx512bf16.log" 2>&1
echo "=== summary"; head -3 "$OUT/env.log"; grep -E "checks|exit|skipped" "$OUT/test.log"; cat "$OUT/check.log" 2>/dev/null
grep -hE "^(machine|peak|decode|prefill|blas|torch)" "$OUT"/bench_*.log "$OUT/torch.log"
