#!/usr/bin/env bash
# Heap allocations per request on the open loop: tokenscope sends N and 3N
# non-streaming requests (POST /v1/json on the canned-SSE nginx of
# ../shared/bench/canned-sse, 200 req/s, 8-token prompts) under Valgrind's
# DHAT, which counts every block allocated; the difference over the 2N
# extra requests is what one request allocates, start-up and summary left
# out. A count, not a time: the same on any machine for one build.
# Usage: benchmarks/client_allocs.sh [BIN ...]   (default: build/release's tokenscope; N=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[ $# -gt 0 ] || set -- "$(pwd)/build/release/src/cli/tokenscope"
n="${N:-1000}"
source benchmarks/canned_nginx.sh  # work, port, nice; nginx on core 0
sleep 0.3
blocks() {  # BIN REQUESTS: the blocks DHAT counted
  valgrind --tool=dhat --dhat-out-file="$work/dhat.out" "$1" bench --target "http://127.0.0.1:$port" \
    --endpoint /v1/json --no-stream --api chat --model m --rate 200 --num-requests "$2" --input-len fixed:8 \
    --output-len fixed:1 --quiet --progress none --prompt-check 0 --client-threads 1 --max-error-rate 1 \
    --out "$work/run" > "$work/dhat.log" 2>&1
  python3 - "$work/run/run.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
if s["requests_completed"] != int(sys.argv[2]):
    sys.exit(f"only {s['requests_completed']} of {sys.argv[2]} requests completed")
PY
  rm -rf "$work/run"
  sed -n 's/.*Total: .* in \([0-9,]*\) blocks.*/\1/p' "$work/dhat.log" | tr -d ,
}
for bin in "$@"; do
  a="$(blocks "$bin" "$n")"
  b="$(blocks "$bin" "$((3 * n))")"
  python3 -c "import sys; a, b, n = map(int, sys.argv[1:4]); print(f'{sys.argv[4]}: {a:,} blocks for {n:,} requests, {b:,} for {3 * n:,}: {(b - a) / (2 * n):.2f} allocations per request')" \
    "$a" "$b" "$n" "$bin"
done
