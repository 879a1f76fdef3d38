#!/usr/bin/env bash
# `make demo`: the whole DFlash pipeline on SmolLM2-135M-Instruct, on CPU, in about half an hour on 2 cores.
#   1. the target writes its own answers to 1536 GSM8K *train* prompts (dflash data regenerate, 2 shards,
#      and keeps its layer outputs of every token, the drafter's features  64 answers decoded together each)
#   2. a 1-layer drafter (block 4) is trained on them with 2 workers    (dflash train, offline, live progress)
#   3. speculative decoding on held-out prompts: GSM8K test, HumanEval,  (dflash eval: tau, speedup,
#      MT-Bench first turns, against the target alone in the same run    lossless check)
#   4. the same prompts in llama.cpp, the real serving engine: the        (export --gguf, eval --engine
#      drafter converted by llama.cpp's own converter, its tau and speed   llama.cpp)
#   5. plots: training loss and acceptance histogram; both engines' tables
# Everything lands in demo-out/. Each finished stage is skipped on a second run (delete demo-out/ to redo).
#
# usage: bash scripts/demo.sh BUILD_DIR [--long | --full] [--family dflash|dspark|dflash2]
#   --family the drafter family trained and evaluated (default dflash, in demo-out/ as always; dspark and dflash2
#            in demo-out/dspark and demo-out/dflash2, sharing demo-out/data with dflash). DSpark trains offline on
#            the target's last hidden state as well (regenerate --last-hidden, one more target forward per answer:
#            only written when a family needs it, then kept for all). eval does not run dflash2 drafters yet.
#   --long   the demo's recipe with more answers and 2x the steps (2048 prompts, 12000 steps; 20 more minutes
#            on 2 cores), in demo-out/long; it takes over the demo's answers and features when they are there
#   --full   the longer recipe for the best tau: all 7473 GSM8K train prompts, 6 epochs, 512-token answers,
#            4 drafter layers, block 16, 200/164/80 eval prompts (many hours on 2 cores; minutes on a GPU box)
# Sizes can also be set one by one: DEMO_PROMPTS, DEMO_MAX_NEW, DEMO_STEPS, DEMO_LAYERS, DEMO_BLOCK, DEMO_OFFLINE,
# DEMO_TARGET_LAYERS, DEMO_LR, DEMO_FINAL_NORM, DEMO_DTYPE, DEMO_EVAL_PROMPTS, DEMO_EVAL_MAX_NEW, DEMO_MAX_DRAFT,
# DEMO_OUT, DEMO_INIT_FROM (a drafter model.safetensors the training starts from; dflash2 takes a DFlash one's).
# DEMO_DEVICE=cuda:0 runs every stage on that GPU (target and drafter; default cpu). DEMO_DRAFT_VOCAB=K
# trains with a K-token draft vocabulary (default 0: the target's full vocabulary). DEMO_LLAMA_CPP=0 leaves out
# stage 4 (llama.cpp runs on the CPU only); DEMO_LLAMA_THREADS its threads (default: all
# cores when the CPU is idle, else 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build}"
shift || true
FULL=0
LONG=0
FAMILY=dflash
while [ $# -gt 0 ]; do
  case "$1" in
    --full) FULL=1 ;;
    --long) LONG=1 ;;
    --family) [ $# -ge 2 ] || { echo "demo: --family needs a value: dflash, dspark or dflash2" >&2; exit 2; }
              FAMILY="$2"; shift ;;
    --family=*) FAMILY="${1#--family=}" ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "demo: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$FAMILY" in
  dflash|dspark|dflash2) ;;
  *) echo "demo: --family '$FAMILY' is not a drafter family, expected dflash, dspark or dflash2" >&2; exit 2 ;;
esac

