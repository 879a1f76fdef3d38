#!/usr/bin/env bash
# Runs every test: ctest (C++), then pytest (Python, against the freshly built library and CLI).
# Exits non-zero if either fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
export DFLASH_BUILD_DIR="$PWD/$BUILD"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

status=0
echo "== ctest =="
ctest --test-dir "$BUILD" --output-on-failure -LE slow -j 1 || status=1
echo "== pytest =="
.venv/bin/python -m pytest -q tests/python || status=1
exit $status
