#!/bin/sh
# Runs a command with the OpenCL ICD loader pointed at Intel's CPU OpenCL
# runtime alone (scripts/deps.sh installs it into its own prefix, where no
# loader looks): the xpu Intel tier's CTests. Exit 77 (skipped) where the
# runtime is not installed.
#   intel_ocl.sh LIBINTELOCL COMMAND [ARG...]
lib=$1
shift
if [ ! -e "$lib" ]; then
  echo "skipped: Intel's CPU OpenCL runtime is not installed (scripts/deps.sh)"
  exit 77
fi
dir=$(mktemp -d)
echo "$lib" >"$dir/intel.icd"
OCL_ICD_VENDORS=$dir "$@"
rc=$?
rm -rf "$dir"
exit $rc
