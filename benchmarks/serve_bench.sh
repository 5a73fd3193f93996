#!/usr/bin/env bash
# Benchmarks of `tokenscope serve` (docs/performance.md):
#  1. non-streaming requests/s on one server core with a zero-cost engine,
#     measured by wrk, beside nginx answering the same POST with a fixed body
#     of the same size on the same core (the ceiling for this hardware);
#  2. emission lag (socket write time - engine time) at 1,000 and 5,000
#     concurrent streams, Llama-3-8B on one H100 (roofline model);
#  3. memory per idle connection and per active stream.
# Server on core 0, wrk on core 1.   usage: bench/serve_bench.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
bin="$(pwd)/build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"; chmod 755 "$work"
ulimit -n "$(ulimit -Hn)"  # 5,000 streams need more than the usual 1,024 descriptors
cleanup() { [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null; pkill -f "tokenscope serve --port 1809" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

start_server() {  # port, extra args...
  local port="$1"; shift
  taskset -c 0 "$bin" serve --port "$port" --port-file "$work/port.$port" "$@" > "$work/server.$port.log" 2>&1 &
  for _ in $(seq 300); do [ -f "$work/port.$port" ] && return 0; sleep 0.01; done
  echo "server did not start" >&2; cat "$work/server.$port.log" >&2; exit 1
}
stop_server() {  # waits until the server has exited and freed its port
  pkill -INT -f "tokenscope serve --port $1" || true
  for _ in $(seq 1000); do pgrep -f "tokenscope serve --port $1" > /dev/null || return 0; sleep 0.01; done
}
rps() { awk '/Requests\/sec/ {print $2}' "$1"; }

echo "## 1. Non-streaming requests/s, one server core, wrk -t1 -c64 -d${secs}s"
start_server 18091 --fixed-step-ms 0 --threads 1 --natural-output-len none
body=$(curl -s -d '{"prompt": "Hello", "max_tokens": 1, "ignore_eos": true}' http://127.0.0.1:18091/v1/completions)
mkdir -p "$work/tmp"
python3 - "$work" "$body" <<'PY'
import sys
work, body = sys.argv[1], sys.argv[2]
conf = open("bench/serve/nginx.conf").read()
conf = conf.replace("@DIR@", work).replace("@PORT@", "18092").replace("@BODY@", body.replace("'", "\\'"))
open(f"{work}/nginx.conf", "w").write(conf)
PY
nginx -c "$work/nginx.conf" -p "$work/" 2>/dev/null
for round in 1 2 3; do
  taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s bench/serve/post.lua http://127.0.0.1:18091/v1/completions > "$work/ts.$round"
  taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s bench/serve/post.lua http://127.0.0.1:18092/v1/completions > "$work/ng.$round"
  echo "round $round: tokenscope $(rps "$work/ts.$round") req/s, nginx $(rps "$work/ng.$round") req/s"
done
python3 - "$work" <<'PY'
import statistics, sys, re
work = sys.argv[1]
def rps(f): return float(re.search(r"Requests/sec:\s+([\d.]+)", open(f).read()).group(1))
ts = [rps(f"{work}/ts.{i}") for i in (1, 2, 3)]
ng = [rps(f"{work}/ng.{i}") for i in (1, 2, 3)]
print(f"median: tokenscope {statistics.median(ts):,.0f} req/s, nginx {statistics.median(ng):,.0f} req/s, "
      f"ratio {statistics.median(ts) / statistics.median(ng):.2f}")
PY
kill "$(cat "$work/nginx.pid")"; rm -f "$work/nginx.pid"
stop_server 18091

echo
echo "## 2. Emission lag, streams of 50 tokens, Llama-3-8B / H100 roofline, server on one core"
for conns in 100 1000 5000; do
  trace="$work/emissions.$conns.jsonl"
  start_server 18093 --threads 1 --max-num-seqs 8192 --natural-output-len none --trace-emissions "$trace"
  TOKENS=50 taskset -c 1 wrk -t1 -c"$conns" -d"${secs}s" --timeout 30s -s bench/serve/stream.lua \
    http://127.0.0.1:18093/v1/completions > "$work/wrk.$conns"
  stop_server 18093
  python3 - "$trace" "$conns" "$work/wrk.$conns" <<'PY'
import json, sys, re
trace, conns, wrk = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
lags = sorted((lambda e: e["write_ns"] - e["engine_ns"])(json.loads(l)) for l in open(trace))
def q(p): return lags[max(0, -(-len(lags) * p // 1) - 1)] / 1e6 if lags else float("nan")
import math
def nr(p): return lags[max(0, math.ceil(p * len(lags)) - 1)] / 1e6
streams = re.search(r"(\d+) requests in", wrk).group(1)
print(f"{conns} streams: {len(lags):,} tokens, {streams} streams completed; emission lag p50 {nr(0.5):.3f} ms, "
      f"p90 {nr(0.9):.3f} ms, p99 {nr(0.99):.3f} ms, max {lags[-1] / 1e6:.3f} ms")
PY
done

echo
echo "## 3. Memory per idle connection and per active stream"
start_server 18094 --threads 1 --max-num-seqs 8192 --natural-output-len none
pid=$(pgrep -f "tokenscope serve --port 18094" | head -1)
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
base=$(rss)
python3 - "$pid" <<'PY' &
import socket, time, sys
socks = []
for _ in range(5000):
    s = socket.create_connection(("127.0.0.1", 18094)); socks.append(s)
open("/tmp/tokenscope_idle_ready", "w").write("1")
time.sleep(4)
PY
idle_pid=$!
for _ in $(seq 300); do [ -f /tmp/tokenscope_idle_ready ] && break; sleep 0.01; done
sleep 0.5
idle=$(rss)
wait "$idle_pid"; rm -f /tmp/tokenscope_idle_ready
echo "idle: RSS $base KiB -> $idle KiB with 5,000 idle connections: $(( (idle - base) * 1024 / 5000 )) bytes each"
stop_server 18094
# A fresh server, so that memory freed by the idle test is not reused.
start_server 18094 --threads 1 --max-num-seqs 8192 --natural-output-len none
pid=$(pgrep -f "tokenscope serve --port 18094" | head -1)
base2=$(rss)
TOKENS=2000 taskset -c 1 wrk -t1 -c1000 -d4s --timeout 30s -s bench/serve/stream.lua http://127.0.0.1:18094/v1/completions > /dev/null &
wrk_pid=$!
sleep 3
active=$(rss)
wait "$wrk_pid"
echo "active: RSS $base2 KiB -> $active KiB with 1,000 streams in flight (engine state included): $(( (active - base2) * 1024 / 1000 )) bytes each"
stop_server 18094
