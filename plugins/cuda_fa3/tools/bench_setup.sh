# Sourced by the cuda_fa3 measurement tools (compare_f8c.sh, power_f8c.sh,
# profile_f8c.sh), run from the repository root after test/run_gpu.sh has
# built build-fa3-gpu on the GPU machine: the device build's plugin and
# fa3_bench, and one prefill shape's figure.
# inih unpacked by run_gpu.sh (the conformance CLI links it)
export LD_LIBRARY_PATH=/tmp/fa3-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-fa3-gpu
SO=$B/lib/attnhost/plugins/cuda_fa3.so
BENCH=$B/bin/fa3_bench
[ -x $BENCH ] || { echo "no $BENCH (run test/run_gpu.sh first)"; exit 1; }
# one_shape SECONDS KV8 CAUSAL L [fa3_bench option ...]: TFLOP/s of
# fa3_bench's one-shape run at head size 128 (KV8 1: an e4m3 cache with FP8
# compute, 0: bf16 KV), with the given options (e.g. --batch=100,
# --vt-scratch-mib=0); nothing if it failed.
one_shape() {
  local t=$1 kv8=$2 causal=$3 L=$4
  shift 4
  [ "$kv8" = 1 ] && set -- "$@" --fp8-attention
  timeout "$t" $BENCH "$@" $SO one 128 "$causal" "$L" "$kv8" 2>&1 | sed -n 's/^RESULT.* \([0-9.]*\) TFLOP\/s.*/\1/p'
}