DFLASH="$BUILD/dflash"
MODEL="models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DATA="${DFLASH_DATA_DIR:-$ROOT/../shared/data}"
[ -d "$DATA" ] || DATA="$ROOT/data"
OUT="${DEMO_OUT:-$ROOT/demo-out}"
PY="$ROOT/.venv/bin/python"
for f in "$DFLASH" "$MODEL" "$DATA/gsm8k_train.jsonl" "$DATA/gsm8k_test.jsonl"; do
  [ -e "$f" ] || { echo "demo: $f is missing (run 'make build' / scripts/setup.sh first)" >&2; exit 1; }
done
# Idle OpenMP threads must sleep, not spin: on a shared 2-core machine spinning makes decode 10x slower.
# A policy the caller set wins everywhere, the eval stage included (the test suite runs the demo passive).
CALLER_WAIT_POLICY="${OMP_WAIT_POLICY:-}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

# Sizes. The defaults fit ~30 minutes on 2 CPU cores (rates measured on this machine: see docs/BENCHMARKS.md).
if [ "$FULL" = 1 ]; then
  : "${DEMO_PROMPTS:=7473}" "${DEMO_MAX_NEW:=512}" "${DEMO_STEPS:=0}" "${DEMO_LAYERS:=4}" "${DEMO_BLOCK:=16}"
  : "${DEMO_OFFLINE:=0}"  # 7473 samples of features would be ~15 GB on disk: the target runs online instead
  : "${DEMO_EVAL_PROMPTS:=200}" "${DEMO_EVAL_MAX_NEW:=256}" "${DEMO_ANCHORS:=256}" "${DEMO_MAX_LEN:=1024}"
  : "${DEMO_LR:=6e-4}"   # the paper's lr for multi-epoch runs
  OUT="${DEMO_OUT:-$ROOT/demo-out/full}"
else
  if [ "$LONG" = 1 ]; then
    : "${DEMO_PROMPTS:=2048}" "${DEMO_STEPS:=12000}"
    OUT="${DEMO_OUT:-$ROOT/demo-out/long}"
  fi
  # Many small steps (16 anchors per sequence, 2 sequences) learn more per CPU second than few large ones at
  # this size. Block 4 trains exactly the 3 drafts the CPU eval verifies (below): a step costs 3/4 of a block-8
  # step (the LM head dominates) for the same tau at equal steps, so more steps fit (docs/BENCHMARKS.md, "How
  # the demo recipe was chosen").
  : "${DEMO_PROMPTS:=1536}" "${DEMO_MAX_NEW:=192}" "${DEMO_STEPS:=6000}" "${DEMO_LAYERS:=1}" "${DEMO_BLOCK:=4}"
  : "${DEMO_OFFLINE:=1}"
  : "${DEMO_EVAL_PROMPTS:=6}" "${DEMO_EVAL_MAX_NEW:=128}" "${DEMO_ANCHORS:=16}" "${DEMO_MAX_LEN:=512}"
  # Verify only the first 3 proposals: on CPU each verified row costs LM-head time, and a short drafter's
  # later slots are rarely accepted (docs/BENCHMARKS.md, "Speculative cycle on CPU").
  : "${DEMO_MAX_DRAFT:=3}"
fi
: "${DEMO_MAX_DRAFT:=0}"
# Five target layers spread over SmolLM2's 30 (the formula of docs/DFLASH.md for 5 drafter layers) even for a 1-layer
# drafter: the deep ones carry most of the next-token signal. A higher peak lr (short run) and a small start
# for the final norm (logits through the tied LM head scale with it) make the few hundred CPU steps count.
: "${DEMO_TARGET_LAYERS:=1,8,14,20,27}" "${DEMO_LR:=2e-3}" "${DEMO_FINAL_NORM:=0.3}"
# bf16 training where the CPU has bf16 instructions: oneDNN's bf16 GEMMs make a demo training step 2x faster than
# fp32, with the same tau (docs/BENCHMARKS.md, "bf16 on CPU"); elsewhere bf16 is emulated. The drafter keeps fp32
# master weights and AdamW state either way.
if [ "${DEMO_DEVICE:-cpu}" != cpu ] || grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo 2>/dev/null; then
  : "${DEMO_DTYPE:=bf16}"
else
  : "${DEMO_DTYPE:=fp32}"
