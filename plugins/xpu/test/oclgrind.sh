#!/bin/sh
# The xpu Oclgrind CTest: runs the cl_mem driver (xpu_oclgrind.c) on
# Oclgrind's simulated device with its API checks and data-race detection.
# Oclgrind reports an out-of-bounds or uninitialised access, an API error
# or a race in its log and carries on: the exit code does not say, so any
# line in the log fails the test. The driver is told the platform's name,
# so it fails rather than passes if it did not run on Oclgrind. Exit 77
# (skipped) where oclgrind is not installed.
#   oclgrind.sh DRIVER
if ! command -v oclgrind >/dev/null 2>&1; then
  echo "skipped: oclgrind is not installed (apt-get install oclgrind; scripts/deps.sh)"
  exit 77
fi
log=$(mktemp)
oclgrind --check-api --data-races --uninitialized --log "$log" "$1" Oclgrind
rc=$?
if [ -s "$log" ]; then
  cat "$log"
  echo "FAIL: Oclgrind reported the above"
  rc=1
fi
rm -f "$log"
exit $rc
