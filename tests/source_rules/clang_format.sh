#!/bin/sh
# clang_format.sh <repository root>: fails when a C/C++/CUDA/HIP file of core/,
# plugin_api/, plugins/ or tests/ differs from what clang-format makes of it
# under the root's .clang-format (each difference is printed as a warning).
# Skipped (exit 77) where clang-format is not installed (Debian:
# clang-format, installed by scripts/deps.sh).
#
# Left out: plugins/triton/artifacts/, written by plugins/triton/generate.py
# (which needs Triton) and pinned by the sha256 sums of its MANIFEST, which
# the triton_artifacts test checks: reformatting them by hand would break
# that pin. Other generated sources are written already formatted by their
# generator (plugin_api/tools/gen_wgmma.py). Not C/C++/CUDA/HIP by
# name, so not checked: OpenCL C (.cl, .clh) and cpu_amx's kernel bodies
# (src/*.inc), whose names are built by a macro (KFN(_chunk) *c) that
# clang-format 14 reads as a multiplication.
set -eu
cd "$1"
if ! command -v clang-format >/dev/null 2>&1; then
    echo "clang-format not found: skipping the format check (scripts/deps.sh installs it)"
    exit 77
fi
files=$(find core plugin_api plugins tests -path plugins/triton/artifacts -prune -o -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \
    -o -name '*.cu' -o -name '*.cuh' -o -name '*.hip' \) -print | LC_ALL=C sort)
# shellcheck disable=SC2086 # one word a file: no file name here has a space
clang-format --dry-run -Werror $files
echo "$(echo "$files" | wc -l) files under core/ plugin_api/ plugins/ tests/ match .clang-format ($(clang-format --version))"
