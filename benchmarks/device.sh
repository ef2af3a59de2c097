#!/usr/bin/env bash
# Running the GPU check on a lent device machine (Python 3.12, CuPy for CUDA 13,
# PyTorch with CUDA 13 libraries, onnxruntime CPU only, no network there).
#
#   here:   bash benchmarks/device.sh prepare     # wheel -> .whl/ort.part-*, 60 MiB each (ignored by git)
#   there:  bash benchmarks/device.sh append      # one call per part, carry=[".whl"] with only that part in it
#   there:  bash benchmarks/device.sh check       # install to /tmp/site, run gpu_suite.py into $OUT
#
# The parts accumulate in /tmp/ort-wheel on the device while it stays warm, so
# make the calls back to back.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_VERSION=${ORT_VERSION:-1.31.1}
case "${1:-}" in
  prepare)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    mkdir -p .whl/full
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl/full "onnxruntime-gpu==${WHEEL_VERSION}"
    wheel=$(ls .whl/full/onnxruntime_gpu-*.whl)
    basename "$wheel" > .whl/NAME
    split -b 60M -d "$wheel" .whl/ort.part-
    ls -l .whl
    ;;
  append)
    mkdir -p /tmp/ort-wheel
    for part in .whl/ort.part-*; do cat "$part" >> /tmp/ort-wheel/wheel.bin; echo "appended $part"; done
    cp .whl/NAME /tmp/ort-wheel/NAME 2>/dev/null || true
    ls -l /tmp/ort-wheel
    ;;
  check)
    name=$(cat /tmp/ort-wheel/NAME)
    cp /tmp/ort-wheel/wheel.bin "/tmp/ort-wheel/$name"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "/tmp/ort-wheel/$name"
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    python3 -c "import torch, onnxruntime as o; o.preload_dlls(); print(o.__version__, o.get_available_providers())"
    python3 benchmarks/gpu_suite.py "${OUT:-/tmp/out}" 2>&1 | tee "${OUT:-/tmp/out}/suite.log"
    ;;
  *)
    echo "usage: $0 prepare | append | check" >&2
    exit 2
    ;;
esac
