#!/usr/bin/env bash
# Benchmarks of `tokenscope serve` (docs/performance.md), each repeated
# ROUNDS times (default 3) and reported as the median, the spread and the runs:
#  1. non-streaming requests/s on one server core with a zero-cost engine,
#     measured by wrk, beside nginx answering the same POST with a fixed body
#     of the same size on the same core (the ceiling for this hardware), in
#     alternating rounds;
#  2. emission lag (socket write time - engine time) at 100, 1,000 and 5,000
#     concurrent streams, Llama-3-8B on one H100 (roofline model), one I/O
#     thread; and 1,000 streams with two I/O threads; beside each, the floor
#     (benchmarks/emission_floor.cpp): the same number of loopback streams
#     written one chunk each per step by as many bare writer threads on the
#     server's core, read by a reader on wrk's core, nothing else done;
#  3. memory per idle connection and per active stream.
# Server on core 0, wrk on core 1, both at nice $NICE (default -20, where
# permitted; the same for every server and client) so that other work on a
# shared machine does not take their cores in the middle of a measurement.
# usage: [NICE=N] [SECTIONS="1 2 3"] benchmarks/serve_bench.sh [SECONDS] [ROUNDS]   (default 10 s, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
rounds="${2:-3}"
bin="$(pwd)/build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
floor="$(pwd)/build/release/benchmarks/emission_floor"
[ -x "$floor" ] || cmake --build build/release --target emission_floor >/dev/null
sections=" ${SECTIONS:-1 2 3} "
work="$(mktemp -d)"; chmod 755 "$work"
ulimit -n "$(ulimit -Hn)"  # 5,000 streams need more than the usual 1,024 descriptors
nice=()
if [ "${NICE:--20}" != 0 ] && [ -z "$(nice -n "${NICE:--20}" true 2>&1)" ]; then nice=(nice -n "${NICE:--20}"); fi
server_pid=""
cleanup() {
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null
  [ -n "$server_pid" ] && kill -INT "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
echo "serve_bench: $rounds rounds of ${secs} s, $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg), $(date '+%F %T')," \
     "server and wrk at nice ${nice[2]:-unchanged}"

start_server() {  # extra args...: starts the server on a free port, sets server_pid and port
  rm -f "$work/port"
  "${nice[@]}" taskset -c 0 "$bin" serve --port 0 --port-file "$work/port" "$@" > "$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 500); do [ -s "$work/port" ] && { port=$(cat "$work/port"); return 0; }; sleep 0.01; done
  echo "server did not start" >&2; cat "$work/server.log" >&2; exit 1
}
stop_server() {  # waits until the server has exited
  kill -INT "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
rps() { awk '/Requests\/sec/ {print $2}' "$1"; }

if [[ "$sections" == *" 1 "* ]]; then
echo "## 1. Non-streaming requests/s, one server core, wrk -t1 -c64 -d${secs}s"
start_server --fixed-step-ms 0 --threads 1 --natural-output-len none
body=$(curl -s -d '{"prompt": "Hello", "max_tokens": 1, "ignore_eos": true}' "http://127.0.0.1:$port/v1/completions")
nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/tmp"
python3 - "$work" "$body" "$nginx_port" <<'PY'
import sys
work, body, port = sys.argv[1], sys.argv[2], sys.argv[3]
conf = open("benchmarks/serve/nginx.conf").read()
conf = conf.replace("@DIR@", work).replace("@PORT@", port).replace("@BODY@", body.replace("'", "\\'"))
open(f"{work}/nginx.conf", "w").write(conf)
PY
"${nice[@]}" nginx -c "$work/nginx.conf" -p "$work/" 2>/dev/null
echo "response body, both servers: ${#body} bytes"
for round in $(seq "$rounds"); do
  "${nice[@]}" taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s benchmarks/serve/post.lua "http://127.0.0.1:$port/v1/completions" > "$work/ts.$round"
  "${nice[@]}" taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s benchmarks/serve/post.lua "http://127.0.0.1:$nginx_port/v1/completions" > "$work/ng.$round"
  echo "round $round: tokenscope $(rps "$work/ts.$round") req/s, nginx $(rps "$work/ng.$round") req/s (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "$work" "$rounds" <<'PY'
import statistics, sys, re
work, n = sys.argv[1], int(sys.argv[2])
def rps(f): return float(re.search(r"Requests/sec:\s+([\d.]+)", open(f).read()).group(1))
ts = [rps(f"{work}/ts.{i}") for i in range(1, n + 1)]
ng = [rps(f"{work}/ng.{i}") for i in range(1, n + 1)]
ratio = [a / b for a, b in zip(ts, ng)]
print(f"tokenscope req/s: median {statistics.median(ts):,.0f} (runs: {', '.join(f'{x:,.0f}' for x in ts)})")
print(f"nginx req/s:      median {statistics.median(ng):,.0f} (runs: {', '.join(f'{x:,.0f}' for x in ng)})")
print(f"ratio per round:  median {statistics.median(ratio):.2f} (min {min(ratio):.2f}, max {max(ratio):.2f}; "
      f"runs: {', '.join(f'{x:.2f}' for x in ratio)})")
PY
kill "$(cat "$work/nginx.pid")"; rm -f "$work/nginx.pid"
stop_server
fi

echo
if [[ "$sections" == *" 2 "* ]]; then
echo "## 2. Emission lag, streams of 50 tokens, Llama-3-8B / H100 roofline, server on core 0"
# The floor writes chunks of the size of serve's: one token's SSE event of a completions stream.
start_server --threads 1 --natural-output-len none
chunk=$(curl -s -N -d '{"prompt": "Hello", "max_tokens": 8, "ignore_eos": true, "stream": true}' \
  "http://127.0.0.1:$port/v1/completions" | python3 -c '
import sys
ev = [e for e in sys.stdin.read().split("\n\n") if e.startswith("data: {") and "\"text\"" in e]
print(round(sum(len(e) + 2 for e in ev) / len(ev)))')
stop_server
echo "one token's SSE event from serve: $chunk bytes (the floor writes chunks of this size)"
for round in $(seq "$rounds"); do
  for case in 100:1 1000:1 5000:1 1000:2; do
    conns=${case%:*}; threads=${case#*:}
    trace="$work/emissions.jsonl"
    rm -f "$trace"
    start_server --threads "$threads" --max-num-seqs 8192 --natural-output-len none --trace-emissions "$trace"
    TOKENS=50 "${nice[@]}" taskset -c 1 wrk -t1 -c"$conns" -d"${secs}s" --timeout 30s -s benchmarks/serve/stream.lua \
      "http://127.0.0.1:$port/v1/completions" > "$work/wrk.out"
    stop_server
    "${nice[@]}" "$floor" --streams "$conns" --writers "$threads" --writer-cpu 0 --reader-cpu 1 \
      --chunk-bytes "$chunk" --steps 100 --step-ms 50 > "$work/floor.json"
    python3 - "$trace" "$conns" "$threads" "$round" "$work/wrk.out" "$work/lag.jsonl" "$work/floor.json" <<'PY'
import json, math, os, re, sys
trace, conns, threads, rnd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
wrk, out, floor = open(sys.argv[5]).read(), sys.argv[6], json.load(open(sys.argv[7]))
# token lines only (the trace also has one line per admitted request)
lags = sorted(e["write_ns"] - e["engine_ns"] for e in map(json.loads, open(trace)) if "write_ns" in e)
def nr(p): return lags[max(0, math.ceil(p * len(lags)) - 1)] / 1e6  # nearest rank
r = {"conns": conns, "threads": threads, "round": rnd, "tokens": len(lags),
     "streams": int(re.search(r"(\d+) requests in", wrk).group(1)), "p50": nr(0.5), "p90": nr(0.9),
     "p99": nr(0.99), "max": lags[-1] / 1e6, "load": os.getloadavg()[0], "floor_p50": floor["lag_p50_ms"],
     "floor_p99": floor["lag_p99_ms"], "floor_us_per_write": floor["writer_cpu_us_per_write"]}
open(out, "a").write(json.dumps(r) + "\n")
print(f"round {rnd}, {conns} streams, {threads} I/O thread(s): {r['tokens']:,} tokens, {r['streams']:,} streams "
      f"completed; lag p50 {r['p50']:.3f} ms, p90 {r['p90']:.3f} ms, p99 {r['p99']:.3f} ms, max {r['max']:.3f} ms "
      f"(load {r['load']:.2f}); the floor: p50 {r['floor_p50']:.3f} ms, p99 {r['floor_p99']:.3f} ms, "
      f"{r['floor_us_per_write']:.2f} us of CPU per write")
PY
  done
done
python3 - "$work/lag.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| concurrent streams | I/O threads | tokens (median) | p50 ms | p90 ms | p99 ms | max ms | p99 runs | "
      "floor p50 ms | floor p99 ms | floor p99 runs | floor CPU us/write |")
print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|")
for key in dict.fromkeys((r["conns"], r["threads"]) for r in rows):
    rs = [r for r in rows if (r["conns"], r["threads"]) == key]
    med = lambda k: statistics.median(r[k] for r in rs)
    runs = ", ".join(f"{r['p99']:.2f}" for r in rs)
    fruns = ", ".join(f"{r['floor_p99']:.2f}" for r in rs)
    print(f"| {key[0]:,} | {key[1]} | {med('tokens'):,.0f} | {med('p50'):.2f} | {med('p90'):.2f} | {med('p99'):.2f} | "
          f"{med('max'):.1f} | {runs} | {med('floor_p50'):.2f} | {med('floor_p99'):.2f} | {fruns} | "
          f"{med('floor_us_per_write'):.2f} |")
print(f"(medians over {len(rs)} rounds)")
PY
fi

echo
if [[ "$sections" == *" 3 "* ]]; then
echo "## 3. Memory per idle connection and per active stream"
rss() { awk '/VmRSS/ {print $2}' "/proc/$server_pid/status"; }
for round in $(seq "$rounds"); do
  start_server --threads 1 --max-num-seqs 8192 --natural-output-len none
  base=$(rss)
  rm -f "$work/idle_ready"
  python3 - "$port" "$work/idle_ready" <<'PY' &
import socket, time, sys
socks = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(5000)]
open(sys.argv[2], "w").write("1")
time.sleep(4)
PY
  idle_pid=$!
  for _ in $(seq 1000); do [ -f "$work/idle_ready" ] && break; sleep 0.01; done
  sleep 0.5
  idle=$(rss)
  wait "$idle_pid"
  stop_server
  # A fresh server, so that memory freed by the idle test is not reused.
  start_server --threads 1 --max-num-seqs 8192 --natural-output-len none
  base2=$(rss)
  TOKENS=2000 "${nice[@]}" taskset -c 1 wrk -t1 -c1000 -d4s --timeout 30s -s benchmarks/serve/stream.lua \
    "http://127.0.0.1:$port/v1/completions" > /dev/null &
  wrk_pid=$!
  sleep 3
  active=$(rss)
  wait "$wrk_pid"
  stop_server
  echo "round $round: idle RSS $base -> $idle KiB with 5,000 idle connections: $(( (idle - base) * 1024 / 5000 )) bytes each;" \
       "active RSS $base2 -> $active KiB with 1,000 streams in flight: $(( (active - base2) * 1024 / 1000 )) bytes each" \
    | tee -a "$work/mem.txt"
done
python3 - "$work/mem.txt" <<'PY'
import re, statistics, sys
rows = [list(map(int, re.findall(r"(\d+) bytes each", l))) for l in open(sys.argv[1])]
idle, active = [r[0] for r in rows], [r[1] for r in rows]
print(f"bytes per idle connection: median {statistics.median(idle):,.0f} (runs: {', '.join(f'{x:,}' for x in idle)})")
print(f"bytes per active stream:   median {statistics.median(active):,.0f} (runs: {', '.join(f'{x:,}' for x in active)})")
PY
fi
