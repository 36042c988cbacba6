# Sourced by the cuda_fa3 device scripts (test/run_gpu.sh, tools/compare_f8c.sh,
# tools/profile_f8c.sh) with the script's time bound in seconds: every step
# runs under `timeout "$(tmo WANTED)"`, capped by what is left of that bound,
# so a call to the device cannot hang past it.
T0=$(date +%s)
DEADLINE=$((T0 + $1))
# a step's timeout: min(WANTED, seconds left before the deadline), at least 5
tmo() { local left=$((DEADLINE - $(date +%s))); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }
# seconds since the start, for the logs
el() { echo "$(( $(date +%s) - T0 )) s"; }
