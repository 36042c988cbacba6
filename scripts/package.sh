#!/bin/sh
# Build the Debian packages into $1/packages (default build-deb/packages):
#   sh scripts/package.sh [build dir] [cmake options...]
# e.g. sh scripts/package.sh build-deb -DATTNHOST_PLUGINS=cpu_amx
# A release build for /usr with Debian's hardening flags (dpkg-buildflags),
# no tests, then `cpack -G DEB`: libattnhost<ABI major>, libattnhost-dev,
# attnhost, python3-attnhost and one attnhost-plugin-<name> per plugin built.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-build-deb}
[ $# -gt 0 ] && shift
[ -x /usr/local/cuda/bin/nvcc ] && PATH="$PATH:/usr/local/cuda/bin" && export PATH
if command -v dpkg-buildflags >/dev/null; then
  DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}; export DEB_BUILD_MAINT_OPTIONS
  CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
  CXXFLAGS="$(dpkg-buildflags --get CXXFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
  LDFLAGS=$(dpkg-buildflags --get LDFLAGS)
  export CFLAGS CXXFLAGS LDFLAGS
fi
jobs=$(nproc)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DATTNHOST_BUILD_TESTS=OFF "$@" >/dev/null
cmake --build "$dir" -j "$jobs"
rm -rf "$dir/packages"
# cpack reports a failing post-build script (the ldconfig-trigger fixup) only in its output
(cd "$dir" && cpack -G DEB) >"$dir/cpack.log" 2>&1 || { cat "$dir/cpack.log"; exit 1; }
if grep -q "CMake Error" "$dir/cpack.log"; then cat "$dir/cpack.log"; exit 1; fi
ls -1 "$dir"/packages/*.deb
