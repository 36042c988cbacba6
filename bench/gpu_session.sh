#!/bin/bash
# Build, conformance and benchmarks on a GPU machine in one go.
#
#   sh scripts/gpu_deps.sh            (here, once: packages the GPU machine lacks)
#   bash bench/gpu_session.sh [part]  (there, from the repository root, .deps carried)
#
# part: all (default), check (build + list + conformance of every plugin +
# host overhead) or bench (build + `attnhost bench` of every GPU plugin + the
# PyTorch SDPA peer + device copy bandwidth + the real FlashInfer when
# its wheels are carried in .whl: sh scripts/gpu_wheels.sh). Every step runs under a time
# limit; logs go to $OUT (default ./gpu-out) and a summary prints last.
# Timings span BATCH calls back to back (default 10; BATCH=1: one call on
# an idle GPU per timing, the host's launch time included).
set -u
part=${1:-all}
OUT=${OUT:-$PWD/gpu-out}
BATCH=${BATCH:-10}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
B=build-gpu
D=/tmp/attnhost-deps
mkdir -p $D && for f in .deps/*.deb; do [ -f "$f" ] && dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

{ date -u; git rev-parse --short HEAD 2>/dev/null; nproc; lscpu | grep -E "Model name|Flags" | cut -c1-200
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  python3 -c "import torch; print('torch', torch.__version__)"; } > "$OUT/env.log" 2>&1
head -4 "$OUT/env.log"

start=$(date +%s)
{ cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include \
      -DATTNHOST_PLUGINS="cpu_amx;cuda_flashinfer;cuda_fa3;triton" &&
  cmake --build $B -j"$(nproc)"; } > "$OUT/build.log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - start )) s"
[ $rc -eq 0 ] || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
AH=$B/bin/attnhost
gpu_plugins="cuda_fa3 cuda_flashinfer triton"

if [ "$part" = all ] || [ "$part" = check ]; then
    timeout 60 $AH list --no-cache > "$OUT/list.log" 2>&1
    grep -E "^\S+ .*\[" "$OUT/list.log" | tee -a "$summary"
    for p in $gpu_plugins; do
        timeout 170 $AH check --no-cache --plugin $p > "$OUT/check_$p.log" 2>&1
        note "check $p: rc=$? $(grep -E '^conformance:' "$OUT/check_$p.log")"
        grep -E " FAIL " "$OUT/check_$p.log" | head -5 | tee -a "$summary"
    done
    printf '[plugin.cpu_amx]\nisa = amx\n' > "$OUT/amx.ini"
    timeout 120 $AH check --no-cache --plugin cpu_amx --config "$OUT/amx.ini" > "$OUT/check_cpu_amx.log" 2>&1
    note "check cpu_amx (isa=amx): rc=$? $(grep -E '^conformance:' "$OUT/check_cpu_amx.log")"
    timeout 120 $B/bin/bench_host --iters 200 > "$OUT/bench_host.log" 2>&1
    note "host overhead:"; tee -a "$summary" < "$OUT/bench_host.log"
fi

if [ "$part" = all ] || [ "$part" = bench ]; then
    for p in $gpu_plugins; do
        timeout 150 $AH bench --no-cache --plugin $p --back-to-back $BATCH > "$OUT/bench_$p.log" 2>&1
        note "bench $p: rc=$?"; tee -a "$summary" < "$OUT/bench_$p.log"
    done
    timeout 150 python3 -W ignore bench/peers/torch_sdpa.py --standard --reps 30 --batch $BATCH > "$OUT/peers.log" 2>&1
    note "peers (PyTorch SDPA): rc=$?"; tee -a "$summary" < "$OUT/peers.log"
    if ls .whl/flashinfer_python-*.whl > /dev/null 2>&1; then # carried: sh scripts/gpu_wheels.sh
        OUT=$OUT/flashinfer timeout 240 bash bench/peers/flashinfer_session.sh --reps 30 --batch $BATCH \
            > "$OUT/peer_flashinfer.log" 2>&1
        note "peer (real FlashInfer): rc=$?"; grep "^|" "$OUT/peer_flashinfer.log" | tee -a "$summary"
    fi
fi
echo "==== summary"
cat "$summary"
