#!/bin/bash
# Builds a baseline copy of the plugin, from another commit's sources, with
# plain gcc (no CMake), so that one device session can time the current
# kernels and a baseline's (cpu_amx_bench --plugin DIR/cpu_amx.so) on the
# same machine in the same run (the Xeon's speed varies between sessions by more than
# many of the changes measured on it).
#   prepare (here):  mkdir -p build-amx-base/src &&
#                    git archive BASE plugins/cpu_amx/src | tar -x -C build-amx-base/src
#   build (device):  bash plugins/cpu_amx/bench/build_base.sh build-amx-base
# Output: DIR/cpu_amx.so.
# EXTRA_CFLAGS: more compiler flags (the device passes DLPack's include
# directory, which its image lacks).
set -e
DIR=${1:?usage: build_base.sh DIR (with DIR/src/plugins/cpu_amx/src)}
S=$DIR/src/plugins/cpu_amx/src
F="-O3 -DNDEBUG -fPIC -fvisibility=hidden -fno-math-errno -fopenmp -std=gnu11 -Iplugin_api ${EXTRA_CFLAGS:-}"
A2="-mavx -mavx2 -mfma -mf16c"
A5="$A2 -mavx512f -mavx512bw -mavx512vl -mavx512dq"
O=$DIR/obj
mkdir -p "$O"
for f in plugin exec isa kern_scalar; do gcc $F -c "$S/$f.c" -o "$O/$f.o" & done
gcc $F $A2 -c "$S/kern_avx2.c" -o "$O/kern_avx2.o" &
gcc $F $A5 -c "$S/kern_avx512.c" -o "$O/kern_avx512.o" &
gcc $F $A5 -mavx512bf16 -c "$S/kern_avx512bf16.c" -o "$O/kern_avx512bf16.o" &
gcc $F $A5 -mavx512bf16 -mamx-tile -mamx-bf16 -c "$S/kern_amx.c" -o "$O/kern_amx.o" &
wait
gcc -shared -fopenmp -o "$DIR/cpu_amx.so" "$O"/plugin.o "$O"/exec.o "$O"/isa.o "$O"/kern_*.o -lm
