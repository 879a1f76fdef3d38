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
# The suite above runs the best kernels this CPU has. The C++ kernel tests cover every ISA; these Python tests
# compare the fused ops with references end to end, so they run again on each lower ISA the CPU can run
# (ATen's own kernels follow), so a build that passes on AVX-512 passes on AVX2 and SSE2 machines too.
isa_tests="tests/python/test_train_attention_backend.py tests/python/test_attention_op.py tests/python/test_drafter_reference.py"
# On an AVX-512 machine the AVX2 pass also stands in for an AVX2-only CPU (an AMD EPYC without AVX-512 or native
# bf16): oneDNN and MKL limited to AVX2 round GEMM rows by row count and equal rows apart, and bf16 matmuls fall
# back to ATen's own GEMM, as there. The tests that compare GEMM results bit for bit across shapes run under it.
avx2_machine_ctest='^(drafter|dflash2|dspark|models|train|data_regenerate_output)$'
avx2_machine_tests="tests/python/test_replicas.py"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
for isa in base avx2; do
  emulate=()
  case "$isa:$flags" in
    avx2:*" avx512f"*) aten=avx2 emulate=(ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) ;;
    base:*" avx2"*) aten=default ;;
    *) continue ;;
  esac
  echo "== pytest on $isa kernels${emulate:+ (oneDNN and MKL limited to AVX2)} =="
  start=$SECONDS
  if ((${#emulate[@]})); then
    env DFLASH_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten "${emulate[@]}" \
      ctest --test-dir "$BUILD" --output-on-failure -LE slow -j "$JOBS" -R "$avx2_machine_ctest" || status=1
  fi
  env DFLASH_CPU_ISA=$isa ATEN_CPU_CAPABILITY=$aten "${emulate[@]}" .venv/bin/python -m pytest -q -n "$JOBS" \
    --dist loadscope $isa_tests ${emulate:+$avx2_machine_tests} || status=1
  echo "pytest on $isa kernels took $((SECONDS - start)) s"
done
exit $status
