#!/bin/sh
# Install the Debian packages attnhost builds with (run as root). Quiet when
# everything is already there. `deps.sh packaging` also installs what the
# package tests use (dpkg-dev for dpkg-shlibdeps, file, lintian, debootstrap).
set -eu
pkgs="cmake make gcc g++ pkg-config clang-format libinih-dev libjson-c-dev libdlpack-dev libopenblas-dev clang libclang-rt-dev valgrind python3-numpy python3-pytest"
# xpu: OpenCL C -> SPIR-V (clang-14, llvm-spirv-14), spirv-val, the Level Zero
# and OpenCL headers and loaders, PoCL, which runs its kernels on the CPU,
# and intel-opencl-icd for ocloc (the Intel tier compiled for PVC and Arc
# and its ISA checked for dpas; it also brings Intel's GPU drivers, which
# find no GPU here), and Oclgrind, a simulated OpenCL device that reports
# out-of-bounds accesses (the xpu_oclgrind test; it registers no ICD)
pkgs="$pkgs clang-14 llvm-spirv-14 spirv-tools libze1 libze-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd intel-opencl-icd oclgrind"
[ "${1:-}" = packaging ] && pkgs="dpkg-dev file lintian debootstrap"
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

# The HIP toolchain for plugins/rocm_aiter (AMD code objects, built without
# a GPU): hipcc + HIP headers for gfx90a, clang-19 for gfx942. Measured on
# Debian 12: 133 MB to download, ~700 MB installed, ~30 s to install.
# ATTNHOST_DEPS_ROCM=0 skips it; a failure only skips that plugin.
if [ "${ATTNHOST_DEPS_ROCM:-1}" != 0 ] && [ "${1:-}" != packaging ]; then
  rocm="hipcc libamdhip64-dev rocm-device-libs clang-19 llvm-19 lld-19"
  missing=""
  for p in $rocm; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "installing (rocm_aiter):$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
      echo "rocm_aiter's toolchain not installed: the plugin will be skipped"
  fi
fi

# Intel's CPU OpenCL runtime from PyPI for plugins/xpu's Intel tier (SPIR-V
# with cl_intel_subgroups on the CPU; tests xpu_conformance_intel_*), into
# its own prefix (Debian's pip puts it under local/), registered with no ICD loader: only those tests point the
# loader at it. Intel's EULA for Developer Tools lets it be used to develop
# a product; attnhost does not redistribute it. Measured on Debian 12:
# 273 MB to download, ~800 MB installed, ~10 s. ATTNHOST_DEPS_INTEL_OCL=0
# skips it; a failure only skips those tests.
intel_ocl=/opt/attnhost/intel-opencl-rt
if [ "${ATTNHOST_DEPS_INTEL_OCL:-1}" != 0 ] && [ "${1:-}" != packaging ] &&
   [ ! -e "$intel_ocl/lib/libintelocl.so" ] && [ ! -e "$intel_ocl/local/lib/libintelocl.so" ]; then
  echo "installing (xpu Intel tier tests): Intel's CPU OpenCL runtime 2026.2.0 from PyPI into $intel_ocl"
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  /usr/bin/python3 -m pip install -q --no-deps --no-warn-script-location --progress-bar off \
      --prefix "$intel_ocl" intel-opencl-rt==2026.2.0 intel-cmplr-lib-rt==2026.2.0 \
      tbb==2023.2.0 >/dev/null 2>&1 ||
    echo "Intel's CPU OpenCL runtime not installed: the xpu Intel tier tests will be skipped"
fi

# PyTorch and transformers for the end-to-end tests (tests/e2e: tiny Hugging
# Face models through examples/engine on cpu_amx). PyPI has only the CUDA
# build of torch for Linux x86_64: measured on Debian 12 (Python 3.11), torch
# 2.11.0 + transformers 5.24.0 and their dependencies are 2.75 GB to
# download, ~4.5 GB installed, 139 s to download and install. The versions are
# the GPU machine's torch and the transformers the tests were written
# against. ATTNHOST_DEPS_TORCH=0 skips it; a failure only skips those tests.
if [ "${ATTNHOST_DEPS_TORCH:-1}" != 0 ] && [ "${1:-}" != packaging ] &&
   ! /usr/bin/python3 -c 'import torch, transformers' 2>/dev/null; then
  echo "installing (e2e tests): torch 2.11.0, transformers 5.24.0 from PyPI"
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  /usr/bin/python3 -m pip install -q --break-system-packages --progress-bar off \
      torch==2.11.0 transformers==5.24.0 >/dev/null 2>&1 ||
    echo "torch/transformers not installed: the e2e tests will be skipped"
fi
