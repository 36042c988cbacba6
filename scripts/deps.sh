#!/bin/sh
# Install the Debian packages attnhost builds with (run as root). Quiet when
# everything is already there.
set -eu
pkgs="cmake make gcc g++ pkg-config libinih-dev libdlpack-dev libopenblas-dev clang libclang-rt-dev valgrind python3-numpy python3-pytest"
# xpu: OpenCL C -> SPIR-V (clang-14, llvm-spirv-14), spirv-val, the Level Zero
# and OpenCL headers and loaders, and PoCL, which runs its kernels on the CPU
pkgs="$pkgs clang-14 llvm-spirv-14 spirv-tools libze1 libze-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi
