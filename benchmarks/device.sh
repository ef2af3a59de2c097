#!/usr/bin/env bash
# Running the GPU check on a lent device machine (Python 3.12, CuPy for CUDA 13,
# PyTorch with CUDA 13 libraries, onnxruntime CPU only, no PyAV, no network there).
# One call there carries at most 64 MiB, and the onnxruntime-gpu wheel is ~256 MB
# (PyAV's another 36 MB).  A wheel is a zip of files compressed one at a time;
# the CUDA provider library (284 MB) shrinks to 81 % that way and to about
# 70 % under xz over the whole tree, so prepare unpacks both wheels into one
# tar.xz "bundle" (~230 MB) and splits it into four parts, one folder each:
#
#   here:   bash benchmarks/device.sh prepare   # download, bundle, split into .whl/00, .whl/01, ... (ignored by git)
#   there:  bash benchmarks/device.sh append    # one call per part but the last: carry=[".whl/NN"]
#   there:  bash benchmarks/device.sh check     # carry=[".whl/<last>"]: store it, assemble, verify, unpack
#                                               # to /tmp/site, run gpu_suite.py (least proven steps first,
#                                               # saved as it goes) and then the CUDA tests into $OUT
#                                               # (GPU_BUDGET_S, GPU_SECONDS, GPU_STEPS, TESTS_TIMEOUT_S;
#                                               # ALL_TESTS_TIMEOUT_S=N runs the whole suite after them,
#                                               # for at most N seconds)
#
# Each part is kept under its own number in $STORE (default /tmp/ort-wheel) while
# the machine stays warm, so a part sent twice, or out of order, does no harm;
# check says which parts are missing and verifies the bundle's sha256 before it
# unpacks anything.  Make the calls back to back.
#
# Also: bundle OUT WHEEL... (the wheels unpacked into one tar.xz), split FILE,
# assemble (print the verified file's path), install (assemble and unpack into
# $SITE).  WHL_DIR, STORE, SITE and PART_SIZE override the folders and part size.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_VERSION=${ORT_VERSION:-1.31.1}
AV_VERSION=${AV_VERSION:-18.1.0}  # PyAV, for the video tests and NVDEC decoding there
WHL_DIR=${WHL_DIR:-.whl}
STORE=${STORE:-/tmp/ort-wheel}
SITE=${SITE:-/tmp/site}
PART_SIZE=${PART_SIZE:-61M}  # 4 parts of the 1.31.1 + PyAV bundle (~220 MiB), each with the tree under 64 MiB

bundle() {  # OUT WHEEL... -> OUT, a tar.xz of the wheels' files, as pip --target would lay them out
  local out=$1 stage
  shift
  stage=$(mktemp -d)
  for wheel in "$@"; do
    python3 -m zipfile -e "$wheel" "$stage"
  done
  tar -C "$stage" -cf - . | xz -T0 -6 > "$out"
  rm -rf "$stage"
}

split_file() {  # FILE -> $WHL_DIR/NN/{part,MANIFEST}
  local file=$1 sha count index
  sha=$(sha256sum "$file" | cut -d' ' -f1)
  local scratch="$WHL_DIR/.split"
  rm -rf "$scratch" "$WHL_DIR"/[0-9][0-9]
  mkdir -p "$scratch"
  split -b "$PART_SIZE" -d "$file" "$scratch/part-"
  count=$(ls "$scratch" | wc -l)
  for piece in "$scratch"/part-*; do
    index=${piece##*-}
    mkdir -p "$WHL_DIR/$index"
    mv "$piece" "$WHL_DIR/$index/part"
    printf 'name=%s\nsha256=%s\nindex=%s\ncount=%s\n' "$(basename "$file")" "$sha" "$index" "$count" \
      > "$WHL_DIR/$index/MANIFEST"
  done
  rmdir "$scratch"
  echo "$count parts of $(basename "$file") (sha256 $sha); carry one per call:"
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
  [ "$found" = 1 ] || echo "no part carried in $WHL_DIR/NN (carry one with this call)"
}

assemble() {  # -> prints the path of the verified file
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

install() {  # the assembled bundle -> $SITE
  local file
  file=$(assemble)
  mkdir -p "$SITE"
  xz -dc "$file" | tar -C "$SITE" -xf -
  echo "unpacked $(basename "$file") into $SITE"
}

case "${1:-}" in
  prepare)
    mkdir -p "$WHL_DIR/full"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      -d "$WHL_DIR/full" "onnxruntime-gpu==${WHEEL_VERSION}" "av==${AV_VERSION}"
    bundle "$WHL_DIR/full/bundle.tar.xz" "$WHL_DIR"/full/onnxruntime_gpu-*.whl "$WHL_DIR"/full/av-*.whl
    split_file "$WHL_DIR/full/bundle.tar.xz"
    ;;
  bundle)
    bundle "${2:?usage: $0 bundle OUT WHEEL...}" "${@:3}"
    ;;
  split)
    split_file "${2:?usage: $0 split FILE}"
    ;;
  append)
    append_parts
    ;;
  assemble)
    assemble
    ;;
  install)
    install
    ;;
  check)
    append_parts
    install
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
    export PYTHONPATH=$SITE:$PWD PYTHONUNBUFFERED=1
    python3 -c "import onnxruntime as o; o.preload_dlls(); print(o.__version__, o.__file__, o.get_available_providers())" \
      || echo "onnxruntime from $SITE does not import (above): the CUDA steps will say why"
    # the benchmarks first, least proven steps first, each saved as it ends (GPU_STEPS=a,b for
    # some only), within GPU_BUDGET_S; then the CUDA tests (each at most 60 s): with the unpacking,
    # a first call of about 5 minutes
    steps=()
    [ -n "${GPU_STEPS:-}" ] && steps=(--steps "$GPU_STEPS")
    python3 benchmarks/gpu_suite.py "$out" --no-tests --seconds "${GPU_SECONDS:-1}" \
      --budget-s "${GPU_BUDGET_S:-150}" "${steps[@]}" 2>&1 | tee "$out/suite.log"
    per_test=()  # pytest-timeout, where installed: a hung test costs 60 s, not the call
    python3 -c "import pytest_timeout" 2> /dev/null && per_test=(--timeout 60)
    timeout "${TESTS_TIMEOUT_S:-90}" python3 -m pytest -q -rs -p no:cacheprovider "${per_test[@]}" \
      -k "cuda or hwaccel" tests > "$out/cuda_tests.log" 2>&1 || echo "CUDA tests: exit $?"
    tail -n 40 "$out/cuda_tests.log"
    if [ "${ALL_TESTS_TIMEOUT_S:-0}" -gt 0 ]; then  # the whole suite too, on that machine's numpy, onnx, pyarrow
      timeout "$ALL_TESTS_TIMEOUT_S" python3 -m pytest -q -rs -p no:cacheprovider "${per_test[@]}" tests \
        > "$out/all_tests.log" 2>&1 || echo "all tests: exit $?"
      tail -n 5 "$out/all_tests.log"
    fi
    ;;
  *)
    echo "usage: $0 prepare | bundle OUT WHEEL... | split FILE | append | assemble | install | check" >&2
    exit 2
    ;;
esac
