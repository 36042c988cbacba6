#!/bin/sh
# The xpu CTest: `attnhost check --plugin xpu --quick` over the build's
# plugin directory. Exit 77 (skipped) when the plugin is unavailable here
# (no OpenCL platform or device, no Level Zero GPU); a quarantined or
# rejected plugin, or any failed case, fails.
#   check.sh ATTNHOST PLUGIN_DIR [CONFIG]
if [ $# -ge 3 ]; then set -- "$1" "$2" --config "$3"; fi
bin=$1 dir=$2
shift 2
out=$("$bin" check --plugin xpu --quick --no-cache --plugin-dir "$dir" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
case "$out" in
*"attnhost check: plugin xpu is unavailable"*)
  echo "skipped: xpu has no usable device here"
  exit 77 ;;
esac
exit $rc
