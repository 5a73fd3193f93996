#!/usr/bin/env bash
# ThreadSanitizer under load: `tokenscope serve` with 4 I/O threads and
# `tokenscope bench` with 4 client threads, both built with ThreadSanitizer
# (build/tsan), run against each other for MINUTES (default 3) at RATE req/s
# (default 50) with faults injected (resets, malformed events, stalls,
# HTTP errors, so the error paths run concurrently too), then serve is
# stopped with SIGTERM while a last burst is in flight. Any data race ends
# the process that saw it with exit code 66 and a report on its stderr.
# Prints the requests, outcomes and whether either process reported a race.
#   benchmarks/tsan_load.sh [MINUTES] [RATE]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-3}"
rate="${2:-50}"
bash scripts/build.sh tsan tokenscope >/dev/null
bin="$(pwd)/build/tsan/src/cli/tokenscope"
work="$(mktemp -d)"
trap 'kill "$serve_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1"
"$bin" serve --port 0 --port-file "$work/port" --threads 4 --fixed-step-ms 2 \
  --faults "http_5xx=0.01,reset=0.01,malformed=0.01,stall=0.01@3000" --fault-seed 5 \
  > "$work/serve.out" 2> "$work/serve.err" &
serve_pid=$!
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
port="$(cat "$work/port")"
seconds=$(python3 -c "print(int(float('$minutes') * 60))")
set +e
"$bin" bench --target "http://127.0.0.1:$port" --rate "$rate" --duration-s "$seconds" --client-threads 4 \
  --input-len lognormal:256:0.6:max=1000 --output-len lognormal:64:0.6:max=256 --timeout-s 2 \
  --max-error-rate 1 --progress none --json --out "$work/run" > "$work/summary.json" 2> "$work/bench.err"
bench_rc=$?
# A last burst, with SIGTERM to the server while it is in flight.
"$bin" bench --target "http://127.0.0.1:$port" --rate inf --num-requests 200 --client-threads 4 \
  --input-len fixed:64 --output-len fixed:200 --timeout-s 10 --max-error-rate 1 --progress none --quiet \
  --out "$work/burst" 2> "$work/burst.err" &
burst_pid=$!
sleep 1
kill -TERM "$serve_pid"
wait "$serve_pid"; serve_rc=$?
wait "$burst_pid"; burst_rc=$?
set -e
python3 - "$work/summary.json" "$minutes" "$rate" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"ThreadSanitizer under load: {sys.argv[2]} min at {sys.argv[3]} req/s, serve 4 I/O threads, bench 4 client threads")
print(f"requests {s['requests_total']}: " + ", ".join(f"{k} {v}" for k, v in s['requests_by_outcome'].items() if v))
PY
races=$(cat "$work/serve.err" "$work/bench.err" "$work/burst.err" | { grep -c "WARNING: ThreadSanitizer" || true; })
echo "exit codes: bench $bench_rc, burst bench $burst_rc, serve $serve_rc (SIGTERM during the burst); races reported: $races"
[ "$races" = 0 ] && [ "$bench_rc" = 0 ] && [ "$serve_rc" = 0 ] && [ "$burst_rc" != 66 ] || {
  grep -h -A30 "WARNING: ThreadSanitizer" "$work"/*.err | head -80; exit 1; }
