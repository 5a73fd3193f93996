#!/usr/bin/env bash
# Client benchmarks of `tokenscope bench` (docs/performance.md), each beside
# its peer in the same run on the same machine; servers on core 0, clients on
# core 1:
#  1. events parsed per client CPU-second against the canned-SSE nginx of
#     ../shared/bench/canned-sse (a server that costs nothing: 131-event chat
#     streams), beside the Python asyncio/aiohttp reference client;
#  2. open-loop request rate held and send lag p99, (a) non-streaming against
#     nginx's small JSON answer (a server that costs nothing), (b) 4-token
#     streams against `tokenscope serve` with a zero-cost engine, each beside
#     the Python client at the rates it can reach;
#  3. closed-loop non-streaming requests/s, 64 connections, beside wrk, against
#     the same zero-cost server and against nginx's small JSON answer.
# usage: bench/client_bench.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
bin="$(pwd)/build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
canned="../shared/bench/canned-sse"
py=/usr/bin/python3  # Debian's, with python3-aiohttp (not a python3 from PATH that may lack it)
work="$(mktemp -d)"; chmod 755 "$work"
ulimit -n "$(ulimit -Hn)"
cleanup() {
  [ -f "$work/canned/logs/nginx.pid" ] && kill "$(cat "$work/canned/logs/nginx.pid")" 2>/dev/null
  pkill -INT -f "tokenscope serve --port 18093" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The canned-SSE nginx, set up as its README says.
cp -r "$canned" "$work/canned"
(cd "$work/canned" && mkdir -p logs tmp www/v1/chat www/compat/v1/chat && python3 make_bodies.py 128 > /dev/null &&
 sed -i "s#\$CANNED_DIR#$work/canned#g" nginx.conf)
taskset -c 0 nginx -c "$work/canned/nginx.conf" -p "$work/canned/"
# The zero-cost simulator.
taskset -c 0 "$bin" serve --port 18093 --port-file "$work/port" --fixed-step-ms 0 --threads 1 \
  --natural-output-len none > "$work/serve.log" 2>&1 &
for _ in $(seq 300); do [ -f "$work/port" ] && break; sleep 0.01; done
for _ in $(seq 300); do curl -s -o /dev/null http://127.0.0.1:8090/v1/json && break; sleep 0.01; done

ts() {  # tokenscope bench on core 1; prints the run directory
  local out="$work/run.$RANDOM$RANDOM"
  taskset -c 1 "$bin" bench --progress none --quiet --out "$out" "$@"
  echo "$out"
}
summary() {  # run dir -> one JSON line of what the tables need
  python3 - "$1" <<'PY'
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
s, c = run["summary"], run["client"]
lag = s["send_lag_ms"]
print(json.dumps({"completed": s["requests_completed"], "failed": s["requests_failed"],
                  "rps": s["request_throughput_rps"], "send_lag_p50_ms": lag["p50"], "send_lag_p99_ms": lag["p99"],
                  "cpu_s": c["process_cpu_s"], "planned": run["settings"]["effective"]["load"]["planned_requests"],
                  "duration_s": s["duration_s"]}))
PY
}

echo "## 1. Events per client CPU-second, canned 131-event chat streams, 64 in flight (closed loop)"
for round in 1 2 3; do
  d=$(ts --target http://127.0.0.1:8090 --api chat --model m --concurrency 64 --num-requests 6000 \
      --input-len fixed:8 --output-len fixed:128)
  python3 - "$d" <<'PY'
import json, sys
run = json.load(open(sys.argv[1] + "/run.json"))
s, c = run["summary"], run["client"]
events = s["requests_completed"] * 131  # every event is decoded and parsed (128 content + finish + usage + [DONE])
print(f"tokenscope: {s['requests_completed']} streams, {events} events, {c['process_cpu_s']:.2f} CPU s, "
      f"{events / c['process_cpu_s']:,.0f} events/CPU-s, {c['process_cpu_s'] / events * 1e6:.3f} CPU ms per 1,000 events")
PY
  r=$(taskset -c 1 "$py" bench/peers/py_client.py http://127.0.0.1:8090/v1/chat/completions --chat \
      --concurrency 64 --num-requests 1000 --max-tokens 128)
  python3 - "$r" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"python:     {r['completed']} streams, {r['events']} events, {r['cpu_s']:.2f} CPU s, "
      f"{r['events_per_cpu_s']:,.0f} events/CPU-s, {r['cpu_s'] / r['events'] * 1e6:.3f} CPU ms per 1,000 events")
PY
done

