#!/usr/bin/env bash
# Issue 25's one-shot GPU run: the whole pipeline on one GPU with the `--full` recipe's drafter (4 layers, block
# 16) on SmolLM2-135M: the target's own answers to all 7473 GSM8K train prompts (regenerated ahead of time on
# a CPU and carried in as a .jsonl.gz: on the GPU the batched regeneration would take most of the budget),
# training with the target online on the GPU (target and one drafter worker on cuda:0; with
# GPU_PIPELINE_NCCL=1 the gradients go through c10d NCCL in a group of one), then `dflash eval` on the GPU on
# held-out GSM8K test, HumanEval and MT-Bench, lossless check on. Three drafter families are trained one after
# the other on the same answers at equal steps (GPU_PIPELINE_FAMILIES, default "dflash dspark dflash2": demo.sh
# --family), each under an equal share of the time left. Everything lands in $OUT (or gpu-pipeline-out/):
# the demo's logs, and per family eval.json, metrics.jsonl, the PNG plots and the drafter's config (dflash in
# $OUT itself, the others in $OUT/dspark and $OUT/dflash2); commit them under docs/gpu/.
#
# Sizes for a ~10 minute device budget (override by environment): GPU_PIPELINE_STEPS (default 4000 shared out
# among the families: 1333 steps each for three), GPU_PIPELINE_EVAL (GSM8K prompts, default 200 shared out
# likewise; HumanEval and MT-Bench get a tenth each), GPU_PIPELINE_MAX_NEW (default 128). The regenerated answers: GPU_PIPELINE_ANSWERS (default data/regenerated/smollm2_gsm8k_train.jsonl.gz;
# made with `bash scripts/gpu_pipeline.sh --regenerate`, hours on 2 CPU cores, resumable).
# The committed file (2026-12-05) holds 3607 of the 7473 answers (the first ~48% of each of the two shards; an hour
# of the 2-core machine); the run trains on what is there, and --regenerate on a machine with time completes it.
#
#   device call: carry [".cache/gpu_deps"], command "bash scripts/gpu_pipeline.sh", timeout_s 580
#   dry run here (CPU, 8 prompts, a few steps: the same stages end to end): bash scripts/gpu_pipeline.sh --dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=gpu
case "${1:-}" in
  --dry-run) MODE=dry ;;
  --regenerate) MODE=regenerate ;;
  "") ;;
  *) echo "gpu_pipeline: unknown option '$1'" >&2; exit 2 ;;
esac
MODEL=models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
DATA="${DFLASH_DATA_DIR:-$ROOT/../shared/data}"
ANSWERS=${GPU_PIPELINE_ANSWERS:-$ROOT/data/regenerated/smollm2_gsm8k_train.jsonl.gz}

if [[ $MODE == regenerate ]]; then
  # The answers the GPU run trains on: greedy, up to 512 tokens, two processes (one core each), resumable.
  BUILD=${DFLASH_BUILD_DIR:-$ROOT/build}
  work=$ROOT/.cache/regenerate-full
  mkdir -p "$work" "$(dirname "$ANSWERS")"
  common=(data regenerate --target "$MODEL" --input "$DATA/gsm8k_train.jsonl" --split train --max-new 512 --shards 2
          --threads 1 --batch 64)
  OMP_WAIT_POLICY=passive "$BUILD/dflash" "${common[@]}" --shard 1 --output "$work/shard1.jsonl" 2> "$work/shard1.log" &
  other=$!
  OMP_WAIT_POLICY=passive "$BUILD/dflash" "${common[@]}" --shard 0 --output "$work/shard0.jsonl" || exit 1
  wait "$other" || { echo "shard 1 failed: $work/shard1.log" >&2; exit 1; }
  cat "$work/shard0.jsonl" "$work/shard1.jsonl" | gzip -9 > "$ANSWERS.tmp" && mv "$ANSWERS.tmp" "$ANSWERS"
  echo "wrote $ANSWERS ($(zcat "$ANSWERS" | wc -l) answers)"
  exit 0
fi

OUTDIR=${OUT:-$ROOT/gpu-pipeline-out}
mkdir -p "$OUTDIR"
# The budget is the GPU loan's; the CPU dry run (three families on a possibly shared machine) has no time limit.
if [[ $MODE == dry ]]; then BUDGET=${GPU_PIPELINE_BUDGET_S:-0}; else BUDGET=${GPU_PIPELINE_BUDGET_S:-560}; fi
FAMILIES=(${GPU_PIPELINE_FAMILIES:-dflash dspark dflash2})
for fam in "${FAMILIES[@]}"; do
  case "$fam" in
    dflash|dspark|dflash2) ;;
    *) echo "gpu_pipeline: GPU_PIPELINE_FAMILIES names '$fam', expected dflash, dspark or dflash2" >&2; exit 2 ;;
  esac
