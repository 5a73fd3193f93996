#!/usr/bin/env bash
# How long tokenscope's threads wait for the client core: one open-loop run
# of RATE non-streaming requests/s for 3 s (POST /v1/json on the canned-SSE
# nginx of ../shared/bench/canned-sse; nginx on core 0, the whole client
# process on core 1, both at nice -20 where permitted) under `perf sched
# record`, then, per thread (ts-client-N sends and reads, ts-writer writes
# the records, ts-observe samples, tokenscope is the main thread), from
# `perf sched timehist`: its time on the core, its longest run, and its
# scheduling delays (from a wake-up to running): the longest, and how many
# were over 0.5 ms. A client thread kept from running by another of the
# process's threads is send lag the schedule did not ask for.
# Usage: benchmarks/client_sched.sh [RATE]   (default 25000; needs perf)
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${1:-25000}"
bin="${TOKENSCOPE_BIN:-$(pwd)/build/release/src/cli/tokenscope}"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 2; }
source benchmarks/canned_nginx.sh  # work, port, nice; nginx on core 0
sleep 0.3
perf sched record -q -o "$work/sched.data" -- "${nice[@]}" taskset -c 1 "$bin" bench \
  --target "http://127.0.0.1:$port" --endpoint /v1/json --no-stream --api chat --model m --rate "$rate" \
  --num-requests "$((rate * 3))" --input-len fixed:8 --output-len fixed:1 --quiet --progress none \
  --client-threads 1 --max-error-rate 1 --out "$work/run" >/dev/null 2>&1
perf sched timehist -i "$work/sched.data" 2>/dev/null > "$work/timehist.txt"
python3 - "$work/timehist.txt" "$work/run/run.json" "$rate" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[2]))["summary"]
print(f"{int(sys.argv[3]):,} req/s for 3 s: {s['requests_completed']:,} completed, send lag p50 "
      f"{s['send_lag_ms']['p50']:.3f} ms, p99 {s['send_lag_ms']['p99']:.3f} ms")
threads = {}
for line in open(sys.argv[1]):
    w = line.split()
    # time [cpu] task wait sch_delay run
    if len(w) < 6 or not w[1].startswith("[") or not re.match(r"(ts-|tokenscope)", w[2]):
        continue
    try:
        delay, run = float(w[4]), float(w[5])
    except ValueError:
        continue
    name = re.sub(r"\[.*", "", w[2])
    t = threads.setdefault(name, {"run": 0.0, "longest_run": 0.0, "max_delay": 0.0, "delays_over": 0, "n": 0})
    t["run"] += run
    t["longest_run"] = max(t["longest_run"], run)
    t["max_delay"] = max(t["max_delay"], delay)
    t["delays_over"] += delay > 0.5
    t["n"] += 1
print("| thread | time on the core, ms | longest run, ms | runs | longest scheduling delay, ms | delays over 0.5 ms |")
print("|---|---:|---:|---:|---:|---:|")
for name, t in sorted(threads.items(), key=lambda kv: -kv[1]["run"]):
    print(f"| {name} | {t['run']:,.1f} | {t['longest_run']:.3f} | {t['n']:,} | {t['max_delay']:.3f} | "
          f"{t['delays_over']} |")
PY
