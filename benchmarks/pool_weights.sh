#!/usr/bin/env bash
# Speed-weighted routers on a fleet of two pools (docs/engine.md
# "Heterogeneous pools"): two H100 and two A100 replicas of llama-3-8b, the
# first 6,000 rows of the Azure 2023 conversation trace at 4, 8 and 12 times
# its rate, each load-aware router with --router-weights equal and speed.
# Virtual time: every run is exact and deterministic, so one run each.
# Prints a Markdown table: goodput under TTFT 1 s and TPOT 50 ms (p99), the
# TTFT and TPOT p99, and the requests the A100 replicas took.
#   benchmarks/pool_weights.sh
set -euo pipefail
cd "$(dirname "$0")/.."
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="${BIN:-build/release/src/cli/tokenscope}"
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf 'pools:\n  - {name: new, gpu: h100, count: 2}\n  - {name: old, gpu: a100, count: 2}\n' > "$work/pools.yaml"
echo "| trace rate | router | weights | goodput req/s | TTFT p99 ms | TPOT p99 ms | requests to the A100s |"
echo "|---:|---|---|---:|---:|---:|---:|"
for scale in 4 8 12; do
  for router in least-loaded power-of-two prefix-affinity; do
    for weights in equal speed; do
      rm -rf "$work/run"
      "$bin" sim --no-history --quiet --trace "$trace" --max-requests 6000 --time-scale "$scale" \
        --pools "$work/pools.yaml" --router "$router" --router-weights "$weights" \
        --slo ttft_ms=1000,tpot_ms=50 --no-steps --no-samples --out "$work/run"
      /usr/bin/python3 - "$work/run/run.json" "$scale" "$router" "$weights" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
s = run["summary"]
old = sum(r["routed"] for r in run["fleet"]["per_replica"] if r["pool"] == "old")
print(f"| {sys.argv[2]}x | {sys.argv[3]} | {sys.argv[4]} | {s['goodput_rps']:.2f} | "
      f"{s['ttft_ms']['p99']:.0f} | {s['tpot_ms']['p99']:.1f} | {old} |")
PY
    done
  done
done
