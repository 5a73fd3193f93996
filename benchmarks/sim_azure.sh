#!/usr/bin/env bash
# Benchmark of `tokenscope sim` on the whole Azure 2023 conversation trace
# (19,366 requests, 3,502 s of real time), Llama-3-8B on one H100-SXM, beside
# a plain-Python reference simulator of the same model (benchmarks/peers/py_sim.py)
# in the same run. Prints a markdown table for docs/performance.md.
#   benchmarks/sim_azure.sh [REPEATS]      (default 5; medians are reported)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-5}"
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="build/release/src/cli/tokenscope"
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

measure() {  # label, command...: appends "label cpu_s wall_s rss_kb" per repeat
  local label="$1"; shift
  for _ in $(seq "$repeats"); do
    /usr/bin/time -f "$label %U %S %e %M" -o "$work/time" "$@" > "$work/out" 2>/dev/null
    awk '{printf "%s %.3f %.3f %d\n", $1, $2 + $3, $4, $5}' "$work/time" >> "$work/results"
  done
}
measure ts_out "$bin" sim --trace "$trace" --out "$work/run" --quiet
measure ts_noout "$bin" sim --trace "$trace" --quiet
"$bin" sim --trace "$trace" --json > "$work/ts.json"
measure python python3 benchmarks/peers/py_sim.py "$trace"
python3 benchmarks/peers/py_sim.py "$trace" > "$work/py.json"

python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
rows = {}
for line in open(f"{work}/results"):
    label, cpu, wall, rss = line.split()
    rows.setdefault(label, []).append((float(cpu), float(wall), int(rss)))
ts = json.load(open(f"{work}/ts.json"))
py = json.load(open(f"{work}/py.json"))
real_s = 3502.0
reqs, toks = ts["requests_total"], ts["output_tokens_total"]
def med(label, i): return statistics.median(r[i] for r in rows[label])
print("| run | median CPU s | x real time | requests / CPU s | output tokens / CPU s | peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|")
for label, name in [("ts_out", "tokenscope sim, writing the run directory"),
                    ("ts_noout", "tokenscope sim, summary only"),
                    ("python", "Python reference peer (benchmarks/peers/py_sim.py)")]:
    cpu = med(label, 0)
    print(f"| {name} | {cpu:.3f} | {real_s / cpu:,.0f} | {reqs / cpu:,.0f} | {toks / cpu:,.0f} | {med(label, 2) / 1024:.1f} |")
print()
print(f"speed-up over the Python peer: {med('python', 0) / med('ts_out', 0):.1f}x with output, "
      f"{med('python', 0) / med('ts_noout', 0):.1f}x summary only ({len(rows['ts_out'])} repeats each)")
print()
print("| result | tokenscope | Python peer |")
print("|---|---:|---:|")
print(f"| requests completed | {ts['requests_completed']} | {py['requests_completed']} |")
print(f"| output tokens | {ts['output_tokens_total']} | {py['output_tokens']} |")
for k, a, b in [("TTFT p50 ms", ts["ttft_ms"]["p50"], py["ttft_p50_ms"]), ("TTFT p99 ms", ts["ttft_ms"]["p99"], py["ttft_p99_ms"]),
                ("TPOT p50 ms", ts["tpot_ms"]["p50"], py["tpot_p50_ms"]), ("TPOT p99 ms", ts["tpot_ms"]["p99"], py["tpot_p99_ms"])]:
    print(f"| {k} | {a:.4f} | {b:.4f} |")
PY
