#!/bin/bash
# One device session for cuda_fa3, bounded to about 6 minutes: build, the
# oracle check (bf16/fp16 and FP8-KV cases, then the FP8-KV cases with FP8
# math allowed, with V^T shared for every request, and with a scratch too
# small for every request) and the host's
# conformance suite (its fp8-attn cases run the FP8 kernel) with fp8_compute
# auto (the default) and off, and with V^T shared for every request;
# attnhost run over gpt-oss's windowed layer with released blocks; a bad
# fp8_vt_scratch_mib must be refused; the prefill
# benchmarks (d128, d64, d256, bf16 KV; d128 with an fp8 e4m3 KV cache,
# widened and with FP8 compute) and decode (bf16, fp8 both ways); and the
# SDPA peers (cuDNN, flash) plus HBM bandwidth on the same GPU.
# Logs go under $OUT; a summary table is printed last (summary.py).
# Run from the repository root with .deps carried (the device image lacks
# inih and DLPack):  bash plugins/cuda_fa3/test/run_gpu.sh [fa3_bench options]
# The arguments go to fa3_bench (e.g. --batch=5: five forwards per timing;
# --batch is handed to the SDPA peers too).
# Every step runs under `timeout`, capped by what is left of a global
# deadline (FA3_DEADLINE_S, default 340 s), so the script cannot hang.
# FA3_PEERS=0 leaves the SDPA peers out (when the call's time is short);
# FA3_STEPS=build only builds.
set -u
OUT=${OUT:-/tmp/fa3_out}
mkdir -p "$OUT"
. "$(dirname "$0")/../tools/deadline.sh" "${FA3_DEADLINE_S:-340}"

