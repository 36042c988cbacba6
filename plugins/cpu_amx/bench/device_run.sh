#!/bin/bash
# One session on the GPU machine's Xeon (AMX) for cpu_amx, sized for a run
# call of at most 240 s: build; the kernel test (every path the CPU has,
# the amx path with its defaults and its alternatives); attnhost check with
# isa = amx (defaults, then the alternatives); the ceilings (DRAM read,
# vdpbf16ps, AMX); decode and prefill on the amx path with its defaults;
# prefill again without the tile kernel's K/V prefetch (tile_prefetch = 0)
# and with the tile products in one burst per row block (amx_interleave =
# 0); optionally a baseline commit's kernels on the same shapes (see
# build_base.sh); PyTorch CPU SDPA on the same shapes (prefill first); a summary table
# (bench/summary.py); then diagnostics (diag.log: the default prefill and
# decode again, after everything else, against order effects; prefill on
# one thread). Every step runs under `timeout`, so a hung step costs its
# limit and no more (a normal run takes one to two minutes). 16 threads
# except in the diagnostics. Logs go to $OUT (env, build, test,
# bench_amx, torch, summary, diag).
# Usage: OUT=dir bash plugins/cpu_amx/bench/device_run.sh   (run tool: carry .deps)
# Exit status: the kernel test's (the report at the end only shows).
set -o pipefail
OUT=${OUT:-$PWD/cpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 OMP_PROC_BIND=close OMP_PLACES=cores
T0=$(date +%s)
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
step() { # step SECONDS LOG command...: run under timeout, note a timeout in the log
    local lim=$1 log=$2; shift 2
    timeout "$lim" "$@" >> "$log" 2>&1
    local rc=$?
    [ $rc -eq 124 ] && echo "TIMEOUT after ${lim}s: $*" >> "$log"
    echo "[$(( $(date +%s) - T0 ))s] rc=$rc $*" >> "$OUT/env.log"
    return $rc
}
build() {
    step 20 "$OUT/build.log" cmake -S . -B $B -DATTNHOST_PLUGINS=cpu_amx -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include &&
        step 45 "$OUT/build.log" cmake --build $B -j16 --target cpu_amx cpu_amx_test cpu_amx_bench
}
# A half-finished top-level bench/ of another engineer must not stop this
# session: on a failed configure, retry once without it (in this copy only).
build || { rm -rf $B; mv bench/CMakeLists.txt bench/CMakeLists.txt.off 2>/dev/null; build; } || { tail -40 "$OUT/build.log"; exit 1; }
step 25 "$OUT/build.log" cmake --build $B -j16 --target attnhost_cli || echo "attnhost CLI did not build" >> "$OUT/build.log"
L=$OUT/test.log
step 25 "$L" $B/bin/cpu_amx_test $B/lib/attnhost/plugins/cpu_amx.so; TEST_RC=$?
echo "exit $TEST_RC (every path)" >> "$L"
# The amx path with its defaults and with every alternative kernel choice
# (vdpbf16ps decode, prefill tile products in bursts, no tile K/V prefetch,
# software prefetch in decode).
ALT='amx_decode = 0\namx_interleave = 0\ntile_prefetch = 0\nprefetch = 4'
for conf in "amx" "amx-alt"; do
    extra=""; [ "$conf" = amx-alt ] && extra=$ALT
    printf "[plugin.cpu_amx]\nisa = amx\nthreads = 16\n$extra\n" > /tmp/cpu_amx_$conf.ini
    echo "== isa $conf" >> "$L"
    step 12 "$L.$conf" $B/bin/attnhost check --plugin cpu_amx --config /tmp/cpu_amx_$conf.ini
    grep -E "FAIL|conformance:|unavailable|error|TIMEOUT" "$L.$conf" | head -20 >> "$L"; rm -f "$L.$conf"
done
DEC=16:4096,32:8192,64:4096,1:16384
PRE=2048,4096,8192
BENCH="$B/bin/cpu_amx_bench --threads 16"
step 45 "$OUT/bench_amx.log" $BENCH --peaks --bw-gib 4 --isa amx --decode $DEC --prefill $PRE --reps 7
step 25 "$OUT/bench_amx.log" $BENCH --isa amx --set tile_prefetch=0 --prefill $PRE --reps 7
step 25 "$OUT/bench_amx.log" $BENCH --isa amx --set amx_interleave=0 --prefill $PRE --reps 7
# Optional baseline (build_base.sh; carry build-amx-base): the same
# prefill and two decode shapes with another commit's kernels, in this run.
if [ -d build-amx-base/src ]; then
    step 60 "$OUT/base.log" env EXTRA_CFLAGS="-I$D/usr/include" bash plugins/cpu_amx/bench/build_base.sh build-amx-base &&
        step 30 "$OUT/base.log" $BENCH --plugin build-amx-base/cpu_amx.so --isa amx --decode 16:4096,64:4096 --prefill $PRE --reps 7
fi
step 65 "$OUT/torch.log" python3 bench/peers/torch_cpu_attention.py --threads 16 --reps 7 --decode $DEC --prefill $PRE
python3 plugins/cpu_amx/bench/summary.py "$OUT" > "$OUT/summary.log" 2>&1
# Diagnostics (after the summary, so a slow session loses only these): the
# default prefill and decode again (order effects, a noisy machine), and
# prefill on one thread (the per-core rate, against 16 threads).
G=$OUT/diag.log
step 25 "$G" $BENCH --isa amx --prefill $PRE --reps 7
step 15 "$G" $BENCH --isa amx --decode 16:4096,32:8192,64:4096 --reps 7
step 20 "$G" $B/bin/cpu_amx_bench --threads 1 --isa amx --prefill 2048 --reps 3
echo "=== $(( $(date +%s) - T0 )) s"; head -3 "$OUT/env.log"
grep -E "checks|^exit|^isa .*skipped|==|conformance|FAIL|CHECK failed|unavailable|error|TIMEOUT" "$L"; grep -h TIMEOUT "$OUT"/*.log
cat "$OUT/summary.log"
grep -hE "^(decode|prefill)" "$G" | cut -d' ' -f2-
if [ -f "$OUT/base.log" ]; then
  echo "baseline:"; grep -hE "^(decode|prefill)|rror" "$OUT/base.log" | cut -d' ' -f2- | head
fi
# The report above only shows; the session's verdict is the kernel test's.
exit $TEST_RC
