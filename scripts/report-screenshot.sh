#!/usr/bin/env bash
# Makes the sample report of docs/report.md and its screenshot
# (docs/report-screenshot.png): a simulated server under bursty load from
# three tenants sharing prompt prefixes, with a KV cache small enough to
# preempt, reported and drawn in Chromium by the browser test's script.
#   scripts/report-screenshot.sh [OUT.png]   (default docs/report-screenshot.png)
# Needs the release build (scripts/build.sh release) and scripts/setup.sh's
# chromium and npm packages.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/docs/report-screenshot.png}"
bin="${TOKENSCOPE:-$root/build/release/src/cli/tokenscope}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$bin" sim --no-history --quiet --num-requests 4000 --rate 24 --arrival gamma --burstiness 0.3 --tenants 3 --prefix-groups 6 \
  --prefix-tokens 1024 --num-gpu-blocks 6000 --seed 7 --out "$work/bursty-3-tenants"
"$bin" report "$work/bursty-3-tenants" --out "$work/report.html"
node "$root/tests/blackbox/node/report_browser.mjs" "$work/report.html" --width 1320 --height 2300 \
  --screenshot "$out" > "$work/check.json" || { cat "$work/check.json"; exit 1; }
echo "wrote $out ($(stat -c %s "$out") bytes)"
