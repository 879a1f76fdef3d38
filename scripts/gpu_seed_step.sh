#!/usr/bin/env bash
# Issue 24's one-shot GPU run: the seed's failing training step, for real, on one H200 (< 9 minutes).
#   1. the planner's prediction for that step (policies none and layer);
#   2. `bench step --device cuda` at exactly that shape: a 5-layer drafter at Qwen3.6-27B width (hidden 5120,
#      24 x 256 q heads, 4 KV heads, MLP 17408, vocab 248320), sequence 8000, 1024 anchors x 16, bf16, soft
#      labels 0.15, the frozen embedding / LM head at full vocabulary: seconds per step, the caching allocator's
#      peak against the plan;
#   3. the same step with 1, 2 and 3 worker threads on the one GPU at once (one replica each, the seed's
#      topology squeezed onto one card): per-worker results against a lone worker's, total throughput;
#   4. the plain-PyTorch step of the same drafter with our ops, with compiled flex_attention and with the seed's
#      per-block SDPA (expected to run out of memory: recorded with the peak it reached).
# Every step runs even when an earlier one fails; the script exits non-zero at the end if any failed.
#
# On the device machine (its own python3 with torch, no network):
#   here first:  bash scripts/gpu_check.sh --prepare      (Debian dev packages into .cache/gpu_deps)
#   device call: carry [".cache/gpu_deps"], command "bash scripts/gpu_seed_step.sh", timeout_s 560
# Outputs (summary, logs, JSON) go to $OUT when set, else gpu-seed-step-out/; commit them under docs/gpu/.
#
# Dry run on the CPU at a scaled-down shape, with the already built build/ (what `make test` checks):
#   bash scripts/gpu_seed_step.sh --dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1

OUTDIR=${OUT:-$ROOT/gpu-seed-step-out}
mkdir -p "$OUTDIR"
# The GPU loan's budget; the CPU dry run has no time limit (gpu_common.sh: BUDGET=0).
if ((DRY)); then BUDGET=${GPU_SEED_STEP_BUDGET_S:-0}; else BUDGET=${GPU_SEED_STEP_BUDGET_S:-520}; fi
source "$ROOT/scripts/gpu_common.sh"

note "gpu_seed_step $(date -u +%FT%TZ) python $PY dry_run $DRY"

if ((DRY)); then
  BUILD=${DFLASH_BUILD_DIR:-$ROOT/build}
  DEVICE=cpu
  # The same drafter family scaled down, and a short sequence: every code path of the GPU run, in seconds.
  STEP_SHAPE=(--model cpu-small --max-len 256 --num-anchors 16 --dtype fp32 --loss-chunk-rows 256 --iters 1)
  PLAN_SHAPE=(--preset seed-27b --max-len 256 --num-anchors 16)
  PY_SHAPE=(--preset seed-scaled --max-len 256 --num-anchors 16 --hidden 256 --intermediate 512 --heads 4 --kv-heads 2
            --head-dim 64 --vocab 4096 --kl-weight 0.15 --reps 1 --dtype fp32)
  PY_IMPLS=dflash,per_block_sdpa
else
  BUILD=$ROOT/build-gpu
  DEVICE=cuda
  STEP_SHAPE=(--model seed-27b --max-len 8000 --num-anchors 1024 --dtype bf16 --loss-chunk-rows 1024 --iters 2)
  PLAN_SHAPE=(--preset seed-27b)
  PY_SHAPE=(--preset seed --dtype bf16 --reps 1)
  PY_IMPLS=dflash,flex,per_block_sdpa
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
  gpu_configure "$BUILD" "$OUTDIR/build.log"
  step "build drafter_cli + dflash_ops" 200 "$OUTDIR/build.log" cmake --build "$BUILD" --target drafter_cli dflash_ops -j16
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" 2>&1 |
  tee -a "$SUMMARY"
CLI=$BUILD/drafter_cli

for pol in none layer; do
  step "plan ($pol)" 30 "$OUTDIR/plan.log" bash -c '"$0" plan "${@:1}" > "'"$OUTDIR/plan_$pol.json"'"' "$CLI" \
    "${PLAN_SHAPE[@]}" --activation-checkpoint "$pol" --device "$DEVICE" --json
done
step "bench step: policies none + layer, 1 worker" 200 "$OUTDIR/bench_step.log" "$CLI" bench step --device "$DEVICE" \
  "${STEP_SHAPE[@]}" --kl-weight 0.15 --policies none,layer --workers 1 --reference 0 --generic-ce 0 \
  --json "$OUTDIR/bench_step.json"
step "bench step: 1, 2 and 3 workers at once (policy layer)" 200 "$OUTDIR/bench_step_workers.log" "$CLI" bench step \
  --device "$DEVICE" "${STEP_SHAPE[@]}" --kl-weight 0.15 --policies layer --workers 1,2,3 --reference 0 \
  --generic-ce 0 --json "$OUTDIR/bench_step_workers.json"
step "plain-PyTorch step: dflash ops vs flex vs per-block SDPA" 240 "$OUTDIR/python_step.log" env PYTHONPATH="$ROOT/python" \
  DFLASH_OPS_LIBRARY="$BUILD/libdflash_ops.so" "$PY" examples/bench_python_step.py --device "$DEVICE" "${PY_SHAPE[@]}" \
  --impls "$PY_IMPLS" --json "$OUTDIR/python_step.json"

note "total $(($(date +%s) - T0)) s, $failures failed step(s)"
cat "$SUMMARY"
exit $((failures > 0))
