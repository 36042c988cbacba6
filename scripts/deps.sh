#!/bin/sh
# Install the Debian packages attnhost builds with (run as root). Quiet when
# everything is already there. `deps.sh packaging` also installs what the
# package tests use (dpkg-dev for dpkg-shlibdeps, file, lintian, debootstrap).
set -eu
pkgs="cmake make gcc g++ pkg-config libinih-dev libdlpack-dev libopenblas-dev clang libclang-rt-dev valgrind python3-numpy python3-pytest"
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
