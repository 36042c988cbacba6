#!/bin/sh
# The test suite on a fresh machine: install what is needed, build, run every
# CPU test (GPU tests skip without a device), the Debian packages' install
# tests, then the same unit tests built with AddressSanitizer + UndefinedBehaviorSanitizer,
# and the fuzz targets' smoke runs.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh build -DATTNHOST_WERROR=ON
(cd build && ctest --output-on-failure -j "$(nproc)")
# the Debian packages: build, check, install into a throw-away root
# and apt-get install them in a bookworm chroot (tests/packaging/run.sh;
# skips when not root; ATTNHOST_PACKAGING_CHROOT=0 leaves out the chroot)
if [ "${ATTNHOST_SKIP_PACKAGING:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] && sh scripts/deps.sh packaging
  ATTNHOST_PACKAGING_CHROOT=${ATTNHOST_PACKAGING_CHROOT:-1} sh tests/packaging/run.sh build-deb
fi
if [ "${ATTNHOST_SKIP_SANITIZERS:-0}" != 1 ]; then
  # sanitizer build: host and CPU plugins only, to keep CI inside its budget
  sh scripts/build.sh build-asan -DATTNHOST_SANITIZE=address -DATTNHOST_PLUGINS=cpu_amx
  (cd build-asan && ctest --output-on-failure -j "$(nproc)" -L unit)
fi
if [ "${ATTNHOST_SKIP_SANITIZERS:-0}" != 1 ]; then
  # the libFuzzer targets (clang): built and run over their seeds, so the
  # fuzz preset the campaigns in docs/reliability.md use keeps building
  cmake --preset fuzz > /dev/null
  cmake --build build-fuzz -j "$(nproc)" --target fuzz_config fuzz_model fuzz_hfconfig \
    fuzz_batch fuzz_descriptor fuzz_record fuzz_recfile fuzz_scales
  (cd build-fuzz && ctest --output-on-failure -L fuzz)
fi