done
NFAM=${#FAMILIES[@]}
source "$ROOT/scripts/gpu_common.sh"
note "gpu_pipeline $(date -u +%FT%TZ) mode $MODE python $PY"

DEMO_OUT=$OUTDIR/full
mkdir -p "$DEMO_OUT/data"
if [[ $MODE == dry ]]; then
  BUILD=${DFLASH_BUILD_DIR:-$ROOT/build}
  export DEMO_DEVICE=cpu DEMO_PROMPTS=8 DEMO_MAX_NEW=24 DEMO_STEPS=4 DEMO_EVAL_PROMPTS=1 DEMO_EVAL_MAX_NEW=16
  export DEMO_ANCHORS=16 DEMO_MAX_LEN=128
  export DEMO_LLAMA_THREADS=1   # demo stage 4 (llama.cpp) on a machine the test suite shares
else
  BUILD=$ROOT/build-gpu
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$SUMMARY"
  gpu_configure "$BUILD" "$OUTDIR/build.log"
  step "build dflash" 240 "$OUTDIR/build.log" cmake --build "$BUILD" --target dflash -j16
  # The answers come regenerated: stage 1 of the demo finds them and is skipped.
  if [[ -f $ANSWERS ]]; then
    zcat "$ANSWERS" > "$DEMO_OUT/data/train.jsonl"
    n=$(wc -l < "$DEMO_OUT/data/train.jsonl")
    echo "prompts=$n max_new=512" > "$DEMO_OUT/data/.done"
    export DEMO_PROMPTS=$n DEMO_MAX_NEW=512
    note "INFO  $n regenerated answers from $ANSWERS"
  else
    note "INFO  $ANSWERS missing: the demo regenerates on the GPU (slow)"
  fi
  # The demo's llama.cpp stage is left out: llama.cpp is built for the CPU, and its decode of every eval prompt
  # would take the loan's minutes (the CPU demo and `make test` run it).
  export DEMO_DEVICE=cuda:0 DEMO_STEPS=${GPU_PIPELINE_STEPS:-$((4000 / NFAM))} DEMO_LLAMA_CPP=0
  export DEMO_EVAL_PROMPTS=${GPU_PIPELINE_EVAL:-$((200 / NFAM))} DEMO_EVAL_MAX_NEW=${GPU_PIPELINE_MAX_NEW:-128}
  if [[ ${GPU_PIPELINE_NCCL:-0} == 1 ]]; then  # a c10d NCCL group of one around the single CUDA worker
    export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517
  fi
fi
# One family after the other on the same answers (demo.sh shares its data stage): each gets an equal share of
# the time left, so a slow one cannot starve the next.
for i in "${!FAMILIES[@]}"; do
  fam=${FAMILIES[$i]}
  if [[ $fam == dflash ]]; then FAM_RUN=$DEMO_OUT FAM_OUT=$OUTDIR; else FAM_RUN=$DEMO_OUT/$fam FAM_OUT=$OUTDIR/$fam; fi
  share=$(( BUDGET == 0 ? 0 : (BUDGET - ($(date +%s) - T0)) / (NFAM - i) ))
  step "demo.sh --full --family $fam on $DEMO_DEVICE" "$share" "$OUTDIR/demo-$fam.log" env DEMO_OUT="$DEMO_OUT" \
    bash scripts/demo.sh "$BUILD" --full --family "$fam"
  mkdir -p "$FAM_OUT"
  for f in eval.json metrics.jsonl; do
    [[ -f $FAM_RUN/$f ]] && cp "$FAM_RUN/$f" "$FAM_OUT/" || note "FAIL  $fam: $f was not written"
  done
  [[ -f $FAM_RUN/eval_llama_cpp.json ]] && cp "$FAM_RUN/eval_llama_cpp.json" "$FAM_OUT/"
  cp "$FAM_RUN"/*.png "$FAM_OUT/" 2>/dev/null
  [[ -f $FAM_RUN/drafter/config.json ]] && cp "$FAM_RUN/drafter/config.json" "$FAM_OUT/drafter_config.json"
  [[ -f $FAM_OUT/eval.json ]] && "$PY" - "$fam" "$FAM_OUT/eval.json" <<'PYEOF' 2>&1 | tee -a "$SUMMARY"
import json, sys
r = json.load(open(sys.argv[2]))
for d in r["datasets"]:
    print(f'{sys.argv[1]} {d["name"]}: tau {d["tau"]:.2f} over {d["prompts"]} prompts, speedup {d["speedup"]:.2f}x, '
          f'lossless {d["lossless"]}, block {r["block_size"]}')
PYEOF
done
note "total $(($(date +%s) - T0)) s, $failures failed step(s)"
cat "$SUMMARY"
exit $((failures > 0))
