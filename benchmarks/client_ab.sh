#!/usr/bin/env bash
# Two (or more) tokenscope builds side by side on the open loop: each sends
# RATE non-streaming requests/s for 3 s (POST /v1/json on the canned-SSE
# nginx of ../shared/bench/canned-sse; nginx on core 0, the client on core
# 1, both at nice -20 where permitted), the builds alternating, ROUNDS times.
# Prints per run the client's CPU per request (user + system, /usr/bin/time,
# the whole process) and the send lag's p99, then per build the medians.
# Usage: benchmarks/client_ab.sh RATE ROUNDS BIN_A BIN_B [BIN ...]
#   (a build of another commit: git worktree add /tmp/old REV &&
#    (cd /tmp/old && bash scripts/build.sh release tokenscope), then
#    /tmp/old/build/release/src/cli/tokenscope as one BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 4 ] || { echo "usage: $0 RATE ROUNDS BIN_A BIN_B [BIN ...]" >&2; exit 2; }
rate="$1"; rounds="$2"; shift 2
source benchmarks/canned_nginx.sh  # work, port, nice, open_loop_run; nginx on core 0
sleep 0.3
for round in $(seq "$rounds"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    open_loop_run "$bin" "$rate"
    python3 - "$work/run/run.json" "$work/time.txt" "$i" "$bin" "$round" >> "$work/rows.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
user, system = map(float, open(sys.argv[2]).read().split())
n = s["requests_completed"]
print(json.dumps({"build": int(sys.argv[3]), "bin": sys.argv[4], "round": int(sys.argv[5]), "completed": n,
                  "cpu_us": 1e6 * (user + system) / max(1, n), "user_us": 1e6 * user / max(1, n),
                  "p99_ms": s["send_lag_ms"]["p99"]}))
PY
    tail -1 "$work/rows.jsonl" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print("round %d, build %d: %s completed, %.2f us of CPU per request (%.2f user), send lag p99 %.3f ms"
      % (r["round"], r["build"], format(r["completed"], ","), r["cpu_us"], r["user_us"], r["p99_ms"]))'
    rm -rf "$work/run"
  done
done
python3 - "$work/rows.jsonl" "$rate" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{int(sys.argv[2]):,} req/s, medians over {max(r['round'] for r in rows)} rounds:")
for b in sorted({r["build"] for r in rows}):
    rs = [r for r in rows if r["build"] == b]
    cpu = [r["cpu_us"] for r in rs]
    p99 = [r["p99_ms"] for r in rs]
    print("  build %d (%s): CPU %.2f us/request (runs %s), send lag p99 %.3f ms (runs %s)"
          % (b, rs[0]["bin"], statistics.median(cpu), ", ".join("%.2f" % x for x in cpu), statistics.median(p99),
             ", ".join("%.3f" % x for x in p99)))
PY