fi
MASK_TOKEN=16   # SmolLM2's <empty_output>: a real vocabulary row never seen in chat (not eos/pad, docs/DFLASH.md)
# Where everything runs: on the CPU two drafter workers share the cores; on a GPU one worker has the card.
: "${DEMO_DEVICE:=cpu}"
if [ "$DEMO_DEVICE" = cpu ]; then DRAFTER_DEVICES=cpu,cpu; else DRAFTER_DEVICES=$DEMO_DEVICE; fi
mkdir -p "$OUT/data"
STAGE_T0=$(date +%s)
stage() { echo; echo "== $* =="; STAGE_T0=$(date +%s); }
stage_done() { echo "-- done in $(( $(date +%s) - STAGE_T0 )) s"; }

# 1. Regenerate: the target's own greedy answers (two processes, one core each; resumable, per shard). For offline
#    training the same pass keeps the target's layer outputs of every token (--hidden-out): the drafter's
#    features, stored once in bf16 shards, so the training steps below do not rerun the target (5x faster steps
#    here) and no second pass over the samples is needed.
TRAIN="$OUT/data/train.jsonl"
FEATURES="$OUT/data/features"
REGEN_KEY="prompts=$DEMO_PROMPTS max_new=$DEMO_MAX_NEW"
FEATURE_FLAGS=()
# DSpark's offline objective needs the target's final-normed last hidden state. It costs one more target forward
# per answer, so it is written only when a family needs it (or the folder already has it: features are resumed
# only with the settings they were written with), and then serves every family.
LAST_HIDDEN=0
if [ "$DEMO_OFFLINE" = 1 ]; then
  [ "$FAMILY" = dspark ] && LAST_HIDDEN=1
  grep -q "last-hidden" "$OUT/data/.features_key" 2>/dev/null && LAST_HIDDEN=1
  REGEN_KEY="$REGEN_KEY features=$DEMO_TARGET_LAYERS"
  FEATURE_FLAGS=(--hidden-out "$FEATURES" --target-layer-ids "$DEMO_TARGET_LAYERS")
  if [ "$LAST_HIDDEN" = 1 ]; then
    REGEN_KEY="$REGEN_KEY last-hidden"
    FEATURE_FLAGS+=(--last-hidden)
  fi
fi
stage "1/5 regenerate answers to $DEMO_PROMPTS GSM8K train prompts (max $DEMO_MAX_NEW tokens)$([ "$DEMO_OFFLINE" = 1 ] && echo ', with their target features')$([ "$LAST_HIDDEN" = 1 ] && echo ' and last hidden state')"
if [ -f "$TRAIN" ] && [ "$(cat "$OUT/data/.done" 2>/dev/null)" = "$REGEN_KEY" ]; then
  echo "cached: $TRAIN ($(wc -l < "$TRAIN") samples)"