D=/tmp/fa3-deps
mkdir -p $D && for f in .deps/*.deb; do [ -e "$f" ] && dpkg -x "$f" $D; done
export PKG_CONFIG_PATH=$D/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
export LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=build-fa3-gpu
timeout 20 nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
git log -1 --format='commit %h %s' > "$OUT/commit.txt" 2>/dev/null

{ timeout "$(tmo 60)" cmake -S . -B $B -DATTNHOST_PLUGINS=cuda_fa3 -DCMAKE_BUILD_TYPE=Release \
    -DDLPACK_INCLUDE_DIR=$D/usr/include \
  && timeout "$(tmo 200)" cmake --build $B -j16 --target cuda_fa3 fa3_check fa3_bench; } > "$OUT/build.log" 2>&1
echo "build rc=$? at $(el)" | tee "$OUT/steps.txt"
grep -E "error" -A3 "$OUT/build.log" | head -30
grep -E "spill|Used [0-9]+ registers" "$OUT/build.log" | head -20 > "$OUT/ptxas.txt"
if timeout "$(tmo 90)" cmake --build $B -j16 --target attnhost_cli >> "$OUT/build.log" 2>&1; then
  echo "cli built at $(el)" | tee -a "$OUT/steps.txt"
else
  echo "cli did not build at $(el)" | tee -a "$OUT/steps.txt"
fi

# FA3_STEPS=build stops here (a variant comparison, tools/compare_f8c.sh,
# runs its own checks and timings next).
if [ "${FA3_STEPS:-all}" = build ]; then echo "total $(el)"; exit 0; fi

export ATTNHOST_PLUGIN_PATH=$PWD/$B/lib/attnhost/plugins
printf '[plugin.cuda_fa3]\nfp8_compute = off\n' > "$OUT/f8off.ini"
if [ -x $B/bin/fa3_check ]; then
  timeout "$(tmo 100)" $B/bin/fa3_check > "$OUT/check.log" 2>&1
  echo "fa3_check rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  grep -E "FAIL|DIFFER|cases passed|refused|forward:|plan:|write_kv:|capture:|replay:" "$OUT/check.log" | head -40
  timeout "$(tmo 60)" $B/bin/fa3_check --fp8-attention $B/lib/attnhost/plugins/cuda_fa3.so fp8kv > "$OUT/check_f8c.log" 2>&1
  echo "fa3_check FP8 math (--fp8-attention, fp8kv cases) rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  grep -E "FAIL|DIFFER|cases passed|forward:|plan:|capture:|replay:|fp8 compute" "$OUT/check_f8c.log" | head -40
  # Shared V^T on every request (min reads 1): readers copy what is out;
  # with a 1 MiB scratch each batch mixes shared requests and in-kernel ones.
  for vt in "--vt-min-reads=1" "--vt-min-reads=1 --vt-scratch-mib=1"; do
    timeout "$(tmo 60)" $B/bin/fa3_check $vt --fp8-attention $B/lib/attnhost/plugins/cuda_fa3.so fp8kv \
      > "$OUT/check_vt.log" 2>&1
    echo "fa3_check FP8 math, V^T ($vt) rc=$? $(grep -E 'cases passed' "$OUT/check_vt.log") at $(el)" \
      | tee -a "$OUT/steps.txt"
    grep -E "FAIL|forward:|plan:|capture:|replay:" "$OUT/check_vt.log" | head -10
  done
fi
if [ -x $B/bin/attnhost ]; then
  timeout "$(tmo 75)" $B/bin/attnhost check --plugin cuda_fa3 > "$OUT/attnhost_check.log" 2>&1
  echo "attnhost check rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  tail -6 "$OUT/attnhost_check.log"
  grep -E "fp8" "$OUT/attnhost_check.log" | head -8
  timeout "$(tmo 75)" $B/bin/attnhost check --plugin cuda_fa3 --config "$OUT/f8off.ini" > "$OUT/attnhost_check_f8off.log" 2>&1
  echo "attnhost check fp8_compute=off rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  grep -iE "fail|fp8" "$OUT/attnhost_check_f8off.log" | head -12; tail -2 "$OUT/attnhost_check_f8off.log"
  printf '[plugin.cuda_fa3]\nfp8_vt_min_reads = 1\n' > "$OUT/vt1.ini"
  timeout "$(tmo 75)" $B/bin/attnhost check --plugin cuda_fa3 --config "$OUT/vt1.ini" > "$OUT/attnhost_check_vt1.log" 2>&1
  echo "attnhost check fp8_vt_min_reads=1 rc=$? $(tail -1 "$OUT/attnhost_check_vt1.log") at $(el)" | tee -a "$OUT/steps.txt"
  grep -iE "fail|fp8" "$OUT/attnhost_check_vt1.log" | head -6
  # Released blocks through the host: gpt-oss's sliding-window group
  # releases the blocks its window passed during decode, every layer
  # checked against the oracle (the import needs json-c; skipped without).
  if timeout 20 $B/bin/attnhost model import tests/data/hf_configs/gpt-oss-120b.json --kv-groups hybrid \
      -o "$OUT/gpt-oss.ini" > "$OUT/run_released.log" 2>&1; then
    timeout "$(tmo 60)" $B/bin/attnhost run --no-cache --plugin cuda_fa3 --model "$OUT/gpt-oss.ini" \
      --batch 4 --prompt-len 300 --steps 3 --layers 2 >> "$OUT/run_released.log" 2>&1
    echo "attnhost run gpt-oss (released blocks) rc=$? at $(el)" | tee -a "$OUT/steps.txt"
    grep -E "released|PASS|FAIL|error" "$OUT/run_released.log" | head -4
  fi
  printf '[plugin.cuda_fa3]\nfp8_vt_scratch_mib = lots\n' > "$OUT/vtbad.ini"
  timeout "$(tmo 30)" $B/bin/attnhost check --plugin cuda_fa3 --config "$OUT/vtbad.ini" > "$OUT/attnhost_check_vtbad.log" 2>&1
  echo "attnhost check fp8_vt_scratch_mib=lots (must refuse) rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  grep -m3 "fp8_vt_scratch_mib" "$OUT/attnhost_check_vtbad.log"
fi
if [ -x $B/bin/fa3_bench ]; then
  timeout "$(tmo 80)" $B/bin/fa3_bench "$@" $B/lib/attnhost/plugins/cuda_fa3.so ${FA3_BENCH:-final} > "$OUT/bench.log" 2>&1
  echo "bench rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  timeout "$(tmo 40)" $B/bin/fa3_bench "$@" --fp8-attention $B/lib/attnhost/plugins/cuda_fa3.so fp8 >> "$OUT/bench.log" 2>&1
  echo "bench FP8 math (--fp8-attention) rc=$? at $(el)" | tee -a "$OUT/steps.txt"
  grep -v RESULT "$OUT/bench.log" | tail -4
fi
if [ "${FA3_PEERS:-1}" = 1 ]; then
  timeout "$(tmo 90)" python3 plugins/cuda_fa3/test/peer_sdpa.py $(printf '%s\n' "$@" | grep '^--batch=') 128 64 256 \
    > "$OUT/peers.log" 2>&1
  echo "peers rc=$? at $(el)" | tee -a "$OUT/steps.txt"
fi

timeout 20 python3 plugins/cuda_fa3/test/summary.py "$OUT" | tee "$OUT/summary.txt"
echo "total $(el)"
