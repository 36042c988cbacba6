#!/bin/bash
# fi head-group padding: verify and measure (one call)
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-$PWD/gpu-out}; mkdir -p $OUT
OUT=$OUT bash bench/gpu_session.sh build > $OUT/build_session.log 2>&1 || { tail -30 $OUT/build_session.log; exit 1; }
B=build-gpu; AH=$B/bin/attnhost
export LD_LIBRARY_PATH=/tmp/attnhost-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
$B/bin/fi_heads_test 2>&1 | tail -1
timeout 200 $B/bin/fi_check > $OUT/fi_check.log 2>&1; echo "fi_check rc=$? $(tail -1 $OUT/fi_check.log)"
grep FAIL $OUT/fi_check.log | head -5
for p in cuda_flashinfer cuda_fa3 triton; do
  timeout 170 $AH check --no-cache --plugin $p > $OUT/check_$p.log 2>&1
  echo "check $p rc=$? $(grep -E '^conformance:' $OUT/check_$p.log)"; grep " FAIL " -A1 $OUT/check_$p.log | head -4
done
echo "== decode ms (median, --back-to-back 10): heads batch context: fi fa3 triton"
for h in 28/4 40/8 24/8 12/2 32/8; do for bc in "16 4096" "64 8192"; do set -- $bc; line="$h $1x$2:"
  for p in cuda_flashinfer cuda_fa3 triton; do
    v=$(timeout 60 $AH bench --no-cache --plugin $p --phase decode --batch $1 --context $2 --heads $h --head-size 128 --back-to-back 10 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); r=d['results'][0]; print('%.4f/%.0f%%' % (r['median_ms'], 100*r['bw_fraction']))" 2>/dev/null)
    line="$line $p=$v"; done; echo "$line"; done; done
timeout 100 $AH bench --no-cache --model examples/models/qwen2.5-7b.ini --quick --back-to-back 10 --iters 10 --json > $OUT/zoo_qwen.json 2> $OUT/zoo_qwen.err
timeout 150 python3 -W ignore bench/peers/zoo_peers.py $OUT/zoo_qwen.json --reps 10 --batch 10 --no-flashinfer > $OUT/peers_qwen.json 2> $OUT/peers_qwen.err
python3 bench/zoo_table.py $OUT/zoo_qwen.json --peers $OUT/peers_qwen.json 2>&1 | tail -6
ATTNHOST_LIB=$PWD/$B/lib/libattnhost.so timeout 200 python3 tests/e2e/e2e.py --device cuda --dtype bf16 --plugin cuda_flashinfer --families deepseek_v3 > $OUT/e2e_mla.log 2>&1
echo "e2e deepseek_v3 on cuda_flashinfer: rc=$? $(tail -2 $OUT/e2e_mla.log | tr '\n' ' ')"
