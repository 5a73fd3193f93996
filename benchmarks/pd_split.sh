#!/usr/bin/env bash
# Disaggregated prefill against colocated replicas on four GPUs
# (docs/engine.md "Disaggregated prefill"): the first 6,000 rows of the Azure
# 2023 conversation trace at 8 and 16 times its rate, through four
# colocated replicas and through 1+3, 2+2 and 3+1 prefill and decode
# replicas (KV over 50 GB/s links, 10 us), every router least-loaded,
# llama-3-8b on H100 (sim's defaults). Virtual time: every run is exact and deterministic, so one
# run each. Prints a Markdown table: TTFT and TPOT p50/p99, goodput under
# TTFT 1 s and TPOT 50 ms (p99), and the KV transfers' p99.
#   benchmarks/pd_split.sh
set -euo pipefail
cd "$(dirname "$0")/.."
trace="../shared/traces/AzureLLMInferenceTrace_conv.csv"
bin="${BIN:-build/release/src/cli/tokenscope}"
[ -f "$trace" ] || { echo "needs $trace" >&2; exit 2; }
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "| trace rate | fleet (4 GPUs) | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | goodput req/s | KV transfer p99 ms |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
for scale in 8 16; do
  for fleet in "--replicas 4" "--prefill-replicas 1 --decode-replicas 3" \
    "--prefill-replicas 2 --decode-replicas 2" "--prefill-replicas 3 --decode-replicas 1"; do
    rm -rf "$work/run"
    # shellcheck disable=SC2086
    "$bin" sim --no-history --quiet --trace "$trace" --max-requests 6000 --time-scale "$scale" $fleet \
      --router least-loaded --no-steps --no-samples \
      --slo ttft_ms=1000,tpot_ms=50 --out "$work/run"
    /usr/bin/python3 - "$work/run/run.json" "$scale" "$fleet" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
s, f = run["summary"], run["fleet"]
d = f.get("disaggregation")
name = ("colocated, 4 replicas" if d is None else
        f"{d['prefill_replicas']} prefill + {d['decode_replicas']} decode")
kv = "-" if d is None else f"{d['transfer_ms']['p99']:.2f}"
print(f"| {sys.argv[2]}x | {name} | {s['ttft_ms']['p50']:.1f} | {s['ttft_ms']['p99']:.1f} | "
      f"{s['tpot_ms']['p50']:.2f} | {s['tpot_ms']['p99']:.2f} | {s['goodput_rps']:.1f} | {kv} |")
PY
  done
done
