# Shared by the one-shot GPU scripts (gpu_check.sh, gpu_seed_step.sh, gpu_pipeline.sh): a time budget for the whole run and
# `step`, which runs one command under what is left of it, logs it, and records PASS/FAIL in the summary
# without stopping the script (every step runs even when an earlier one failed). Source it after setting
# OUTDIR, BUDGET and ROOT. BUDGET=0: no time limits at all (the CPU dry runs: the limits are sized for a GPU
# loan, and a dry run on a busy machine must not fail by the clock). PY is the checkout's .venv Python, else the
# machine's python3.
SUMMARY=$OUTDIR/summary.txt
: >"$SUMMARY"
failures=0
PY=$ROOT/.venv/bin/python
[[ -x "$PY" ]] || PY=$(command -v python3)
T0=$(date +%s)
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME TIMEOUT_S LOGFILE CMD...: runs, records pass/FAIL and the time taken
  local name=$1 limit=$2 log=$3; shift 3
  local t=$(date +%s)
  local left=$((BUDGET - (t - T0)))
  if ((BUDGET == 0)); then
    echo "===== $name (no time limit) ====="
    echo "===== $name =====" >>"$log"
    "$@" >>"$log" 2>&1
    step_result "$name" $? "$t" "$log"
    return 0
  fi
  if ((left < 20)); then
    failures=$((failures + 1))
    note "FAIL  $name: skipped, the ${BUDGET}s budget is spent"
    return 0
  fi
  ((limit > left)) && limit=$left
  echo "===== $name (limit ${limit}s) ====="
  echo "===== $name =====" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  step_result "$name" $? "$t" "$log"
  return 0
}
step_result() {  # step_result NAME RC START_S LOGFILE: the log's tail and the PASS/FAIL line
  local name=$1 rc=$2 t=$3 log=$4
  tail -n 40 "$log"
  if ((rc == 0)); then
    note "PASS  $name ($(($(date +%s) - t)) s)"
  else
    failures=$((failures + 1))
    note "FAIL  $name: exit $rc$( ((rc == 124)) && echo ' (timed out)') after $(($(date +%s) - t)) s, log $(basename "$log")"
    echo "!!!!! $name FAILED (exit $rc) -- continuing with the next step !!!!!"
  fi
}
# The carried Debian dev packages (gpu_check.sh --prepare) unpacked into a private prefix, for CMake.
gpu_prefix_path() {
  local deps=$1
  compgen -G "$deps/*.deb" >/dev/null || return 0
  mkdir -p "$deps/root"
  for f in "$deps"/*.deb; do dpkg -x "$f" "$deps/root"; done
  echo "$deps/root/usr;$deps/root/usr/lib/x86_64-linux-gnu/cmake;$deps/root/usr/share/cmake"
}
# The compute capability of GPU 0 in DFLASH_CUDA_ARCHS' spelling (9.0 -> 90; 90 when nvidia-smi cannot say):
# the scripts build the kernels for this machine's GPU only, which is what makes their build fast.
gpu_arch() {
  local cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
  if [[ $cap =~ ^[0-9]+$ ]]; then echo "$cap"; else echo 90; fi
}
# gpu_configure BUILD LOG: configures BUILD with the CUDA kernels for gpu_arch (the carried dev packages found
# through gpu_prefix_path) and notes in the summary what the kernels are compiled for.
gpu_configure() {
  local build=$1 log=$2 arch prefix
  arch=$(gpu_arch)
  prefix=$(gpu_prefix_path "$ROOT/.cache/gpu_deps")
  step "configure (sm_$arch)" 90 "$log" env DFLASH_CUDA_ARCHS="$arch" cmake -S "$ROOT" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DDFLASH_CUDA=ON -DDFLASH_PYTHON="$PY" ${prefix:+-DCMAKE_PREFIX_PATH=$prefix}
  note "INFO  $(grep -o 'dflash: CUDA kernels for .*' "$log" | tail -n 1)"
}