else
  rm -f "$OUT/data/.done"
  # Features for other target layers cannot be resumed into: start them again (the answers are kept). The key
  # names what the folder is pinned to, so a folder from before features were pinned to answers is redone too.
  FEATURES_KEY="layers=$DEMO_TARGET_LAYERS pinned-to=answers"
  [ "$LAST_HIDDEN" = 1 ] && FEATURES_KEY="$FEATURES_KEY last-hidden"
  [ "$(cat "$OUT/data/.features_key" 2>/dev/null)" = "$FEATURES_KEY" ] || rm -rf "$FEATURES"
  echo "$FEATURES_KEY" > "$OUT/data/.features_key"
  # --long starts from the demo's answers and features: regenerate resumes a shard file (the prompt limit may
  # grow) and refuses one written with other settings, so only shards with the same answer length are taken
  # over. Their feature parts come along (hard links: shard files are never rewritten) when the demo kept the
  # same layers; otherwise regenerate computes them again, one target forward per taken-over answer.
  from_features="$ROOT/demo-out/data/features"
  same_features=0
  [ "$DEMO_OFFLINE" = 1 ] && [ "$(cat "$ROOT/demo-out/data/.features_key" 2>/dev/null)" = "$FEATURES_KEY" ] &&
    same_features=1
  for k in 0 1; do
    from="$ROOT/demo-out/data/shard$k.jsonl"
    if [ "$LONG" = 1 ] && [ ! -e "$OUT/data/shard$k.jsonl" ] && [ -f "$from.meta.json" ] &&
       grep -q "\"max_new\": $DEMO_MAX_NEW\b" "$from.meta.json"; then
      cp "$from" "$from.meta.json" "$OUT/data/" && echo "resuming from the demo's answers: $from"
      part="part${k}of2"
      if [ "$same_features" = 1 ] && [ -f "$from_features/index-$part.json" ] &&
         ls "$from_features/$part"-* > /dev/null 2>&1; then
        mkdir -p "$FEATURES"
        cp -l "$from_features/$part"-* "$from_features/index-$part.json" "$FEATURES/" 2>/dev/null ||
          cp "$from_features/$part"-* "$from_features/index-$part.json" "$FEATURES/"
        echo "  and their features: $from_features/index-$part.json"
      fi
    fi
  done
  common=(data regenerate --target "$MODEL" --input "$DATA/gsm8k_train.jsonl" --split train
          --limit "$DEMO_PROMPTS" --max-new "$DEMO_MAX_NEW" --shards 2 --threads 1 --batch 64 --devices "$DEMO_DEVICE"
          "${FEATURE_FLAGS[@]}")
  "$DFLASH" "${common[@]}" --shard 1 --output "$OUT/data/shard1.jsonl" 2> "$OUT/data/shard1.log" &
  other=$!
  "$DFLASH" "${common[@]}" --shard 0 --output "$OUT/data/shard0.jsonl"
  wait "$other" || { echo "demo: shard 1 failed, see $OUT/data/shard1.log" >&2; exit 1; }
  tail -n 2 "$OUT/data/shard1.log"
  cat "$OUT/data/shard0.jsonl" "$OUT/data/shard1.jsonl" > "$TRAIN.tmp" && mv "$TRAIN.tmp" "$TRAIN"
  echo "$REGEN_KEY" > "$OUT/data/.done"
  echo "wrote $TRAIN ($(wc -l < "$TRAIN") samples)$([ "$DEMO_OFFLINE" = 1 ] && echo " and their features in $FEATURES")"
fi
TRAIN_DATA="$TRAIN"
[ "$DEMO_OFFLINE" = 1 ] && TRAIN_DATA="$FEATURES"
stage_done

# 2. Train the drafter (2 worker threads), export it as an HF drafter folder, plot the loss.
# Each family trains in its own folder (dflash in $OUT itself, as before families existed) on the shared data.
if [ "$FAMILY" != dflash ]; then OUT="$OUT/$FAMILY"; mkdir -p "$OUT"; fi
RUN="$OUT/run"
DRAFTER="$OUT/drafter"
FAMILY_FLAGS=()
[ "$FAMILY" != dflash ] && FAMILY_FLAGS=(--drafter-family "$FAMILY")
[ -n "${DEMO_INIT_FROM:-}" ] && FAMILY_FLAGS+=(--init-from "$DEMO_INIT_FROM")
TRAIN_KEY="$REGEN_KEY steps=$DEMO_STEPS layers=$DEMO_LAYERS block=$DEMO_BLOCK anchors=$DEMO_ANCHORS max_len=$DEMO_MAX_LEN"
TRAIN_KEY="$TRAIN_KEY target_layers=$DEMO_TARGET_LAYERS lr=$DEMO_LR final_norm=$DEMO_FINAL_NORM offline=$DEMO_OFFLINE"
TRAIN_KEY="$TRAIN_KEY dtype=$DEMO_DTYPE device=$DEMO_DEVICE${DEMO_DRAFT_VOCAB:+ draft_vocab=$DEMO_DRAFT_VOCAB}"
[ "$FAMILY" != dflash ] && TRAIN_KEY="$TRAIN_KEY family=$FAMILY"
TRAIN_KEY="$TRAIN_KEY${DEMO_INIT_FROM:+ init_from=$DEMO_INIT_FROM}"
stage "2/5 train a $DEMO_LAYERS-layer $FAMILY drafter (block $DEMO_BLOCK) on $DRAFTER_DEVICES, $DEMO_STEPS steps"
if [ -f "$DRAFTER/model.safetensors" ] && [ "$(cat "$OUT/.train_done" 2>/dev/null)" = "$TRAIN_KEY" ]; then
  echo "cached: $DRAFTER"
