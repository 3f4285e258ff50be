#!/usr/bin/env bash
# make kernels: rebuilds cuda/kernels/gonccl_kernels.fatbin from cuda/kernels/*.cu* with a
# pinned nvcc from PyPI, installed once into a tool venv under ~/.cache/gonccl/, and
# writes cuda/kernels/gonccl_kernels.stamp (sha256 of every source, the nvcc version and
# the flags). Commit both: libgonccl.so embeds the fatbin, so nobody else needs nvcc, and
# cuda/kernels' TestKernelsStamp fails when the sources no longer match the stamp.
#
# The fatbin holds SASS for sm_80 (A100) and sm_90 (H100/H200) and PTX for compute_90,
# which the driver JIT-compiles for newer GPUs. CUDA 13.0 is the newest toolkit whose
# PTX the 580 driver loads. It is not compressed, so the kernel names stay readable
# (the stamp test looks for each one).
set -euo pipefail

NVCC_VERSION=13.0.88
NVCC_FLAGS="-fatbin --no-compress -std=c++17 -O3 --fmad=false --ftz=false --prec-div=true --prec-sqrt=true -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$ROOT/cuda/kernels
OUT=$SRC/gonccl_kernels.fatbin
STAMP=$SRC/gonccl_kernels.stamp
TOOLS=${GONCCL_NVCC_VENV:-$HOME/.cache/gonccl/nvcc-$NVCC_VERSION}
PYTHON=${PYTHON:-python3}

if [ ! -f "$TOOLS/.installed" ]; then
  echo "installing nvcc $NVCC_VERSION into $TOOLS"
  rm -rf "$TOOLS"
  "$PYTHON" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
    "nvidia-cuda-nvcc==$NVCC_VERSION" "nvidia-cuda-crt==$NVCC_VERSION" \
    "nvidia-cuda-runtime==$NVCC_VERSION" "nvidia-nvvm==$NVCC_VERSION"
  touch "$TOOLS/.installed"
fi
NVCC=$(find "$TOOLS" -path '*/nvidia/cu13/bin/nvcc' -type f | head -1)
if [ -z "$NVCC" ]; then
  echo "build-kernels: no nvcc in $TOOLS (remove it and run again)" >&2
  exit 1
fi
version=$("$NVCC" --version | grep -o 'V[0-9][0-9.]*' | tail -1)
if [ "$version" != "V$NVCC_VERSION" ]; then
  echo "build-kernels: $NVCC is $version, want V$NVCC_VERSION" >&2
  exit 1
fi

cd "$SRC"
# shellcheck disable=SC2086 # NVCC_FLAGS is a list of words
"$NVCC" $NVCC_FLAGS -o "$OUT.tmp" reduce.cu
mv "$OUT.tmp" "$OUT"
{
  echo "# written by scripts/build-kernels.sh (make kernels); checked by cuda/kernels' TestKernelsStamp"
  echo "nvcc $NVCC_VERSION"
  echo "flags $NVCC_FLAGS"
  for f in $(ls -- *.cu *.cuh | LC_ALL=C sort); do
    echo "source $(sha256sum "$f" | cut -d' ' -f1) $f"
  done
  echo "fatbin $(sha256sum "$(basename "$OUT")" | cut -d' ' -f1) $(basename "$OUT")"
} >"$STAMP"
echo "built $OUT ($(stat -c %s "$OUT") bytes) with nvcc $NVCC_VERSION"
