#!/bin/bash
# Build, conformance and benchmarks on a GPU machine in one go.
#
#   sh scripts/gpu_deps.sh            (here, once: packages the GPU machine lacks)
#   bash bench/gpu_session.sh [part]  (there, from the repository root, .deps carried)
#
# part: all (default), build (only), check (build + list + conformance of every plugin +
# host overhead), bench (build + `attnhost bench` of every GPU plugin + the
# PyTorch SDPA peer + device copy bandwidth + the real FlashInfer when
# its wheels are carried in .whl: sh scripts/gpu_wheels.sh) or zoo (build +
# `attnhost bench --model` of ZOO_MODELS, `attnhost tune` of each and the
# bindings it gives under [select] policy = measured against priority,
# bench/peers/zoo_peers.py with the real FlashInfer when .whl is carried, one
# table from bench/zoo_table.py; --quick steps unless ZOO_FULL=1, ZOO_TUNE=0
# skips the tune; resumable: a second call on the same machine goes on where
# the first stopped; not part of all), features (soft-cap, ALiBi, a window and
# sinks against the plain layer of the same shape, every GPU plugin; not part
# of all), ab (build + before and after a change on models' rows: BASE's
# tree and this one timed in alternation, ROUNDS times,
# `attnhost bench --model M --plugin P` for M in AB_MODELS (default
# llama-3-8b) and P in AB_PLUGINS (default GPU_PLUGINS), the zoo's quick
# steps or AB_STEPS ("--step d64x8192 ..."), one table per plugin from
# bench/ab_table.py; needs BASE; not part of all) or cp (build + context parallelism on every
# GPU of the machine: the conformance suite's cp- cases over NCCL on 2 and 4 GPUs
# (check runs them with the ranks sharing one GPU), the Python package's NCCL test, and
# `attnhost bench --cp N`; not part of all). Parts combine: check,cp. Every step runs under a time
# limit; logs go to $OUT (default ./gpu-out) and a summary prints last.
# Timings span BATCH calls back to back (default 10; BATCH=1: one call on
# an idle GPU per timing, the host's launch time included).
# GPU_PLUGINS picks the GPU plugins (default: cuda_fa3 cuda_flashinfer
# triton). BASE=<dir> also builds the tree in <dir> (an older commit, from
# `git archive`) and runs each plugin's bench on it and on this tree in
# alternation, ROUNDS times (default 2): before and after in one call.
set -u
part=${1:-all}
has() { [ "$part" = all ] || [[ ",$part," == *",$1,"* ]]; }
gpu_plugins=${GPU_PLUGINS:-cuda_fa3 cuda_flashinfer triton}
BASE=${BASE:-}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-$PWD/gpu-out}
BATCH=${BATCH:-10}
# bench --cp shapes: B16 at 256k and 1M tokens, B32 at 128k (CP_STEPS='': the full set)
cp_steps=${CP_STEPS---step d16x262144 --step d32x131072 --step d16x1048576}
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
build() { # build <source dir> <build dir>
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DDLPACK_INCLUDE_DIR=$D/usr/include \
        -DATTNHOST_PLUGINS="cpu_amx;${gpu_plugins// /;}" && cmake --build "$2" -j"$(nproc)"
}
[ -n "$BASE" ] && { build "$BASE" build-base > "$OUT/build-base.log" 2>&1; echo $? > "$OUT/build-base.rc"; } &
build . $B > "$OUT/build.log" 2>&1
rc=$?
wait
note "build: rc=$rc in $(( $(date +%s) - start )) s${BASE:+, base rc=$(cat "$OUT/build-base.rc")}"
[ $rc -eq 0 ] || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
AH=$B/bin/attnhost
[ "$part" = build ] && exit 0