else
  rm -f "$OUT/.train_done"
  if [ -f "$RUN/checkpoints/latest" ] && [ "$(cat "$OUT/.train_key" 2>/dev/null)" = "$TRAIN_KEY" ]; then
    "$DFLASH" train --out "$RUN" --resume
  else
    rm -rf "$RUN"
    echo "$TRAIN_KEY" > "$OUT/.train_key"
    "$DFLASH" train --target "$MODEL" --data "$TRAIN_DATA" --out "$RUN" --drafter-layers "$DEMO_LAYERS" \
      --mask-token-id "$MASK_TOKEN" --block-size "$DEMO_BLOCK" --steps "$DEMO_STEPS" --drafter-devices "$DRAFTER_DEVICES" \
      --target-devices "$DEMO_DEVICE" \
      --max-len "$DEMO_MAX_LEN" --num-anchors "$DEMO_ANCHORS" --dtype "$DEMO_DTYPE" --log-every 10 --checkpoint-every 200 \
      --target-layer-ids "$DEMO_TARGET_LAYERS" --lr "$DEMO_LR" --init-final-norm "$DEMO_FINAL_NORM" \
      --draft-vocab "${DEMO_DRAFT_VOCAB:-0}" "${FAMILY_FLAGS[@]}"
  fi
  rm -rf "$DRAFTER"
  # A draft vocabulary is served by vLLM only: export it for that engine (docs/SERVING.md). DSpark and DFlash2
  # are exported for the engines that serve them (z-lab and speculators do not serve DSpark, speculators not DFlash2).
  if [ "${DEMO_DRAFT_VOCAB:-0}" != 0 ]; then EXPORT_ENGINE=vllm
  elif [ "$FAMILY" = dspark ]; then EXPORT_ENGINE=sglang,vllm,llama.cpp
  elif [ "$FAMILY" = dflash2 ]; then EXPORT_ENGINE=sglang,vllm,llama.cpp,zlab
  else EXPORT_ENGINE=all; fi
  "$DFLASH" export "$RUN" --out "$DRAFTER" --engine "$EXPORT_ENGINE"
  echo "$TRAIN_KEY" > "$OUT/.train_done"
fi
cp "$RUN/metrics.jsonl" "$OUT/metrics.jsonl"
"$DFLASH" plot "$RUN" --out "$OUT" || echo "demo: warning: loss plot failed (dflash plot)" >&2
stage_done

# 3. Evaluate on held-out prompts (never in the training data): speculative vs the target alone.
EVAL="$OUT/eval.json"
EVAL_KEY="$TRAIN_KEY eval=$DEMO_EVAL_PROMPTS eval_max_new=$DEMO_EVAL_MAX_NEW max_draft=$DEMO_MAX_DRAFT"
stage "3/5 evaluate: $DEMO_EVAL_PROMPTS prompts each of GSM8K test, HumanEval, MT-Bench (max $DEMO_EVAL_MAX_NEW tokens)"
sets="gsm8k_test=$DATA/gsm8k_test.jsonl"
[ -f "$DATA/humaneval.jsonl.gz" ] && sets="$sets,humaneval=$DATA/humaneval.jsonl.gz"
[ -f "$DATA/mt_bench_questions.jsonl" ] && sets="$sets,mt_bench=$DATA/mt_bench_questions.jsonl"
if [ -f "$EVAL" ] && [ "$(cat "$OUT/.eval_done" 2>/dev/null)" = "$EVAL_KEY" ]; then
  echo "cached: $EVAL"
