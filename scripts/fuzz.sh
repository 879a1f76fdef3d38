#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by `make build` when clang with libFuzzer is installed) on the
# seed corpus plus the corpus kept from earlier runs. A crash, sanitizer report, leak, hang (> 10 s per input)
# or an error that does not name its input fails the run and leaves the input in BUILD/fuzz/artifacts/.
#   scripts/fuzz.sh [--build DIR] [--seconds S | --runs N] [TARGET...]
# ctest runs each target for a few seconds; `make fuzz` runs them longer (FUZZ_SECONDS, FUZZ_RUNS).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=build
LIMIT=(-max_total_time=60)
TARGETS=()
while (($#)); do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --seconds) LIMIT=(-max_total_time="$2"); shift 2 ;;
    --runs) LIMIT=(-runs="$2"); shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=(safetensors gguf tokenizer_json train_config jsonl shard_index device_list model_settings)
FUZZ="$BUILD/fuzz"
if [ ! -x "$FUZZ/make_fuzz_seeds" ]; then
  echo "fuzz: $FUZZ has no fuzz targets (needs clang with libFuzzer: apt install clang libclang-rt-dev, then make build)" >&2
  exit 1
fi
[ -d "$FUZZ/seeds" ] || "$FUZZ/make_fuzz_seeds" "$FUZZ/seeds" || exit 1
mkdir -p "$FUZZ/artifacts"
status=0
for t in "${TARGETS[@]}"; do
  bin="$FUZZ/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target $bin" >&2; status=1; continue; }
  corpus="$FUZZ/corpus/$t"
  mkdir -p "$corpus"
  log="$FUZZ/fuzz_$t.log"
  # ASan: report leaks at exit, abort on the first error; UBSan: any report stops the run.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$bin" "${LIMIT[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$FUZZ/artifacts/$t-" "$corpus" "$FUZZ/seeds/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1)
  if ((rc == 0)); then
    echo "fuzz_$t: ok, ${runs:-?} executions in ${secs:-?} s, corpus $(ls "$corpus" | wc -l) inputs"
  else
    echo "fuzz_$t: FAILED (exit $rc); log $log, input in $FUZZ/artifacts/$t-*" >&2
    tail -40 "$log" >&2
    status=1
  fi
done
exit $status