# The zoo's setup comes before the checks, so that FlashInfer's JIT builds
# (minutes of CPU) overlap them.
if [[ ",$part," == *",zoo,"* ]]; then
    zoo_models=${ZOO_MODELS:-llama-3-8b llama-3-8b-fp8 qwen2.5-7b llama-3-70b-tp8 gemma-2-9b gpt-oss-120b deepseek-v3 deepseek-v3-tp8 deepseek-v3-fp8 deepseek-v3-tp8-fp8 deepseek-v3-tp16-fp8 mpt-7b gemma-3-12b}
    q=--quick; [ -n "${ZOO_FULL:-}" ] && q=
    # Each finished piece is kept in ZS and skipped by a later call on the
    # same machine, so the zoo may span calls; everything comes back in zoo.tgz.
    ZS=${ZOO_STATE:-/tmp/attnhost-zoo}
    mkdir -p "$ZS"
    # ZOO_DEADLINE (epoch seconds): start no piece that may not finish by then
    left() { echo $(( ${ZOO_DEADLINE:-$(( $(date +%s) + 100000 ))} - $(date +%s) )); }
    ncpu=$(nproc)
    fi=
    if ls .whl/flashinfer_python-*.whl > /dev/null 2>&1; then # carried: sh scripts/gpu_wheels.sh
        [ -d /tmp/site/flashinfer ] || python3 -m pip install -q --no-index --no-deps --no-compile \
            --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > "$ZS/pip.log" 2>&1
        export PYTHONPATH=/tmp/site FLASHINFER_WORKSPACE_BASE=/tmp/fi-jit FLASHINFER_CUDA_ARCH_LIST=9.0a
        fi=1
    fi
    # FlashInfer builds each kernel the first time it runs: build them for
    # every row's shape now, at low priority on the cores the timings leave
    warm_pid=
    if [ -n "$fi" ] && [ ! -f "$ZS/warm.done" ]; then
        for m in $zoo_models; do
            timeout 60 $AH bench --no-cache --plugin cpu_amx --model examples/models/$m.ini \
                --step d2x64 --step p1x64 --iters 1 --json > "$ZS/shape_$m.json" 2>> "$ZS/shape.err"
        done
        (taskset -c 4-$((ncpu - 1)) nice -n 19 timeout 900 python3 -W ignore bench/peers/zoo_peers.py \
            "$ZS"/shape_*.json --warm-flashinfer > "$ZS/warm.log" 2>&1 && touch "$ZS/warm.done") &
        warm_pid=$!
    fi
fi

if has check; then
    timeout 60 $AH list --no-cache > "$OUT/list.log" 2>&1
    grep -E "^\S+ .*\[" "$OUT/list.log" | tee -a "$summary"
    for p in $gpu_plugins; do
        timeout 170 $AH check --no-cache --plugin $p > "$OUT/check_$p.log" 2>&1
        note "check $p: rc=$? $(grep -E '^conformance:' "$OUT/check_$p.log")"
        grep -E " FAIL " "$OUT/check_$p.log" | head -5 | tee -a "$summary"
    done
    (cd $B && timeout 400 ctest -L gpu -E conformance_gpu --output-on-failure) > "$OUT/ctest_gpu.log" 2>&1
    note "ctest -L gpu (plugin checkers): rc=$? $(grep 'tests passed' "$OUT/ctest_gpu.log")"
    grep -E "\*\*\*Failed|FAIL" "$OUT/ctest_gpu.log" | head -5 | tee -a "$summary"
    printf '[plugin.cpu_amx]\nisa = amx\n' > "$OUT/amx.ini"
    timeout 120 $AH check --no-cache --plugin cpu_amx --config "$OUT/amx.ini" > "$OUT/check_cpu_amx.log" 2>&1
    note "check cpu_amx (isa=amx): rc=$? $(grep -E '^conformance:' "$OUT/check_cpu_amx.log")"
    timeout 120 $B/bin/bench_host --iters 200 > "$OUT/bench_host.log" 2>&1
    note "host overhead:"; tee -a "$summary" < "$OUT/bench_host.log"
fi