else
  rm -f "$OUT/.eval_done"
  rc=0
  # Spinning OpenMP threads on every core hand work over faster (verify 72 -> 52 ms) on an idle machine, but on a
  # busy one they fight the other processes for the cores (eval fell to 0.7-4 tokens/s beside a build, against 9
  # with passive waiting on 1 thread). So the eval spins on all cores only when they are free now (idle share over
  # one second, scripts/cpu_idle.sh), else it waits passively on 1 thread. A caller's OMP_WAIT_POLICY is kept.
  IDLE=$(bash scripts/cpu_idle.sh)
  EVAL_THREADS=$(nproc)
  EVAL_POLICY=active
  if [ "$IDLE" -lt 80 ]; then EVAL_THREADS=1; EVAL_POLICY=passive; fi
  EVAL_POLICY="${CALLER_WAIT_POLICY:-$EVAL_POLICY}"
  echo "eval: $EVAL_THREADS thread(s), OMP_WAIT_POLICY=$EVAL_POLICY (the CPU is $IDLE% idle)"
  OMP_WAIT_POLICY="$EVAL_POLICY" "$DFLASH" eval --target "$MODEL" --devices "$DEMO_DEVICE" --drafter "$DRAFTER" --data "$sets" \
    --limit "$DEMO_EVAL_PROMPTS" --max-new "$DEMO_EVAL_MAX_NEW" --max-draft "$DEMO_MAX_DRAFT" --threads "$EVAL_THREADS" \
    --json "$EVAL" --tokens-out "$OUT/eval_tokens.jsonl" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || exit "$rc"   # 3: ran, but some output was not lossless (reported)
  echo "$EVAL_KEY" > "$OUT/.eval_done"
fi
stage_done

# 4. The same prompts in llama.cpp (scripts/setup_llama_cpp.sh built it): the run exported again with its GGUF
#    (llama.cpp's own converter; the target folder it needs is written from the GGUF target), then
#    llama-speculative-simple with it and llama-completion alone, greedy, the same drafts per cycle. On this CPU
#    with the 135M target expect no speed-up: a cycle (the drafter's block and the verify of 4 tokens) costs ~4
#    single decodes of the Q4_1 target in llama.cpp, which tau ~1.4 cannot pay (README, docs/BENCHMARKS.md
#    "Agreement with llama.cpp"); the point is the same tau in both engines.
LLAMA_EVAL="$OUT/eval_llama_cpp.json"
LLAMA_DRAFTER="$OUT/drafter-gguf"
: "${DEMO_LLAMA_CPP:=1}"
# llama.cpp's threads spin while they wait (a passive OpenMP policy is no help there): all cores only on an idle
# CPU, else 1 (beside other work 2 threads crawled to 1.8 tokens/s against 59 with 1; docs/BENCHMARKS.md).
if [ -z "${DEMO_LLAMA_THREADS:-}" ]; then
  DEMO_LLAMA_THREADS=1
  if [ "$DEMO_LLAMA_CPP" = 1 ] && [ "$(bash scripts/cpu_idle.sh)" -ge 80 ]; then DEMO_LLAMA_THREADS=$(nproc); fi
fi
LLAMA_KEY="$EVAL_KEY"
stage "4/5 llama.cpp on the same prompts: its tau and speed beside ours"
if [ "$DEMO_LLAMA_CPP" != 1 ]; then
  echo "skipped (DEMO_LLAMA_CPP=$DEMO_LLAMA_CPP)"
  rm -f "$LLAMA_EVAL"
elif [ "${DEMO_DRAFT_VOCAB:-0}" != 0 ]; then
  echo "skipped: a draft vocabulary is exported for vLLM only (docs/SERVING.md)"
  rm -f "$LLAMA_EVAL"
elif [ -f "$LLAMA_EVAL" ] && [ "$(cat "$OUT/.llama_done" 2>/dev/null)" = "$LLAMA_KEY" ]; then
  echo "cached: $LLAMA_EVAL"
