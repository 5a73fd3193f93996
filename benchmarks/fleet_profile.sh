#!/usr/bin/env bash
# Where a simulated fleet's CPU time goes beyond N single engines' (docs/
# performance.md "Fleets"): `perf record -e cpu-clock` on one engine over the
# Azure 2023 conversation trace and on N replicas over the trace N times at
# N times its rate (benchmarks/fleet_speed.sh's load), then, per function,
# the fleet's samples over N times the one engine's: 1.0 means a function
# costs the fleet exactly N engines' worth.
#   benchmarks/fleet_profile.sh          (N=16 by default; needs perf)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${N:-16}"
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="${BIN:-build/release/src/cli/tokenscope}"
command -v perf >/dev/null || { echo "needs perf" >&2; exit 2; }
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 benchmarks/azure_times_n.py "$trace" "$n" > "$work/many.jsonl"
perf record -q -e cpu-clock -o "$work/one.data" taskset -c 0 "$bin" sim --no-history --trace "$trace" --quiet \
  >/dev/null 2>&1
perf record -q -e cpu-clock -o "$work/fleet.data" taskset -c 0 "$bin" sim --no-history --trace "$work/many.jsonl" \
  --trace-format native --replicas "$n" --router round-robin --quiet >/dev/null 2>&1
for f in one fleet; do
  perf report -i "$work/$f.data" --no-children --stdio -F sample,sym 2>/dev/null | grep -E '^ +[0-9]' > "$work/$f.txt"
done
/usr/bin/python3 - "$work/one.txt" "$work/fleet.txt" "$n" <<'PY'
import re, sys
def load(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s+(\d+)\s+\[.\]\s+(.*)", line)
        if m:
            out[m.group(2).strip()[:60]] = out.get(m.group(2).strip()[:60], 0) + int(m.group(1))
    return out
one, fleet, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
total_one, total_fleet = sum(one.values()), sum(fleet.values())
print(f"samples: one engine {total_one}, {n} replicas {total_fleet}: "
      f"{total_fleet / (n * total_one):.2f} times {n} engines' work")
print(f"| function | one engine, samples | fleet, samples | fleet / ({n} x one) |")
print("|---|---:|---:|---:|")
for name in sorted(fleet, key=lambda k: -fleet[k])[:15]:
    ratio = f"{fleet[name] / (n * one[name]):.2f}" if one.get(name) else "-"
    print(f"| `{name}` | {one.get(name, 0)} | {fleet[name]} | {ratio} |")
PY
