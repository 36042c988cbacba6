#!/bin/sh
# The main job on a fresh machine: install what is needed, build, and run
# `attnhost run` on the embedded default configuration and demo model.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh build
exec build/bin/attnhost run "$@"
