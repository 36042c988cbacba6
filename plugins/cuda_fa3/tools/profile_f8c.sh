#!/bin/bash
# Profiling session for the FP8-compute d128 prefill kernel (run after
# test/run_gpu.sh has built build-fa3-gpu, on the GPU machine): ncu (clocks
# left alone) of one launch each of 16k non-causal and 4k causal: speed of
# light, pipes, warp states, scheduler, shared-memory tables,
# per-instruction stall samples (source page, SASS), then pipe and
# shared-memory counters by name.
# Logs under $OUT; every step is bounded by FA3_PROF_S seconds in all.
# FA3_NCU_SHAPES="CAUSAL L NAME;..." picks the ncu shapes (default
# "0 16384 nc16k;1 4096 c4k").
set -u
OUT=${OUT:-/tmp/fa3_prof}
mkdir -p "$OUT"
. "$(dirname "$0")/deadline.sh" "${FA3_PROF_S:-150}"
. "$(dirname "$0")/bench_setup.sh"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU ($($NCU --version 2>/dev/null | tail -1))"
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
 --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats \
 --section SourceCounters --section LaunchStats"
IFS=';' read -ra NCU_SHAPES <<< "${FA3_NCU_SHAPES:-0 16384 nc16k;1 4096 c4k}"
for shape in "${NCU_SHAPES[@]}"; do
  set -- $shape
  timeout "$(tmo 70)" $NCU --clock-control none -k regex:fwd_fp8c --launch-skip 3 --launch-count 1 $SECS \
    -f -o "$OUT/$3" $BENCH --fp8-attention $SO one 128 $1 $2 1 > "$OUT/ncu_$3.log" 2>&1
  echo "ncu $3 rc=$? at $(el)"
  if [ -f "$OUT/$3.ncu-rep" ]; then
    $NCU -i "$OUT/$3.ncu-rep" --page details --print-details all > "$OUT/ncu_$3_details.txt" 2>&1
    $NCU -i "$OUT/$3.ncu-rep" --page raw --csv > "$OUT/ncu_$3_raw.csv" 2>&1
    $NCU -i "$OUT/$3.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_$3_sass.csv" 2>&1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots|Issued Warp|No Eligible|Active Warps|Eligible Warps|Warp Cycles Per Issued|Shared|Bank|Stall|pipe" "$OUT/ncu_$3_details.txt" | head -60
  fi
done
# Pipe and shared-memory counters by name (a separate pass: an unknown
# name only loses this step).
timeout "$(tmo 40)" $NCU --clock-control none -k regex:fwd_fp8c --launch-skip 3 --launch-count 1 --metrics \
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,\
sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,\
smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_elapsed.avg,smsp__inst_executed.sum \
  $BENCH --fp8-attention $SO one 128 0 16384 1 > "$OUT/ncu_metrics.log" 2>&1
echo "ncu metrics rc=$?"; grep -E "sm__|smsp__|l1tex__" "$OUT/ncu_metrics.log" | head -20
echo "profile total $(el)"
