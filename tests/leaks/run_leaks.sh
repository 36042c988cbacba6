#!/bin/sh
# Valgrind memcheck over many cycles of scan, bind, run and unload.
#
#   tests/leaks/run_leaks.sh [BUILD_DIR] [CYCLES]      (defaults: build, 1000)
#
# BUILD_DIR is a plain (non-sanitizer) build with the ABI test plugins and
# the CPU plugins built. The driver (leak_cycles.c) is compiled here against
# that build's libattnhost.so. Runs:
#   1. natively, CYCLES cycles, glibc's thread caches off: the heap in use
#      after cycle 100 and after the last must be equal (growth = memory
#      kept per cycle);
#   2. memcheck, 100 and CYCLES cycles: no errors, no definitely or
#      indirectly lost bytes, and the same bytes in use at exit and possibly
#      lost after both (what dlopen, libc and the OpenMP pool threads, alive
#      at exit, keep for good is fixed, not per cycle);
#   3. massif, 100 and CYCLES cycles: the same peak heap.
# Exits non-zero on any failure; the figures go to stdout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
cycles=${2:-1000}
work=$(mktemp -d /tmp/ah_leaks.XXXXXX)
trap 'rm -rf "$work"' EXIT

cc -std=c11 -O1 -g -D_GNU_SOURCE -I"$src/core/include" -I"$src/plugin_api" \
   "$here/leak_cycles.c" -o "$work/leak_cycles" -L"$build/lib" -Wl,-rpath,"$build/lib" -lattnhost
dirs="$build/lib/attnhost/plugins $build/tests/abi_plugins/good"

echo "== native, $cycles cycles"
GLIBC_TUNABLES=glibc.malloc.tcache_count=0 "$work/leak_cycles" "$cycles" $dirs

run_vg() {
  n=$1
  valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
    --log-file="$work/vg_$n.log" "$work/leak_cycles" "$n" $dirs > "$work/out_$n.txt"
  cat "$work/out_$n.txt"
  grep -E "in use at exit|total heap usage|definitely lost|indirectly lost|possibly lost|ERROR SUMMARY" \
    "$work/vg_$n.log" | sed 's/^==[0-9]*== *//'
}
echo "== memcheck, 100 cycles"
t0=$(date +%s); run_vg 100; echo "($(($(date +%s) - t0)) s)"
echo "== memcheck, $cycles cycles"
t0=$(date +%s); run_vg "$cycles"; echo "($(($(date +%s) - t0)) s)"

peak() {
  valgrind --tool=massif --peak-inaccuracy=0.0 --massif-out-file="$work/ms_$1" \
    "$work/leak_cycles" "$1" $dirs > /dev/null 2>&1
  sed -n 's/^mem_heap_B=//p' "$work/ms_$1" | sort -n | tail -1
}
echo "== massif, 100 and $cycles cycles"
p1=$(peak 100); p2=$(peak "$cycles")
echo "peak heap: $p1 bytes (100 cycles), $p2 bytes ($cycles cycles)"

exit_bytes() { sed -n 's/.*in use at exit: \([0-9,]*\) bytes.*/\1/p' "$work/vg_$1.log" | tr -d ,; }
a=$(exit_bytes 100); b=$(exit_bytes "$cycles")
possibly() { sed -n 's/.*possibly lost: \([0-9,]*\) bytes.*/\1/p' "$work/vg_$1.log" | tr -d ,; }
if [ "$(possibly 100)" != "$(possibly "$cycles")" ]; then
  echo "FAIL: possibly lost grows: $(possibly 100) bytes after 100 cycles, $(possibly "$cycles") after $cycles"
  exit 1
fi
if [ "$a" != "$b" ]; then
  echo "FAIL: $a bytes in use at exit after 100 cycles, $b after $cycles: memory kept per cycle"
  exit 1
fi
if [ "$p1" != "$p2" ]; then
  echo "FAIL: peak heap $p1 bytes after 100 cycles, $p2 after $cycles"
  exit 1
fi
echo "OK: no leak, no error; $a bytes in use at exit and a $p1-byte peak after both 100 and $cycles cycles"
