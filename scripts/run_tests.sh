#!/usr/bin/env bash
# Runs every test: ctest (C++), then pytest (Python, against the freshly built library and CLI).
# Exits non-zero if either fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
export DFLASH_BUILD_DIR="$PWD/$BUILD"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# Tests run side by side (below): spinning OpenMP threads would steal the cores the other side needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# pytest workers (pytest-xdist): one per core, at most 4; TEST_JOBS=1 runs the tests in one process.
JOBS=${TEST_JOBS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}

status=0
echo "== ctest =="
start=$SECONDS
ctest --test-dir "$BUILD" --output-on-failure -LE slow -j "$JOBS" || status=1
echo "ctest took $((SECONDS - start)) s"
echo "== pytest ($JOBS workers) =="
start=$SECONDS
# --dist loadscope keeps each module's tests (and its module-scoped fixtures) in one worker.
.venv/bin/python -m pytest -q -n "$JOBS" --dist loadscope tests/python || status=1
echo "pytest took $((SECONDS - start)) s"
exit $status
