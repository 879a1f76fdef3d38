#!/usr/bin/env bash
# The share of CPU time idle over the next second, from /proc/stat (the load average lags by minutes: right after
# the demo's training it still reads busy).
#   cpu_idle.sh FRACTION   exit 0 when at least FRACTION (0..1) of the CPUs' time was idle, 1 otherwise
#   cpu_idle.sh --print    print the idle percentage
set -euo pipefail
sample() { awk '/^cpu /{idle=$5+$6; t=0; for (i=2; i<=NF; i++) t+=$i; print idle, t}' /proc/stat; }
read -r i0 t0 < <(sample)
sleep 1
read -r i1 t1 < <(sample)
pct=$(awk -v di=$((i1 - i0)) -v dt=$((t1 - t0)) 'BEGIN{printf "%d", (dt > 0 ? 100 * di / dt : 100)}')
case "${1:-}" in
  --print) echo "$pct" ;;
  "") echo "usage: cpu_idle.sh FRACTION | --print" >&2; exit 2 ;;
  *) awk -v p="$pct" -v f="$1" 'BEGIN{exit !(p >= 100 * f)}' ;;
esac
