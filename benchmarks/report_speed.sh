#!/usr/bin/env bash
# `tokenscope report` on a 1,000,000-request run: makes the run once with
# `tokenscope sim --num-requests 1000000 --rate 20 --seed 1` (timed), then
# each repetition, one after the other:
#   - `tokenscope report RUN --out RUN/report.html`: wall time, CPU time and
#     peak RSS (/usr/bin/time), the page's size;
#   - the peer, benchmarks/peers/matplotlib_report.py under Debian's python3
#     (python3-matplotlib): genai-perf-style charts of the same requests as PNG
#     files; the same figures, its output the PNGs' total size;
#   - the page loaded and drawn in Chromium:
#     `node tests/blackbox/node/report_browser.mjs RUN/report.html --timing`
#     (puppeteer), when that script is there.
# Prints every repetition, then the medians over the repetitions that ran.
#   benchmarks/report_speed.sh [REPEATS] [WORK_DIR]
# REPORT_SPEED_RATE sets sim's rate (default 20 req/s).
# REPEATS: default 3. WORK_DIR: where the run is made (about 3.5 GB with
# steps.jsonl; default a
# temporary directory, removed at the end; a WORK_DIR given is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
[ "$repeats" -ge 1 ] || { echo "REPEATS must be at least 1" >&2; exit 2; }
requests="${REPORT_SPEED_REQUESTS:-1000000}"  # smaller only to try the script out
rate="${REPORT_SPEED_RATE:-20}"  # sim's default, 8, makes a run 2.5x as long: 14.7 M steps
bin="build/release/src/cli/tokenscope"
[ -x "$bin" ] || JOBS="${JOBS:-1}" bash scripts/build.sh release tokenscope >/dev/null
python=/usr/bin/python3  # Debian's, with python3-matplotlib (scripts/setup.sh)
"$python" -c "import matplotlib, numpy" 2>/dev/null ||
  { echo "$python cannot import matplotlib and numpy: apt-get install python3-matplotlib" >&2; exit 2; }
browser_script="tests/blackbox/node/report_browser.mjs"
if [ -n "${2:-}" ]; then
  work="$2"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
run="$work/run"
results="$work/results"
: > "$results"
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
     "load average $(load)"
rm -rf "$run"
/usr/bin/time -f "%e %U %S %M" -o "$work/time" "$bin" sim --no-history --num-requests "$requests" --rate "$rate" --seed 1 \
  --out "$run" > /dev/null
read -r wall u s rss < "$work/time"
echo "sim --num-requests $requests --rate $rate --seed 1: wall $wall s, CPU $(awk "BEGIN {printf \"%.1f\", $u + $s}") s;" \
     "requests.jsonl $(($(stat -c %s "$run/requests.jsonl") / 1000000)) MB, samples.jsonl" \
     "$(($(stat -c %s "$run/samples.jsonl") / 1000000)) MB, steps.jsonl $(($(stat -c %s "$run/steps.jsonl") / 1000000)) MB"

# name command...: runs it under /usr/bin/time; appends "name wall cpu rss_kib" to the results.
measure() {
  local name="$1"; shift
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$@" > "$work/out.txt" 2> "$work/err.txt" ||
    { echo "$name failed:" >&2; cat "$work/err.txt" >&2; exit 1; }
  read -r wall u s rss < "$work/time"
  echo "$name $wall $(awk "BEGIN {printf \"%.2f\", $u + $s}") $rss" >> "$results"
}

# name: the last measurement of name, in words.
last() {
  grep "^$1 " "$results" | tail -1 | awk '{printf "wall %s s, CPU %s s, peak RSS %.0f MiB", $2, $3, $4 / 1024}'
}

for r in $(seq "$repeats"); do
  echo "repetition $r (load average before: $(load))"
  rm -f "$run/report.html"
  measure tokenscope "$bin" report "$run" --out "$run/report.html"
  html=$(stat -c %s "$run/report.html")
  echo "bytes tokenscope $html" >> "$results"
  echo "  tokenscope report: $(last tokenscope); $html bytes of HTML"
  rm -rf "$run/peer"
  measure peer "$python" benchmarks/peers/matplotlib_report.py "$run" "$run/peer"
  png=$(du -cb "$run"/peer/*.png | tail -1 | cut -f1)
  echo "bytes peer $png" >> "$results"
  echo "  matplotlib peer: $(last peer); $png bytes of PNG ($(cat "$work/out.txt"))"
  if [ -f "$browser_script" ]; then
    node "$browser_script" "$run/report.html" --timing > "$work/browser.json" || true
    "$python" - "$work/browser.json" "$results" <<'PY'
import json, sys
try:
    t = json.load(open(sys.argv[1])).get("timing") or {}
except ValueError:
    t = {}
print("  browser:", json.dumps(t) if t else "no timing (see the output of report_browser.mjs)")
if t.get("drawn_ms") is not None:
    with open(sys.argv[2], "a") as f:
        f.write(f"browser {t.get('load_ms')} {t['drawn_ms']} {t.get('wall_ms')}\n")
PY
  else
    echo "  browser timing: report_browser.mjs not there yet"
  fi
done
echo "load average after: $(load)"

"$python" - "$results" "$requests" <<'PY'
import statistics, sys
rows, size, browser = {}, {}, []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "bytes":
        size.setdefault(f[1], []).append(int(f[2]))
    elif f[0] == "browser":
        browser.append([None if v == "None" else float(v) for v in f[1:]])
    else:
        rows.setdefault(f[0], []).append((float(f[1]), float(f[2]), int(f[3])))
med = lambda v: statistics.median(v)
n = int(sys.argv[2])
print()
print(f"medians over {len(rows['tokenscope'])} repetitions, {n:,} requests:")
print()
print("| | wall s (min–max) | CPU s | peak RSS MiB | output |")
print("|---|---:|---:|---:|---:|")
names = {"tokenscope": "`tokenscope report` (HTML page)", "peer": "matplotlib peer (PNG files)"}
for k in ("tokenscope", "peer"):
    rs = rows[k]
    w = [r[0] for r in rs]
    print(f"| {names[k]} | {med(w):.2f} ({min(w):.2f}–{max(w):.2f}) | {med(r[1] for r in rs):.2f} "
          f"| {med(r[2] for r in rs) / 1024:.0f} | {med(size[k]) / 1e6:.1f} MB |")
t, p = rows["tokenscope"], rows["peer"]
print()
print(f"peer / tokenscope: wall {med(r[0] for r in p) / med(r[0] for r in t):.1f}x, "
      f"CPU {med(r[1] for r in p) / med(r[1] for r in t):.1f}x, "
      f"peak RSS {med(r[2] for r in p) / med(r[2] for r in t):.1f}x")
if browser:
    col = lambda i: [b[i] for b in browser if b[i] is not None]
    fmt = lambda v: f"{med(v):.0f} ms" if v else "?"
    print(f"browser (medians of {len(browser)}): load event {fmt(col(0))}, drawn {fmt(col(1))} after the "
          f"navigation started, wall {fmt(col(2))} from puppeteer's goto to drawn")
else:
    print("browser: not measured")
PY
