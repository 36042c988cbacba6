#!/bin/sh
# The real FlashInfer peer (bench/peers/flashinfer_peer.py) needs
# flashinfer-python and the few of its dependencies the GPU machine's image
# lacks. Run this here (with the network) to download them into .whl/, then
# carry .whl with the device call that runs bench/peers/flashinfer_session.sh.
# Versions are pinned: the figures in bench/RESULTS.md came from these.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
for p in flashinfer-python==0.6.18 apache-tvm-ffi==0.1.15.post2 nvidia-cudnn-frontend==1.32.0 \
         nccl4py==0.6.0 cuda-tile==1.7.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$p"
done
ls -1 .whl
