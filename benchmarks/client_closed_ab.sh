#!/usr/bin/env bash
# Two (or more) tokenscope builds side by side on the closed loop, with wrk
# in the same rounds: 64 connections of non-streaming requests (POST
# /v1/json on the canned-SSE nginx of ../shared/bench/canned-sse; nginx on
# core 0, the client on core 1, both at nice -20 where permitted) for
# SECONDS, wrk first and then each build, ROUNDS times. Prints per run the
# requests/s, its ratio to wrk's in the same round, the peak resident memory
# (/usr/bin/time's maximum RSS) and run.json's client.records_waited_for_writer
# ("-" for a build that has no such count), then per build the medians.
# Usage: benchmarks/client_closed_ab.sh SECONDS ROUNDS BIN_A [BIN ...]
#   (a build of another commit: git worktree add /tmp/old REV &&
#    (cd /tmp/old && bash scripts/build.sh release tokenscope), then
#    /tmp/old/build/release/src/cli/tokenscope as one BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 SECONDS ROUNDS BIN_A [BIN ...]" >&2; exit 2; }
secs="$1"; rounds="$2"; shift 2
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
source benchmarks/canned_nginx.sh  # work, port, nice; nginx on core 0
sleep 0.3
for round in $(seq "$rounds"); do
  wrk_rps="$("${nice[@]}" taskset -c 1 wrk -t1 -c64 -d"${secs}s" -s ../shared/bench/canned-sse/post.lua \
    "http://127.0.0.1:$port/v1/json" | awk '/^Requests\/sec:/ { print $2 }')"
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    /usr/bin/time -f "%M" -o "$work/time.txt" "${nice[@]}" taskset -c 1 "$bin" bench \
      --target "http://127.0.0.1:$port" --endpoint /v1/json --no-stream --api chat --model m \
      --concurrency 64 --duration-s "$secs" --input-len fixed:8 --output-len fixed:1 --quiet --progress none \
      --client-threads 1 --max-error-rate 1 --out "$work/run" >/dev/null 2>&1 || true  # run.json says what ran
    python3 - "$work/run/run.json" "$work/time.txt" "$i" "$bin" "$round" "$wrk_rps" "$secs" \
      >> "$work/rows.jsonl" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
n = run["summary"]["requests_completed"]
rps = n / float(sys.argv[7])
print(json.dumps({"build": int(sys.argv[3]), "bin": sys.argv[4], "round": int(sys.argv[5]), "rps": rps,
                  "wrk_rps": float(sys.argv[6]), "ratio": rps / float(sys.argv[6]),
                  "rss_mb": int(open(sys.argv[2]).read().split()[-1]) / 1024,
                  "waits": run["client"].get("records_waited_for_writer")}))
PY
    tail -1 "$work/rows.jsonl" | python3 -c 'import json, sys
r = json.loads(sys.stdin.read())
print("round %d, build %d: %s req/s (wrk %s): %.2f of wrk, peak RSS %.0f MB, waits for the writer %s"
      % (r["round"], r["build"], format(round(r["rps"]), ","), format(round(r["wrk_rps"]), ","), r["ratio"],
         r["rss_mb"], "-" if r["waits"] is None else r["waits"]))'
    rm -rf "$work/run"
  done
done
python3 - "$work/rows.jsonl" "$secs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"closed loop, 64 connections, {sys.argv[2]} s, medians over {max(r['round'] for r in rows)} rounds:")
for b in sorted({r["build"] for r in rows}):
    rs = [r for r in rows if r["build"] == b]
    ratio = [r["ratio"] for r in rs]
    print("  build %d (%s): %s req/s, %.2f of wrk (runs %s), peak RSS %.0f MB"
          % (b, rs[0]["bin"], format(round(statistics.median(r["rps"] for r in rs)), ","),
             statistics.median(ratio), ", ".join("%.2f" % x for x in ratio),
             statistics.median(r["rss_mb"] for r in rs)))
PY
