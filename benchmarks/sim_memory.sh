#!/usr/bin/env bash
# Peak memory of `tokenscope sim` as the number of finished requests grows:
# the same Azure-shaped synthetic workload (5.5 req/s, prompts of mean 1,155
# and outputs of mean 211 tokens) at 20k, 200k and 2M requests, writing the
# full run directory. The slope is the memory per finished request.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "| requests | output tokens | CPU s | peak RSS MiB |"
echo "|---:|---:|---:|---:|"
prev_n=0; prev_rss=0
for n in 20000 200000 2000000; do
  /usr/bin/time -f "%U %S %M" -o "$work/time" "$bin" sim --num-requests "$n" --rate 5.5 --seed 3 \
    --out "$work/run" --json > "$work/summary.json"
  read -r u s rss < "$work/time"
  toks=$(python3 -c "import json;print(json.load(open('$work/summary.json'))['output_tokens_total'])")
  printf "| %s | %s | %.2f | %.1f |\n" "$n" "$toks" "$(echo "$u + $s" | bc)" "$(echo "$rss / 1024" | bc -l)"
  if [ "$prev_n" -gt 0 ]; then
    slope=$(echo "($rss - $prev_rss) * 1024 / ($n - $prev_n)" | bc -l)
    printf "|  | slope from %s: %.1f bytes per request | | |\n" "$prev_n" "$slope"
  fi
  prev_n=$n; prev_rss=$rss
  rm -rf "$work/run"
done
