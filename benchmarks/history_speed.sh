#!/usr/bin/env bash
# The history of runs with 10,000 runs (docs/performance.md "History of
# runs"): makes one real run with `tokenscope sim` as the template, then
# benchmarks/history_fill writes N run directories from it and registers each
# in a fresh database through analyze/history.h (timed: registrations per
# second). Then, each repetition, one after the other (wall time, CPU and peak
# RSS from /usr/bin/time):
#   - `tokenscope history --limit N` (the table of every run) and with --json;
#   - `tokenscope check --trend ttft_ms.p99` over the same runs (the
#     generator puts a 20% step at 0.7 N: exit 1, a regression);
#   - the peer: benchmarks/peers/py_history.py under Debian's python3 with
#     pandas, which walks the N run directories, reads each run.json and
#     prints the same table (the reading any Python trend script does first).
# Prints every repetition, then the medians and the ratios.
#   benchmarks/history_speed.sh [REPEATS] [N]
# REPEATS: default 5. N: default 10000. The work directory is temporary.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-5}"
n="${2:-10000}"
[ "$repeats" -ge 1 ] || { echo "REPEATS must be at least 1" >&2; exit 2; }
bin="build/release/src/cli/tokenscope"
fill="build/release/benchmarks/history_fill"
[ -x "$bin" ] && [ -x "$fill" ] || JOBS="${JOBS:-1}" bash scripts/build.sh release tokenscope history_fill >/dev/null
python=/usr/bin/python3  # Debian's, with python3-pandas (scripts/setup.sh)
"$python" -c "import pandas" 2>/dev/null || { echo "$python cannot import pandas: apt-get install python3-pandas" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
db="$work/history.db"
results="$work/results"
: > "$results"
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)); load average $(load)"
"$bin" sim --num-requests 1000 --rate 10 --seed 1 --out "$work/template" --no-history --quiet
"$fill" "$work/template/run.json" "$db" "$work/runs" "$n"
echo "database: $(($(stat -c %s "$db") / 1024)) KiB; run directories: $(du -sm "$work/runs" | cut -f1) MB"

# name expected_exit command...: runs it under /usr/bin/time; appends "name wall cpu rss_kib".
measure() {
  local name="$1" expected="$2"; shift 2
  local rc=0
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  [ "$rc" -eq "$expected" ] || { echo "$name exited $rc, not $expected:" >&2; cat "$work/err.txt" >&2; exit 1; }
  # (time's last line: before it, "Command exited with non-zero status N")
  read -r wall u s rss < <(tail -1 "$work/time")
  echo "$name $wall $(awk "BEGIN {printf \"%.2f\", $u + $s}") $rss" >> "$results"
  echo "  $name: wall $wall s, CPU $(awk "BEGIN {printf \"%.2f\", $u + $s}") s, peak RSS $((rss / 1024)) MiB," \
       "$(wc -l < "$work/out.txt") lines"
}

for r in $(seq "$repeats"); do
  echo "repetition $r (load average before: $(load))"
  measure history 0 "$bin" history --history "$db" --limit "$n"
  measure history_json 0 "$bin" history --history "$db" --limit "$n" --json
  measure trend 1 "$bin" check --trend ttft_ms.p99 --history "$db"
  [ "$r" -eq 1 ] && sed 's/^/    /' "$work/out.txt"
  measure peer 0 "$python" benchmarks/peers/py_history.py "$work/runs"
done
echo "load average after: $(load)"

"$python" - "$results" "$n" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append((float(f[1]), float(f[2]), int(f[3])))
med = statistics.median
n = int(sys.argv[2])
names = {"history": f"`tokenscope history --limit {n}` (table)",
         "history_json": f"`tokenscope history --limit {n} --json`",
         "trend": "`tokenscope check --trend ttft_ms.p99`",
         "peer": "peer: py_history.py (json + pandas, table)"}
print()
print(f"medians over {len(rows['history'])} repetitions, {n:,} runs:")
print()
print("| | wall s (min–max) | CPU s | peak RSS MiB |")
print("|---|---:|---:|---:|")
for k in ("history", "history_json", "trend", "peer"):
    rs = rows[k]
    w = [r[0] for r in rs]
    print(f"| {names[k]} | {med(w):.3f} ({min(w):.3f}–{max(w):.3f}) | {med(r[1] for r in rs):.3f} "
          f"| {med(r[2] for r in rs) / 1024:.0f} |")
wall = lambda k: med(r[0] for r in rows[k])
print()
print(f"peer / history: wall {wall('peer') / wall('history'):.1f}x; "
      f"peer / check --trend: wall {wall('peer') / wall('trend'):.1f}x")
PY
