#!/usr/bin/env bash
# How close is `sim --profile` to a real llama.cpp server? (docs/fidelity.md)
# Starts llama-server from ../shared/peers (scripts/llama-server.sh) with a
# 4-layer, 256-wide Llama of Llama 2's vocabulary (scripts/tiny-model.py),
# -c 8192 -np 4 -t 1, profiles it (`tokenscope profile`, the default sweep),
# then replays two held-out workloads with `tokenscope fidelity` (twice on
# the server, and through sim with the profile and with the defaults), and
# prints the profile and both tables. Every profile cell and every real run
# starts a fresh server (--server-cmd).
#   * azure-shaped: gamma arrivals (burstiness 0.5, CV sqrt(2)) at 3 req/s,
#     the Azure conversation trace's length shape (lognormal; its medians
#     1020 and 129 tokens) scaled to a quarter so that a request fits a
#     2048-token slot;
#   * sharegpt: the 500 ShareGPT prompts (their own lengths, 4-800 tokens),
#     Poisson at 3 req/s, outputs lognormal around 100 tokens.
# Usage: [ATTENTION=own|occupancy] [DECODE_COST=curve|linear]
#        benchmarks/fidelity.sh [OUT]
# (OUT default: a temporary directory, removed; ATTENTION: what the
# profile's attention terms are fitted over, default own; DECODE_COST: the
# profile's decode cost, default curve)
set -euo pipefail
cd "$(dirname "$0")/.."
server="$(bash scripts/llama-server.sh)"
model="$(/usr/bin/python3 scripts/tiny-model.py --vocab spm --layers 4 --hidden 256 --ffn 1024)"
bin=build/release/src/cli/tokenscope
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
work="${1:-}"
keep=1
if [ -z "$work" ]; then work="$(mktemp -d)"; keep=0; fi
mkdir -p "$work"
cleanup() { [ "$keep" = 1 ] || rm -rf "$work"; }
trap cleanup EXIT
port=18933
url="http://127.0.0.1:$port"

# Every profile cell and every real run starts a server of its own
# (--server-cmd): empty slots, and the two real runs alike.
cmd="$server -m $model -c 8192 -np 4 -cb -t 1 --metrics --host 127.0.0.1 --port $port"

echo "== profile"
"$bin" profile --target "$url" --server-cmd "$cmd" --out "$work/llama.yaml" --overwrite \
  ${ATTENTION:+--attention "$ATTENTION"} ${DECODE_COST:+--decode-cost "$DECODE_COST"}

run_fidelity() {  # NAME, workload options...
  local name="$1"; shift
  echo "== fidelity: $name"
  "$bin" fidelity --target "$url" --server-cmd "$cmd" --profile "$work/llama.yaml" \
    --max-num-batched-tokens 2048 --out "$work/$name" --overwrite --seed 7 "$@"
}
run_fidelity azure-shaped --input-len lognormal:255:0.9:max=1500 --output-len lognormal:32:0.8:max=300 \
  --arrival gamma --burstiness 0.5 --rate 3 --num-requests 150
run_fidelity sharegpt --trace ../shared/traces/ShareGPT_V3_filtered_500.json --max-requests 150 \
  --arrival poisson --rate 3 --output-len lognormal:100:0.6:max=400