else
  rm -f "$OUT/.llama_done"
  rm -rf "$LLAMA_DRAFTER"
  "$DFLASH" export "$RUN" --out "$LLAMA_DRAFTER" --engine llama.cpp --gguf
  rc=0
  echo "llama.cpp: $DEMO_LLAMA_THREADS thread(s)"
  "$DFLASH" eval --target "$MODEL" --drafter "$LLAMA_DRAFTER" --data "$sets" --limit "$DEMO_EVAL_PROMPTS" \
    --max-new "$DEMO_EVAL_MAX_NEW" --max-draft "$DEMO_MAX_DRAFT" --threads "$DEMO_LLAMA_THREADS" \
    --engine llama.cpp --json "$LLAMA_EVAL" || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || exit "$rc"   # 3: llama.cpp's speculative output differed from its target alone
  echo "$LLAMA_KEY" > "$OUT/.llama_done"
fi
stage_done

# 5. Plots and the summary tables.
stage "5/5 plots and summary"
"$PY" python/cli_scripts/plot_eval.py "$EVAL" "$OUT/acceptance.png"
"$PY" - "$EVAL" "$LLAMA_EVAL" <<'PYEOF'
import json, os, sys
r = json.load(open(sys.argv[1]))
verified = r.get("max_draft") or r["block_size"] - 1
print(f'block size {r["block_size"]} ({verified} drafts verified per cycle), temperature {r["temperature"]}, '
      f'max_new {r["max_new"]}')
print(f'{"dataset":<12} {"prompts":>7} {"tau":>6} {"+-se":>5} {"speedup":>8} {"spec tok/s":>11} {"target tok/s":>13} '
      f'{"lossless":>9}')
for d in r["datasets"]:
    ll = {True: "yes", False: "NO", None: "n/a"}[d["lossless"]]
    se = "-" if d.get("tau_stderr") is None else f'{d["tau_stderr"]:.2f}'
    print(f'{d["name"]:<12} {d["prompts"]:>7} {d["tau"]:>6.2f} {se:>5} {d["speedup"]:>7.2f}x {d["tokens_per_s"]:>11.1f} '
          f'{d["baseline_tokens_per_s"]:>13.1f} {ll:>9}')
print("(+-se: the standard error of tau over prompts; differences smaller than about twice it are noise)")
if os.path.exists(sys.argv[2]):
    l = json.load(open(sys.argv[2]))["llama_cpp"]
    ours = {d["name"]: d for d in r["datasets"]}
    print()
    print(f'llama.cpp (llama-speculative-simple, {l["draft_max"]} drafts per cycle, {l["threads"]} threads) on the same '
          f'prompts: its own counters and speed')
    print(f'{"dataset":<12} {"our tau":>7} {"llama tau":>9} {"+-se":>5} {"speedup":>8} {"spec tok/s":>11} '
          f'{"target tok/s":>13} {"same output":>12}')
    for d in l["datasets"]:
        se = "-" if d.get("accepted_per_cycle_stderr") is None else f'{d["accepted_per_cycle_stderr"]:.2f}'
        mine = f'{ours[d["name"]]["tau"]:.2f}' if d["name"] in ours else "-"
        print(f'{d["name"]:<12} {mine:>7} {d["accepted_per_cycle"]:>9.2f} {se:>5} {d["speedup"]:>7.2f}x '
              f'{d["tokens_per_s"]:>11.1f} {d["target_tokens_per_s"]:>13.1f} '
              f'{"yes" if d["output_equals_target"] else "NO":>12}')
    print("(llama tau: tokens per cycle as llama.cpp counts them; its first cycle also drafts the answer's first "
          "token, which ours takes from the prompt's forward. same output: its speculative answer equals its own "
          "decode without drafts. target tok/s: llama-completion)")
PYEOF
echo
echo "results in $OUT: eval.json $([ -f "$LLAMA_EVAL" ] && echo 'eval_llama_cpp.json drafter-gguf/ ')metrics.jsonl drafter/ acceptance.png $(cd "$OUT" && ls *.png 2>/dev/null | grep -v acceptance | tr '\n' ' ')"
