#!/usr/bin/env bash
# One-shot GPU check for an H100/H200 session (16 cores, < 8 minutes): build the CLI with the CUDA kernels for
# this GPU's architecture, run `dflash doctor` first (its report and JSON stay in the outputs), run the CUDA
# attention tests twice (as the device is, and with the shared memory of
# a 99 KB card, DFLASH_CUDA_SMEM_LIMIT=101376, so the small tile configurations run too; both passes
# include the deterministic backward), compute-sanitizer over both, then the attention benchmarks (our
# Python one first, then the CLI bench, which needs the whole CLI built), the NCCL smoke, and the MoE experts'
# grouped GEMM against the per-expert loop (tests/models/test_moe_grouped.cpp). Every step runs even when an
# earlier one fails; each failure is printed loudly and the script exits non-zero at the end.
#
# The device machine has its own python3 with torch (no .venv, no network, maybe no GTest or
# nlohmann-json). Before the device call, run here:   bash scripts/gpu_check.sh --prepare
# which downloads the Debian dev packages (json, gtest, yaml-cpp) into .cache/gpu_deps; then call the device with
#   carry: [".cache/gpu_deps"]   command: bash scripts/gpu_check.sh   timeout_s: 540
# Outputs (logs, JSON) go to $OUT when set, else to gpu-check-out/.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.cache/gpu_deps

if [[ "${1:-}" == "--prepare" ]]; then
  mkdir -p "$DEPS" && cd "$DEPS" && apt-get download nlohmann-json3-dev libgtest-dev libyaml-cpp-dev libyaml-cpp0.7 && ls -l "$DEPS"
  exit $?
fi

OUTDIR=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUTDIR"
BUILD=$ROOT/build-gpu
BUDGET=${GPU_CHECK_BUDGET_S:-470}  # seconds for all steps together
source "$ROOT/scripts/gpu_common.sh"

note "gpu_check $(date -u +%FT%TZ) python $PY"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>&1 |
  tee -a "$SUMMARY"

# Missing dev packages: the carried .debs, unpacked into a private prefix (gpu_configure).
gpu_configure "$BUILD" "$OUTDIR/build.log"
if ! grep -q "CUDA kernels: ON" "$OUTDIR/build.log"; then
  failures=$((failures + 1))
  note "FAIL  configure did not enable the CUDA kernels (see build.log)"
fi
# The CLI first (it holds dflash_ops), so that `dflash doctor` runs before anything else: the machine's own report
# (versions, the GPU, the fused attention vs the reference at the standard shapes, speed, NCCL) in doctor.txt and
# doctor.json. A CLI that fails to build leaves the next step to build dflash_ops alone for the kernel tests.
step "build dflash CLI" 330 "$OUTDIR/build.log" cmake --build "$BUILD" --target dflash -j16
step "dflash doctor --json" 120 "$OUTDIR/doctor.txt" "$BUILD/dflash" doctor --json "$OUTDIR/doctor.json"
note "INFO  doctor: $(tail -n 1 "$OUTDIR/doctor.txt" 2>/dev/null)"
step "build dflash_ops" 180 "$OUTDIR/build.log" cmake --build "$BUILD" --target dflash_ops -j16

step "pytest CUDA attention" 150 "$OUTDIR/pytest.log" env DFLASH_BUILD_DIR="$BUILD" DFLASH_REQUIRE_CUDA=1 \
  HF_HUB_OFFLINE=1 "$PY" -m pytest -q -rs tests/python/test_attention_cuda.py
step "pytest CUDA attention, 99 KB of shared memory" 150 "$OUTDIR/pytest.log" env DFLASH_BUILD_DIR="$BUILD" \
  DFLASH_REQUIRE_CUDA=1 DFLASH_CUDA_SMEM_LIMIT=101376 HF_HUB_OFFLINE=1 "$PY" -m pytest -q -rs \
  tests/python/test_attention_cuda.py

# Memory errors and shared-memory races on the real hardware (tiny shapes; compute-sanitizer runs
# on the Firecracker H200 machines, per the device notes).
if command -v compute-sanitizer >/dev/null; then
  for smem in "" 101376; do
    for tool in memcheck racecheck; do
      step "compute-sanitizer $tool${smem:+ (DFLASH_CUDA_SMEM_LIMIT=$smem)}" 90 "$OUTDIR/sanitizer.log" \
        env ${smem:+DFLASH_CUDA_SMEM_LIMIT=$smem} compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$PY" scripts/gpu_sanitize_attention.py "$BUILD/libdflash_ops.so"
    done
  done
else
  note "SKIP  compute-sanitizer not found"
fi

step "gpu_bench_attention.py (ours vs flex vs per-block SDPA)" 180 "$OUTDIR/bench_py.log" "$PY" \
  scripts/gpu_bench_attention.py --lib "$BUILD/libdflash_ops.so" --json "$OUTDIR/bench_py.json"

step "dflash bench attention --device cuda" 120 "$OUTDIR/bench_cli.log" "$BUILD/dflash" bench attention \
  --device cuda --configs seed-scaled-bf16,seed,seed-27b --json "$OUTDIR/bench_cli.json"

# NCCL smoke (cheap: tiny model, 3 steps): two CUDA workers on one GPU in one process, gradients summed on the
# device and all-reduced by c10d ProcessGroupNCCL in a group of one; weights must match the CPU run. A skip
# (no NCCL in the build, no GPU seen) fails here: DFLASH_REQUIRE_CUDA turns it into a test failure.
if grep -q "c10d NCCL enabled" "$OUTDIR/build.log"; then
  note "INFO  configure: c10d NCCL enabled"
else
  note "INFO  configure did not enable c10d NCCL (see build.log)"
fi
step "build test_train" 150 "$OUTDIR/build.log" cmake --build "$BUILD" --target test_train -j16
step "NCCL smoke: 2 CUDA workers + NCCL group of one == CPU; deterministic CUDA runs bitwise equal" 120 \
  "$OUTDIR/nccl.log" env DFLASH_REQUIRE_CUDA=1 "$BUILD/tests/train/test_train" \
  --gtest_filter='MiniTraining.NcclTwoCudaWorkersMatchCpu:MiniTraining.DeterministicCudaRunsAreBitwiseEqual:DistBackend.*'

# MoE experts through at::_grouped_mm (the fused bf16 kernel on sm90/sm100) against the per-expert loop, at
# Qwen3-30B-A3B's expert shapes with empty groups; the log holds both paths' time per call.
step "build test_models" 150 "$OUTDIR/build.log" cmake --build "$BUILD" --target test_models -j16
step "MoE grouped GEMM == per-expert loop (CUDA bf16)" 60 "$OUTDIR/moe.log" env DFLASH_REQUIRE_CUDA=1 \
  "$BUILD/tests/models/test_models" --gtest_filter='MoeGrouped*'
note "INFO  $(grep -h 'moe_forward' "$OUTDIR/moe.log" 2>/dev/null | tr '\n' ';')"

# Later: a tiny GPU training run (a few hundred steps of the drafter on the SmolLM2 target with
# --device cuda, checking that the loss falls and tau > 1) belongs here, once `dflash train` exists.

note "total $(($(date +%s) - T0)) s, $failures failed step(s)"
cat "$SUMMARY"
exit $((failures > 0))
