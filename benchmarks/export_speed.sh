#!/usr/bin/env bash
# Speed of the exporters (src/observe/export_*.h) on a large synthetic run:
# REQUESTS requests of EVENTS output events each (default 100,000 x 100),
# samples every second. Each round runs, one after the other: the Perfetto
# export, the OTLP file export, and beside them the reference peer
# benchmarks/peers/py_export.py (the same trace tracks in plain Python, no
# counter tracks), and `cat requests.jsonl > /dev/null` as the floor of
# reading the input. Prints every round (CPU = user + system, /usr/bin/time),
# then medians: requests and output events per CPU-second, output size, peak RSS.
#   benchmarks/export_speed.sh [ROUNDS] [REQUESTS] [EVENTS]   (ROUNDS >= 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
requests="${2:-100000}"
events="${3:-100}"
[ "$rounds" -ge 3 ] || { echo "ROUNDS must be at least 3 (medians)" >&2; exit 2; }
bin="build/release/benchmarks/export_bench"
JOBS="${JOBS:-1}" bash scripts/build.sh release export_bench >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$bin" generate "$work/run" "$requests" "$events"
echo "run: $requests requests x $events events; requests.jsonl $(du -m "$work/run/requests.jsonl" | cut -f1) MB," \
     "samples.jsonl $(wc -l < "$work/run/samples.jsonl") lines"
measure() {  # name command...: appends "name wall user sys rss_kib bytes" to results
  local name="$1"; shift
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > "$work/out.json"
  read -r wall u s rss < "$work/time"
  local bytes=0
  for f in "$work/trace.json" "$work/otlp/otlp_traces.json" "$work/otlp/otlp_metrics.json" "$work/py.json"; do
    [ -f "$f" ] && bytes=$((bytes + $(stat -c %s "$f")))
  done
  echo "$name $wall $u $s $rss $bytes" >> "$work/results"
  echo "  $name: wall $wall s, CPU $(awk "BEGIN {printf \"%.2f\", $u + $s}") s, peak RSS $((rss / 1024)) MiB," \
       "output $((bytes / 1048576)) MiB (load $(cut -d' ' -f1 /proc/loadavg))"
  rm -rf "$work/trace.json" "$work/otlp" "$work/py.json"
}
for r in $(seq "$rounds"); do
  echo "round $r"
  measure cat cat "$work/run/requests.jsonl"
  measure perfetto "$bin" perfetto "$work/run" "$work/trace.json"
  measure otlp "$bin" otlp "$work/run" "$work/otlp"
  measure python python3 benchmarks/peers/py_export.py "$work/run" "$work/py.json"
done
python3 - "$work/results" "$requests" "$events" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, wall, u, s, rss, size = line.split()
    rows.setdefault(name, []).append((float(wall), float(u) + float(s), int(rss), int(size)))
n, ev = int(sys.argv[2]), int(sys.argv[3])
print()
print("| | median CPU s (min–max) | requests / CPU-s | token events / CPU-s | output MiB | peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|")
base = statistics.median(c for _, c, _, _ in rows["perfetto"])
for name in ("cat", "perfetto", "otlp", "python"):
    rs = rows[name]
    cpu = statistics.median(r[1] for r in rs)
    lo, hi = min(r[1] for r in rs), max(r[1] for r in rs)
    rate = f"{n / cpu:,.0f}" if cpu > 0 else "—"
    evr = f"{n * ev / cpu:,.0f}" if cpu > 0 and name != "cat" else "—"
    print(f"| {name} | {cpu:.2f} ({lo:.2f}–{hi:.2f}) | {rate} | {evr} | {statistics.median(r[3] for r in rs) / 2**20:,.0f} "
          f"| {statistics.median(r[2] for r in rs) / 1024:.0f} |")
py = statistics.median(c for _, c, _, _ in rows["python"])
print(f"\nPython peer / Perfetto export CPU time: {py / base:.1f}x")
PY
