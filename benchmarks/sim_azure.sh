#!/usr/bin/env bash
# Benchmark of `tokenscope sim` on the whole Azure 2023 conversation trace
# (19,366 requests, 3,502 s of real time), Llama-3-8B on one H100-SXM, beside
# a plain-Python reference simulator of the same model (benchmarks/peers/py_sim.py)
# in the same run. Prints every repeat, then markdown tables for
# docs/performance.md: medians over the repeats, the size of the run directory
# and the two implementations' results side by side.
#   benchmarks/sim_azure.sh [REPEATS]      (default 5, at least 3)
# With BASE=/path/to/an/older/tokenscope, that build's run writing the run
# directory is measured too, in the same repeats (a before/after figure).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-5}"
[ "$repeats" -ge 3 ] || { echo "REPEATS must be at least 3 (medians)" >&2; exit 2; }
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="${BIN:-build/release/src/cli/tokenscope}"  # BIN: another build of this one
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "sim_azure: $repeats repeats, load average $(cut -d' ' -f1 /proc/loadavg), $(date '+%F %T')"

measure() {  # label, command...: appends "label cpu_s wall_s rss_kb" per repeat
  local label="$1"; shift
  for _ in $(seq "$repeats"); do
    /usr/bin/time -f "$label %U %S %e %M" -o "$work/time" "$@" > "$work/out" 2>/dev/null
    awk '{printf "%s %.3f %.3f %d\n", $1, $2 + $3, $4, $5}' "$work/time" >> "$work/results"
  done
}
once() {  # label, command...: one repeat
  /usr/bin/time -f "$1 %U %S %e %M" -o "$work/time" "${@:2}" > "$work/out" 2>/dev/null
  awk '{printf "%s %.3f %.3f %d\n", $1, $2 + $3, $4, $5}' "$work/time" >> "$work/results"
}
# This build and the BASE one in turns, so that both see the same noise.
for _ in $(seq "$repeats"); do
  once ts_out "$bin" sim --no-history --trace "$trace" --overwrite --out "$work/run" --quiet
  [ -z "${BASE:-}" ] || once base_out "$BASE" sim --no-history --trace "$trace" --overwrite --out "$work/base" --quiet
done
# What the run directory holds (the last repeat's; every repeat writes the same).
python3 - "$work/run" > "$work/files" <<'PY'
import json, os, sys
d = sys.argv[1]
times = sum(len(json.loads(l).get("event_offsets_ns", ())) for l in open(f"{d}/requests.jsonl"))
steps = sum(1 for _ in open(f"{d}/steps.jsonl"))
print(f"run directory: requests.jsonl {os.path.getsize(f'{d}/requests.jsonl') / 1e6:.1f} MB with {times:,} per-token "
      f"times, steps.jsonl {os.path.getsize(f'{d}/steps.jsonl') / 1e6:.1f} MB with {steps:,} steps")
PY
measure ts_noout "$bin" sim --trace "$trace" --quiet
"$bin" sim --trace "$trace" --json > "$work/ts.json"
measure python python3 benchmarks/peers/py_sim.py "$trace"
python3 benchmarks/peers/py_sim.py "$trace" > "$work/py.json"

echo "load average after the runs: $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$work" "$trace" <<'PY'
import csv, datetime, json, statistics, sys
work, trace = sys.argv[1], sys.argv[2]
rows = {}
for line in open(f"{work}/results"):
    label, cpu, wall, rss = line.split()
    rows.setdefault(label, []).append((float(cpu), float(wall), int(rss)))
ts = json.load(open(f"{work}/ts.json"))
py = json.load(open(f"{work}/py.json"))
# The trace's real time: its first to its last timestamp.
stamps = [row["TIMESTAMP"] for row in csv.DictReader(open(trace))]
parse = lambda t: datetime.datetime.strptime(t[:26], "%Y-%m-%d %H:%M:%S.%f")
real_s = (parse(stamps[-1]) - parse(stamps[0])).total_seconds()
print(f"trace: {len(stamps):,} requests over {real_s:,.1f} s of real time")
for label in rows:
    print(f"{label} repeats: CPU s {', '.join(f'{r[0]:.3f}' for r in rows[label])}; "
          f"peak RSS MiB {', '.join(f'{r[2] / 1024:.1f}' for r in rows[label])}")
print(open(f"{work}/files").read())
reqs, toks = ts["requests_total"], ts["output_tokens_total"]
def med(label, i): return statistics.median(r[i] for r in rows[label])
print("| run | median CPU s | x real time | requests / CPU s | output tokens / CPU s | peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|")
for label, name in [("ts_out", "tokenscope sim, writing the run directory"),
                    ("base_out", "the BASE build, writing the run directory"),
                    ("ts_noout", "tokenscope sim, summary only"),
                    ("python", "Python reference peer (benchmarks/peers/py_sim.py)")]:
    if label not in rows:
        continue
    cpu = med(label, 0)
    print(f"| {name} | {cpu:.3f} | {real_s / cpu:,.0f} | {reqs / cpu:,.0f} | {toks / cpu:,.0f} | {med(label, 2) / 1024:.1f} |")
print()
print(f"speed-up over the Python peer: {med('python', 0) / med('ts_out', 0):.1f}x with output, "
      f"{med('python', 0) / med('ts_noout', 0):.1f}x summary only ({len(rows['ts_out'])} repeats each)")
if "base_out" in rows:
    print(f"the BASE build with output: {med('python', 0) / med('base_out', 0):.1f}x the peer; "
          f"this build takes {med('ts_out', 0) / med('base_out', 0):.2f} of its CPU time")
print()
print("| result | tokenscope | Python peer |")
print("|---|---:|---:|")
print(f"| requests completed | {ts['requests_completed']} | {py['requests_completed']} |")
print(f"| output tokens | {ts['output_tokens_total']} | {py['output_tokens']} |")
for k, a, b in [("TTFT p50 ms", ts["ttft_ms"]["p50"], py["ttft_p50_ms"]), ("TTFT p99 ms", ts["ttft_ms"]["p99"], py["ttft_p99_ms"]),
                ("TPOT p50 ms", ts["tpot_ms"]["p50"], py["tpot_p50_ms"]), ("TPOT p99 ms", ts["tpot_ms"]["p99"], py["tpot_p99_ms"])]:
    print(f"| {k} | {a:.4f} | {b:.4f} |")
PY
