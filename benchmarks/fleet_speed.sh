#!/usr/bin/env bash
# What a simulated fleet costs (docs/performance.md "Fleets"): the Azure 2023
# conversation trace (19,366 requests) through one engine, against the same
# trace 64 times over at 64 times its rate (every row 64 times at its own
# time: 1,239,424 requests) through 64 replicas behind round-robin, so that
# each replica does one engine's work. Both on one core (sim is one
# thread), in turns, REPEATS times each; prints every repeat and the
# medians: CPU seconds, their ratio against 64, peak RSS and the memory per
# replica beyond the one engine's.
#   benchmarks/fleet_speed.sh [REPEATS]   (default 3, at least 3)
# N=16 benchmarks/fleet_speed.sh: another fleet size.
# BASE=path/to/another/tokenscope: that build's fleet run too, in the same
# rounds (its median and its ratio to this build's).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
[ "$repeats" -ge 3 ] || { echo "REPEATS must be at least 3 (medians)" >&2; exit 2; }
n="${N:-64}"
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="${BIN:-build/release/src/cli/tokenscope}"
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The trace N times over at its own times (a native trace: t_ms, lengths).
/usr/bin/python3 benchmarks/azure_times_n.py "$trace" "$n" > "$work/many.jsonl"
echo "fleet_speed: $repeats repeats, N=$n, $(wc -l < "$work/many.jsonl") requests in the fleet's trace, load average $(cut -d' ' -f1 /proc/loadavg), $(date '+%F %T')"
once() {  # label, command...
  /usr/bin/time -f "$1 %U %S %e %M" -o "$work/time" taskset -c 0 "${@:2}" > "$work/out" 2>"$work/err" || {
    cat "$work/err" >&2; exit 1; }
  awk '{printf "%s %.3f %.3f %d\n", $1, $2 + $3, $4, $5}' "$work/time" | tee -a "$work/results"
}
for _ in $(seq "$repeats"); do
  once one "$bin" sim --no-history --trace "$trace" --quiet
  once fleet "$bin" sim --no-history --trace "$work/many.jsonl" --trace-format native --replicas "$n" \
    --router round-robin --quiet
  if [ -n "${BASE:-}" ]; then
    once base "$BASE" sim --no-history --trace "$work/many.jsonl" --trace-format native --replicas "$n" \
      --router round-robin --quiet
  fi
done
python3 - "$work/results" "$n" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
def med(label, col):
    return st.median(float(r[col]) for r in rows if r[0] == label)
one_cpu, fleet_cpu = med("one", 1), med("fleet", 1)
one_rss, fleet_rss = med("one", 3) / 1024, med("fleet", 3) / 1024
print()
print("| run | CPU s (median) | peak RSS MiB (median) |")
print("|---|---:|---:|")
print(f"| one engine, the trace | {one_cpu:.2f} | {one_rss:.0f} |")
print(f"| {n} replicas, the trace {n}x at {n}x its rate | {fleet_cpu:.2f} | {fleet_rss:.0f} |")
print()
print(f"fleet / one engine: {fleet_cpu / one_cpu:.1f}x the CPU time (the bound: {n}x); "
      f"memory per replica beyond one engine's: {(fleet_rss - one_rss) / (n - 1):.1f} MiB")
if any(r[0] == "base" for r in rows):
    base_cpu = med("base", 1)
    print(f"the BASE build's fleet: {base_cpu:.2f} CPU s (median); this build / BASE: {fleet_cpu / base_cpu:.3f}")
PY
