#!/usr/bin/env bash
# The open loop's CPU per request split into user and system time, per
# rate: the floor (benchmarks/open_loop_floor.cpp, sleeping in epoll_wait
# between sends), the floor with --spin (never sleeps: no wake-ups, no
# timer), and each tokenscope build given, all sending RATE non-streaming
# requests/s for 3 s (POST /v1/json on the canned-SSE nginx of
# ../shared/bench/canned-sse; nginx on core 0, every client on core 1, at
# nice -20 where permitted), in turn within each round. What it shows: the
# kernel's part that any client pays here (the floor's system time), what
# is left of a core for a client's own work at each rate, and what
# tokenscope's own work (its user time) is. CPU is the whole process's
# (/usr/bin/time), start-up and summary included. For tokenscope it also
# prints the connections each run opened and how often a client thread
# waited for the record writer (run.json's client section). For every run
# it also prints how busy each core was over the run (from /proc/stat,
# start-up and exit included): core 0 is nginx's, so a core 0 near 100%
# where a client stops holding its rate says the server, not the client,
# set that limit.
# Usage: benchmarks/client_cpu_split.sh ROUNDS "RATE [RATE ...]" [BIN ...]
#   (BIN defaults to build/release/src/cli/tokenscope; split:BIN runs that
#   build with its client thread alone on core 1 and the rest of it, the
#   record writer, on core 0 beside nginx: --client-cpus 1. Its CPU is
#   still the whole process's, on both cores.) TS_INPUT_LEN=SPEC: the
#   tokenscope runs' --input-len (default fixed:8; the floor's body stays
#   the small one).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 ROUNDS \"RATE [RATE ...]\" [BIN ...]" >&2; exit 2; }
rounds="$1"; rates="$2"; shift 2
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$(pwd)/build/release/src/cli/tokenscope")
floor="$(pwd)/build/release/benchmarks/open_loop_floor"
cmake --build build/release --target open_loop_floor >/dev/null  # incremental; an old one lacks --spin
source benchmarks/canned_nginx.sh  # work, port, nice, open_loop_run; nginx on core 0
sleep 0.3
cpu_ticks() { grep -E '^cpu[01] ' /proc/stat > "$1"; }
row() {  # client rate round json-of-run time-file
  python3 - "$@" "$work/stat0" "$work/stat1" >> "$work/rows.jsonl" <<'PY'
import json, sys
client, rate, rnd, path, tfile, s0, s1 = sys.argv[1:8]
def ticks(f):  # per core: (busy, all); idle and iowait are not busy
    out = {}
    for line in open(f):
        v = line.split()
        n = list(map(int, v[1:]))
        out[v[0]] = (sum(n) - n[3] - n[4], sum(n))
    return out
a, b = ticks(s0), ticks(s1)
busy = {c: (b[c][0] - a[c][0]) / max(1, b[c][1] - a[c][1]) for c in ("cpu0", "cpu1")}
# The last line: GNU time puts "Command exited with non-zero status N" before it.
user, system = map(float, open(tfile).read().splitlines()[-1].split())
d = json.load(open(path))
extra = {}
if "summary" in d:
    s = d["summary"]
    n, p99, planned = s["requests_completed"], s["send_lag_ms"]["p99"], int(rate) * 3
    c = d.get("client", {})
    extra = {"conns": c.get("connections_opened", -1), "writer_waits": c.get("records_waited_for_writer", -1)}
else:
    n, p99, planned = d["completed"], d["send_lag_p99_ms"], d["planned"]
held = n == planned and p99 < 1.0
print(json.dumps({"client": client, "rate": int(rate), "round": int(rnd), "user_us": 1e6 * user / max(1, n),
                  "sys_us": 1e6 * system / max(1, n), "p99_ms": p99, "held": held,
                  "core0_busy": busy["cpu0"], "core1_busy": busy["cpu1"], **extra}))
PY
  tail -1 "$work/rows.jsonl" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print("round %d, %-14s %7s req/s: user %5.2f + system %5.2f us/request, send lag p99 %9.3f ms, cores busy %3.0f%% (nginx) %3.0f%% (client)%s%s"
      % (r["round"], r["client"], format(r["rate"], ","), r["user_us"], r["sys_us"], r["p99_ms"],
         100 * r["core0_busy"], 100 * r["core1_busy"],
         "" if r["held"] else "  (not held)",
         ", %d connections opened, %d waits for the writer" % (r["conns"], r["writer_waits"]) if "conns" in r else ""))'
}
for round in $(seq "$rounds"); do
  for rate in $rates; do
    for mode in sleep spin; do
      extra=(); [ "$mode" = spin ] && extra=(--spin)
      cpu_ticks "$work/stat0"
      /usr/bin/time -f "%U %S" -o "$work/time.txt" "${nice[@]}" taskset -c 1 "$floor" "${extra[@]}" \
        --port "$port" --rate "$rate" --num-requests "$((rate * 3))" --seed "$rate" > "$work/floor.json" || true
      cpu_ticks "$work/stat1"
      row "floor-$mode" "$rate" "$round" "$work/floor.json" "$work/time.txt"
    done
    i=0
    for bin in "${bins[@]}"; do
      i=$((i + 1))
      cpu_ticks "$work/stat0"
      if [[ "$bin" == split:* ]]; then
        open_loop_run "${bin#split:}" "$rate" split || true
      else
        open_loop_run "$bin" "$rate" || true
      fi
      cpu_ticks "$work/stat1"
      row "tokenscope-$i" "$rate" "$round" "$work/run/run.json" "$work/time.txt"
      rm -rf "$work/run"
    done
  done
done
python3 - "$work/rows.jsonl" "${bins[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for i, b in enumerate(sys.argv[2:], 1):
    print(f"tokenscope-{i}: {b}")
rounds = max(r["round"] for r in rows)
print(f"medians over {rounds} rounds (held: rounds with every request answered and p99 send lag < 1 ms):")
print("| client | req/s | user us/request | system us/request | total | held | core 0 (nginx) busy | core 1 busy |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for client in dict.fromkeys(r["client"] for r in rows):
    for rate in sorted({r["rate"] for r in rows}):
        rs = [r for r in rows if r["client"] == client and r["rate"] == rate]
        u = statistics.median(r["user_us"] for r in rs)
        s = statistics.median(r["sys_us"] for r in rs)
        t = statistics.median(r["user_us"] + r["sys_us"] for r in rs)
        c0 = statistics.median(r["core0_busy"] for r in rs)
        c1 = statistics.median(r["core1_busy"] for r in rs)
        print(f"| {client} | {rate:,} | {u:.2f} | {s:.2f} | {t:.2f} | {sum(r['held'] for r in rs)} of {len(rs)} | {100 * c0:.0f}% | {100 * c1:.0f}% |")
print("tokenscope's connections opened and waits for its record writer (per run: median, min-max):")
print("| client | req/s | connections opened | waits for the writer |")
print("|---|---:|---:|---:|")
for client in dict.fromkeys(r["client"] for r in rows if "conns" in r):
    for rate in sorted({r["rate"] for r in rows}):
        rs = [r for r in rows if r["client"] == client and r["rate"] == rate]
        cell = lambda k: "%g (%g-%g)" % (statistics.median(r[k] for r in rs), min(r[k] for r in rs), max(r[k] for r in rs))
        print(f"| {client} | {rate:,} | {cell('conns')} | {cell('writer_waits')} |")
PY