echo "## 2a. Open loop, non-streaming, against nginx's small JSON (no server cost): rate held and send lag"
port=$(cat "$work/port")
for rate in 10000 20000 30000 40000; do
  d=$(ts --target http://127.0.0.1:8090 --endpoint /v1/json --api chat --model m --no-stream --rate "$rate" \
      --duration-s "$secs" --input-len fixed:8 --output-len fixed:1)
  python3 - "$(summary "$d")" "$rate" <<'PY'
import json, sys
r, rate = json.loads(sys.argv[1]), sys.argv[2]
print(f"tokenscope rate {rate}: planned {r['planned']}, completed {r['completed']}, failed {r['failed']}, "
      f"achieved {r['rps']:,.0f} req/s, send lag p50 {r['send_lag_p50_ms']:.3f} ms, "
      f"p99 {r['send_lag_p99_ms']:.3f} ms, client CPU {r['cpu_s']:.2f} s")
PY
done
for rate in 1000 2000 5000; do
  n=$((rate * secs))
  r=$(taskset -c 1 "$py" bench/peers/py_client.py http://127.0.0.1:8090/v1/json --chat --no-stream --rate "$rate" \
      --num-requests "$n" --max-tokens 1)
  python3 - "$r" "$rate" <<'PY'
import json, sys
r, rate = json.loads(sys.argv[1]), float(sys.argv[2])
print(f"python rate {rate:.0f}: completed {r['completed']}, errors {r['errors']}, achieved {r['achieved_rps']:,.0f} req/s "
      f"({r['achieved_rps'] / rate * 100:.1f}% of offered), send lag p50 {r['send_lag_p50_ms']:.3f} ms, "
      f"p99 {r['send_lag_p99_ms']:.3f} ms, CPU {r['cpu_s']:.2f} s")
PY
done

echo "## 2b. Open loop, 4-token streams, against the zero-cost simulator (one server core): rate held and send lag"
for rate in 2000 5000 10000 15000; do
  d=$(ts --target "http://127.0.0.1:$port" --rate "$rate" --duration-s "$secs" --input-len fixed:8 \
      --output-len fixed:4 --timeout-s 30)
  python3 - "$(summary "$d")" "$rate" <<'PY'
import json, sys
r, rate = json.loads(sys.argv[1]), sys.argv[2]
print(f"tokenscope rate {rate}: planned {r['planned']}, completed {r['completed']}, failed {r['failed']}, "
      f"achieved {r['rps']:,.0f} req/s, send lag p50 {r['send_lag_p50_ms']:.3f} ms, "
      f"p99 {r['send_lag_p99_ms']:.3f} ms, client CPU {r['cpu_s']:.2f} s")
PY
done
for rate in 200 1000 2000 5000; do
  n=$((rate * secs))
  r=$(taskset -c 1 "$py" bench/peers/py_client.py "http://127.0.0.1:$port/v1/completions" --rate "$rate" \
      --num-requests "$n" --max-tokens 4)
  python3 - "$r" "$rate" <<'PY'
import json, sys
r, rate = json.loads(sys.argv[1]), float(sys.argv[2])
print(f"python rate {rate:.0f}: completed {r['completed']}, errors {r['errors']}, achieved {r['achieved_rps']:,.0f} req/s "
      f"({r['achieved_rps'] / rate * 100:.1f}% of offered), send lag p50 {r['send_lag_p50_ms']:.3f} ms, "
      f"p99 {r['send_lag_p99_ms']:.3f} ms, CPU {r['cpu_s']:.2f} s")
PY
done

echo "## 3. Closed loop, non-streaming, 64 connections, ${secs} s: tokenscope beside wrk"
for round in 1 2 3; do
  for target in "http://127.0.0.1:$port/v1/completions" "http://127.0.0.1:8090/v1/json"; do
    taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s bench/serve/post.lua "$target" > "$work/wrk.out"
    w=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
    if [[ "$target" == *8090* ]]; then
      d=$(ts --target http://127.0.0.1:8090 --endpoint /v1/json --api chat --model m --no-stream \
          --concurrency 64 --duration-s "$secs" --input-len fixed:8 --output-len fixed:1)
    else
      d=$(ts --target "http://127.0.0.1:$port" --no-stream --concurrency 64 --duration-s "$secs" \
          --input-len fixed:8 --output-len fixed:1)
    fi
    python3 - "$(summary "$d")" "$w" "$round" "${target##*/}" <<'PY'
import json, sys
r, w, rnd, name = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"round {rnd} {name}: wrk {w:,.0f} req/s, tokenscope {r['rps']:,.0f} req/s, ratio {r['rps'] / w:.2f}")
PY
  done
done
