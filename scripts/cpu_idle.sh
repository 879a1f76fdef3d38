#!/usr/bin/env bash
# Prints the share of CPU time idle over the next second, in percent, from /proc/stat (the load average lags by
# minutes: right after the demo's training it still reads busy).
set -euo pipefail
sample() { awk '/^cpu /{idle=$5+$6; t=0; for (i=2; i<=NF; i++) t+=$i; print idle, t}' /proc/stat; }
read -r i0 t0 < <(sample)
sleep 1
read -r i1 t1 < <(sample)
awk -v di=$((i1 - i0)) -v dt=$((t1 - t0)) 'BEGIN{printf "%d\n", (dt > 0 ? 100 * di / dt : 100)}'
