#!/usr/bin/env bash
# Peak memory of `tokenscope sim` as the number of finished requests grows:
# the same Azure-shaped synthetic workload (5.5 req/s, prompts of mean 1,155
# and outputs of mean 211 tokens) at 20k, 200k and 2M requests, writing the
# full run directory, each REPEATS times. Prints every repeat, then a table of
# medians; the slope between sizes is the memory per finished request.
#   benchmarks/sim_memory.sh [REPEATS]      (default 3, at least 3)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
[ "$repeats" -ge 3 ] || { echo "REPEATS must be at least 3 (medians)" >&2; exit 2; }
bin="build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for n in 20000 200000 2000000; do
  for r in $(seq "$repeats"); do
    /usr/bin/time -f "%U %S %M" -o "$work/time" "$bin" sim --no-history --num-requests "$n" --rate 5.5 --seed 3 \
      --overwrite --out "$work/run" --json > "$work/summary.json"
    read -r u s rss < "$work/time"
    toks=$(python3 -c "import json;print(json.load(open('$work/summary.json'))['output_tokens_total'])")
    echo "$n $toks $u $s $rss" >> "$work/results"
    echo "$n requests, repeat $r: $toks output tokens, CPU $(awk "BEGIN {printf \"%.2f\", $u + $s}") s, peak RSS $rss KiB (load $(cut -d' ' -f1 /proc/loadavg))"
    rm -rf "$work/run"
  done
done
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, toks, u, s, rss = line.split()
    rows.setdefault(int(n), []).append((int(toks), float(u) + float(s), int(rss)))
print()
print("| requests | output tokens | median CPU s | µs per request | median peak RSS MiB | RSS runs MiB |")
print("|---:|---:|---:|---:|---:|---|")
prev = None
for n, rs in rows.items():
    cpu = statistics.median(r[1] for r in rs)
    rss = statistics.median(r[2] for r in rs)
    print(f"| {n:,} | {rs[0][0]:,} | {cpu:.2f} | {cpu / n * 1e6:.1f} | {rss / 1024:.1f} | "
          f"{', '.join(f'{r[2] / 1024:.1f}' for r in rs)} |")
    if prev:
        pn, prss, ptoks = prev
        print(f"|  | slope from {pn:,}: {(rss - prss) * 1024 / (n - pn):.1f} bytes per request, "
              f"{(rs[0][0] - ptoks) / (n - pn):.0f} output tokens per request | | | | |")
    prev = (n, rss, rs[0][0])
PY
