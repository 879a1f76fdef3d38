#!/usr/bin/env bash
# Optional check, not part of `make test`: the build also configures and compiles without the precompiled LibTorch
# header and without unity batches (-DDFLASH_PCH=OFF -DDFLASH_UNITY=OFF), so every file compiles on its own and
# includes what it uses (a batch or the precompiled header can hide a missing #include).
#   bash scripts/check_plain_build.sh [BUILD_DIR] [TARGET...]
# Default: build-plain and the torch-free dflash_util (measured 2026-12-08: 22 CPU-seconds, configure included;
# 4 min wall on the 2-core VM beside other builds); name more targets (dflash_kernels, dflash_drafter, dflash) to
# check more, at their compile time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-plain}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(dflash_util)
export CCACHE_BASEDIR="$PWD"
start=$SECONDS
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDFLASH_PCH=OFF -DDFLASH_UNITY=OFF >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}"
echo "plain build (no PCH, no unity) of ${TARGETS[*]}: ok in $((SECONDS - start)) s"
