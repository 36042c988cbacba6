#!/bin/sh
# The GPU machine reaches no package registry and lacks inih and DLPack.
# Run this here (with the network) to download their Debian packages (and
# json-c, for the Hugging Face importer) into
# .deps/, which the device scripts unpack under /tmp before building:
#   sh scripts/gpu_deps.sh      then carry .deps with the device call.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .deps
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
cd .deps
apt-get download libinih1 libinih-dev libdlpack-dev libjson-c5 libjson-c-dev >/dev/null
ls -1