if has bench; then
    for p in $gpu_plugins; do
        for r in $(seq "$ROUNDS"); do
            for t in $B ${BASE:+build-base}; do
                log="$OUT/bench_${p}_$(basename $t)_$r.log"
                timeout 150 $t/bin/attnhost bench --no-cache --plugin $p --back-to-back $BATCH > "$log" 2>&1
                note "bench $p ($t, round $r): rc=$?"; tee -a "$summary" < "$log"
            done
            [ -n "$BASE" ] || break
        done
    done
    timeout 150 python3 -W ignore bench/peers/torch_sdpa.py --standard --reps 30 --batch $BATCH > "$OUT/peers.log" 2>&1
    note "peers (PyTorch SDPA): rc=$?"; tee -a "$summary" < "$OUT/peers.log"
    if ls .whl/flashinfer_python-*.whl > /dev/null 2>&1; then # carried: sh scripts/gpu_wheels.sh
        OUT=$OUT/flashinfer timeout 240 bash bench/peers/flashinfer_session.sh --reps 30 --batch $BATCH \
            > "$OUT/peer_flashinfer.log" 2>&1
        note "peer (real FlashInfer): rc=$?"; grep "^|" "$OUT/peer_flashinfer.log" | tee -a "$summary"
    fi
fi
if [[ ",$part," == *",zoo,"* ]]; then
    files=
    for m in $zoo_models; do
        if [ ! -f "$ZS/zoo_$m.done" ] && [ "$(left)" -lt 150 ]; then
            note "zoo bench $m: left for a later call"
        elif [ ! -f "$ZS/zoo_$m.done" ]; then
            taskset -c 0-3 timeout 400 $AH bench --no-cache --model examples/models/$m.ini $q \
                --back-to-back $BATCH --iters 20 --json > "$ZS/zoo_$m.json" 2> "$ZS/zoo_$m.err"
            rc=$?
            note "zoo bench $m: rc=$rc $(grep -c skipped "$ZS/zoo_$m.json") rows skipped"
            # rc 1 when a row failed; the file stands when it is whole (the row says why)
            python3 -c "import json, sys; json.load(open(sys.argv[1]))" "$ZS/zoo_$m.json" 2> /dev/null &&
                touch "$ZS/zoo_$m.done"
        fi
        [ -f "$ZS/zoo_$m.done" ] && files="$files $ZS/zoo_$m.json"
    done
    if [ "${ZOO_TUNE:-1}" != 0 ]; then
        printf '[search]\ncache = %s/cache/scan-cache\n[select]\npolicy = measured\n' "$ZS" > "$ZS/measured.ini"
        for m in $zoo_models; do
            timeout 120 $AH tune --config "$ZS/measured.ini" --model examples/models/$m.ini $q --iters 10 \
                > "$ZS/tune_$m.log" 2>&1
            note "tune $m: rc=$?"; grep -E "fastest|recorded|warning" "$ZS/tune_$m.log" | tee -a "$summary"
            { echo "== $m priority"; $AH bind --no-cache --model examples/models/$m.ini
              echo "== $m measured"; $AH bind --config "$ZS/measured.ini" --model examples/models/$m.ini; } \
                >> "$ZS/bind_policy.log" 2>&1
        done
    fi
    [ -n "$warm_pid" ] && [ "$(left)" -lt 240 ] && { pkill -f -- --warm-flashinfer; warm_pid=; note "flashinfer JIT: left for a later call"; }
    [ -n "$warm_pid" ] && { wait "$warm_pid"; note "flashinfer JIT warm-up: $(grep -c ': ok' "$ZS/warm.log") rows ok"; }
    # the peers take minutes with FlashInfer, under one with SDPA alone
    peers_need=240; [ -n "$fi" ] || peers_need=90
    if [ ! -f "$ZS/peers.done" ] && [ "$(left)" -lt $peers_need ]; then
        note "zoo peers: left for a later call"
    elif [ ! -f "$ZS/peers.done" ]; then
        noflash=; [ -n "$fi" ] || noflash=--no-flashinfer
        t=$(( $(left) - 20 )); [ $t -gt 500 ] && t=500
        timeout $t python3 -W ignore bench/peers/zoo_peers.py $files --reps 20 --batch $BATCH $noflash \
            > "$ZS/zoo_peers.json" 2> "$ZS/zoo_peers.log"
        rc=$?
        note "zoo peers: rc=$rc"
        [ $rc -eq 0 ] && touch "$ZS/peers.done"
    fi
    python3 bench/zoo_table.py $files --peers "$ZS/zoo_peers.json" > "$ZS/zoo_table.md" 2>&1
    tee -a "$summary" < "$ZS/zoo_table.md"
    tar czf "$OUT/zoo.tgz" -C "$ZS" --exclude cache .
