#!/bin/sh
# Configure and build into $1 (default build/) with every plugin whose
# toolchain is present. Extra arguments go to cmake.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift
# the CUDA toolkit lives outside PATH on some machines
[ -x /usr/local/cuda/bin/nvcc ] && PATH="$PATH:/usr/local/cuda/bin" && export PATH
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
