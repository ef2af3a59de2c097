#!/usr/bin/env bash
# Running the GPU check on a lent device machine (Python 3.12, CuPy for CUDA 13,
# PyTorch with CUDA 13 libraries, onnxruntime CPU only, no network there).
# One call there carries at most 64 MiB, so the onnxruntime-gpu wheel (~256 MB)
# travels in parts, one folder each:
#
#   here:   bash benchmarks/device.sh prepare   # download, then split into .whl/00, .whl/01, ... (ignored by git),
#                                               # and PyAV's wheel into .whl/extra (that machine has no PyAV)
#   there:  bash benchmarks/device.sh append    # one call per part but the last: carry=[".whl/NN"],
#                                               # and one call with carry=[".whl/extra"]
#   there:  bash benchmarks/device.sh check     # carry=[".whl/<last>"]: store it, assemble, verify,
#                                               # install to /tmp/site (the extra wheels too), run gpu_suite.py
#                                               # into $OUT
#
# Each part is kept under its own number in $STORE (default /tmp/ort-wheel) while
# the machine stays warm, so a part sent twice, or out of order, does no harm;
# check says which parts are missing and verifies the wheel's sha256 before it
# installs anything.  Make the calls back to back.
#
# Also: split FILE (the second half of prepare), assemble (print the verified
# wheel's path).  WHL_DIR, STORE and PART_SIZE override the folders and part size.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_VERSION=${ORT_VERSION:-1.31.1}
AV_VERSION=${AV_VERSION:-18.1.0}  # PyAV, for the video tests and NVDEC decoding there
WHL_DIR=${WHL_DIR:-.whl}
STORE=${STORE:-/tmp/ort-wheel}
PART_SIZE=${PART_SIZE:-61M}  # 4 parts of the 1.31.1 wheel (243.7 MiB), each with the tree under 64 MiB

split_wheel() {  # FILE -> $WHL_DIR/NN/{part,MANIFEST}
  local wheel=$1 sha count index
  sha=$(sha256sum "$wheel" | cut -d' ' -f1)
  local scratch="$WHL_DIR/.split"
  rm -rf "$scratch" "$WHL_DIR"/[0-9][0-9]
  mkdir -p "$scratch"
  split -b "$PART_SIZE" -d "$wheel" "$scratch/part-"
  count=$(ls "$scratch" | wc -l)
  for piece in "$scratch"/part-*; do
    index=${piece##*-}
    mkdir -p "$WHL_DIR/$index"
    mv "$piece" "$WHL_DIR/$index/part"
    printf 'name=%s\nsha256=%s\nindex=%s\ncount=%s\n' "$(basename "$wheel")" "$sha" "$index" "$count" \
      > "$WHL_DIR/$index/MANIFEST"
  done
  rmdir "$scratch"
  echo "$count parts of $(basename "$wheel") (sha256 $sha); carry one per call:"
  for dir in "$WHL_DIR"/[0-9][0-9]; do echo "  carry=[\"$dir\"]  $(du -h "$dir/part" | cut -f1)"; done
}

field() {  # MANIFEST KEY
  sed -n "s/^$2=//p" "$1"
}

append_parts() {  # every part carried in this call -> $STORE/NN
  mkdir -p "$STORE"
  local found=0 dir index
  for dir in "$WHL_DIR"/[0-9][0-9]; do
    [ -f "$dir/part" ] || continue
    index=$(field "$dir/MANIFEST" index)
    cp "$dir/part" "$STORE/$index.part"
    cp "$dir/MANIFEST" "$STORE/MANIFEST"
    echo "stored part $index of $(field "$dir/MANIFEST" count)"
    found=1
  done
  for wheel in "$WHL_DIR"/extra/*.whl; do  # whole wheels that fit in one call
    [ -f "$wheel" ] || continue
    mkdir -p "$STORE/extra"
    cp "$wheel" "$STORE/extra/"
    echo "stored extra wheel $(basename "$wheel")"
    found=1
  done
  [ "$found" = 1 ] || echo "no part carried in $WHL_DIR/NN (carry one with this call)"
}

assemble() {  # -> prints the path of the verified wheel
  local manifest="$STORE/MANIFEST"
  if [ ! -f "$manifest" ]; then
    echo "no part stored in $STORE: run append first (the machine may have gone cold)" >&2
    return 1
  fi
  local name sha count missing="" i
  name=$(field "$manifest" name); sha=$(field "$manifest" sha256); count=$(field "$manifest" count)
  for ((i = 0; i < count; i++)); do
    [ -f "$STORE/$(printf '%02d' "$i").part" ] || missing="$missing $(printf '%02d' "$i")"
  done
  if [ -n "$missing" ]; then
    echo "parts missing from $STORE:$missing (of $count); append them, back to back" >&2
    return 1
  fi
  for ((i = 0; i < count; i++)); do cat "$STORE/$(printf '%02d' "$i").part"; done > "$STORE/$name"
  if [ "$(sha256sum "$STORE/$name" | cut -d' ' -f1)" != "$sha" ]; then
    echo "the assembled $name does not match its sha256 $sha" >&2
    return 1
  fi
  echo "$STORE/$name"
}

case "${1:-}" in
  prepare)
    mkdir -p "$WHL_DIR/full"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$WHL_DIR/full" \
      "onnxruntime-gpu==${WHEEL_VERSION}"
    split_wheel "$(ls "$WHL_DIR"/full/onnxruntime_gpu-*.whl)"
    mkdir -p "$WHL_DIR/extra"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d "$WHL_DIR/extra" "av==${AV_VERSION}"
    echo "  carry=[\"$WHL_DIR/extra\"]  $(du -h "$WHL_DIR"/extra/*.whl | cut -f1) (PyAV)"
    ;;
  split)
    split_wheel "${2:?usage: $0 split FILE}"
    ;;
  append)
    append_parts
    ;;
  assemble)
    assemble
    ;;
  check)
    append_parts
    wheel=$(assemble)
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
    for extra in "$STORE"/extra/*.whl; do  # each on its own: one that fails costs its own steps, not the run
      [ -f "$extra" ] || continue
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$extra" \
        || echo "could not install $(basename "$extra"): the steps that need it are skipped" >&2
    done
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    python3 -c "import torch, onnxruntime as o; o.preload_dlls(); print(o.__version__, o.get_available_providers())"
    python3 benchmarks/gpu_suite.py "$out" 2>&1 | tee "$out/suite.log"
    ;;
  *)
    echo "usage: $0 prepare | split FILE | append | assemble | check" >&2
    exit 2
    ;;
esac