fi
if [[ ",$part," == *",ab,"* ]]; then
    [ -n "$BASE" ] || { note "ab: BASE (the tree before the change) is not set"; exit 1; }
    [ -x build-base/bin/attnhost ] || { note "ab: the base tree did not build (build-base.log)"; exit 1; }
    mkdir -p "$OUT/ab"
    for p in ${AB_PLUGINS:-$gpu_plugins}; do
        for r in $(seq "$ROUNDS"); do
            for m in ${AB_MODELS:-llama-3-8b}; do
                for t in $B build-base; do
                    f="$OUT/ab/$(basename $t)_${m}_${p}_$r.json"
                    timeout 150 $t/bin/attnhost bench --no-cache --plugin $p --model examples/models/$m.ini \
                        ${AB_STEPS:---quick} --back-to-back $BATCH --iters 20 --json > "$f" 2> "${f%.json}.err"
                    note "ab $p $m $(basename $t) round $r: rc=$?"
                done
            done
        done
        python3 bench/ab_table.py --backend $p --before "$OUT"/ab/build-base_*_${p}_*.json \
            --after "$OUT"/ab/${B}_*_${p}_*.json > "$OUT/ab_$p.md" 2>&1
        tee -a "$summary" < "$OUT/ab_$p.md"
    done
fi
if [[ ",$part," == *",features,"* ]]; then
    # each feature against the plain layer of the same shape (32/8 d128 bf16), every GPU plugin
    fsteps="--step p1x8192 --step p4x2048 --step d64x8192 --step d16x4096"
    for p in $gpu_plugins; do
        for f in "" "--softcap 30" "--alibi" "--window 4096" "--sinks"; do
            timeout 150 $AH bench --no-cache --plugin $p --heads 32/8 --head-size 128 $f $fsteps \
                --back-to-back $BATCH --iters 20 > "$OUT/feat.log" 2>&1
            note "features $p ${f:-plain}: rc=$?"; grep -E "^  [dpm][0-9].* $p " "$OUT/feat.log" | tee -a "$summary"
        done
    done
fi
if [[ ",$part," == *",cp,"* ]]; then
    ngpu=$(nvidia-smi -L | wc -l)
    # NCCL from PyTorch's wheel; NVLink multicast stays off (the machine's rule)
    nccl=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null)
    export LD_LIBRARY_PATH=$nccl:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
    for p in $gpu_plugins; do
        for n in 2 4; do
            [ "$ngpu" -ge $n ] || continue
            timeout 200 $B/bin/run_conformance --class gpu --plugin $p --match cp- --cp-devices $n \
                $PWD/$B/lib/attnhost/plugins > "$OUT/cp_nccl${n}_$p.log" 2>&1
            note "cp $p, NCCL over $n GPUs: rc=$? $(grep -E '^conformance:' "$OUT/cp_nccl${n}_$p.log")"
            grep -E " FAIL " -A1 "$OUT/cp_nccl${n}_$p.log" | head -6 | tee -a "$summary"
        done
    done
    if [ "$ngpu" -ge 2 ]; then
        ATTNHOST_CP_PLUGIN=${gpu_plugins%% *} ATTNHOST_LIB=$PWD/$B/lib/libattnhost.so timeout 200 \
            python3 -m pytest -q -p no:cacheprovider python/tests/test_cp.py -k nccl > "$OUT/cp_python.log" 2>&1
        note "cp python (NCCL, 2 GPUs): rc=$? $(tail -1 "$OUT/cp_python.log")"
    fi
    for p in $gpu_plugins; do
        timeout 300 $AH bench --no-cache --plugin $p --cp "$ngpu" $cp_steps > "$OUT/cp_bench_$p.log" 2>&1
        note "bench --cp $ngpu $p: rc=$?"; tee -a "$summary" < "$OUT/cp_bench_$p.log"
    done
fi
echo "==== summary"
cat "$summary"
