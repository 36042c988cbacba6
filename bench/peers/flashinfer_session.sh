#!/bin/bash
# One device call for the real-FlashInfer peer: install the carried wheels
# (.whl: flashinfer-python and the few dependencies the device image lacks)
# into /tmp/site, then run flashinfer_peer.py, whose JIT builds the kernels
# on first use. Extra arguments go to flashinfer_peer.py. Logs in $OUT.
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || { tail -20 "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/fi-jit
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
python3 -W ignore bench/peers/flashinfer_peer.py "$@" 2>&1 | tee "$OUT/flashinfer.log"
