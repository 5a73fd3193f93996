#!/usr/bin/env bash
# `tokenscope check` on two 1,000,000-request runs: makes the
# runs once with `tokenscope sim --num-requests 1000000 --rate 20` (seeds 1
# and 2, the candidate with `--perturb tail:fraction=1%`: a heavier tail on
# 1% of the engine's steps, item 4's perturbation, a run as long as the
# base), then each repetition, one after the other, wall time, CPU time and
# peak RSS (/usr/bin/time) of:
#   - cold: `tokenscope check BASE CAND` with no run cache (both runs'
#     .tokenscope-cache removed first): the JSONL files read, the caches
#     written, as the first check or report of a run does — on the CPUs of
#     CHECK_SPEED_CPUS (taskset; default 0,1: two cores);
#   - warm: the same again, the runs read from their caches, as every later
#     check of them does (a base is checked against many candidates) —
#     pinned to CPU 0 (one core), and on the CPUs of CHECK_SPEED_CPUS;
#   - the peer, benchmarks/peers/scipy_check.py under Debian's python3
#     (python3-pandas, python3-scipy): per-request TTFT, TPOT and E2E with
#     pandas, their percentiles, Mann-Whitney U and Kolmogorov-Smirnov tests
#     of each with scipy: far less than the checklist, the least a user
#     would do by hand. It has no cache: it reads the JSONL files each time.
# Prints every repetition, then the medians over the repetitions that ran.
#   benchmarks/check_speed.sh [REPEATS] [WORK_DIR]
# CHECK_SPEED_REQUESTS: fewer requests, only to try the script out.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
[ "$repeats" -ge 1 ] || { echo "REPEATS must be at least 1" >&2; exit 2; }
requests="${CHECK_SPEED_REQUESTS:-1000000}"
cpus="${CHECK_SPEED_CPUS:-0,1}"
bin="build/release/src/cli/tokenscope"
[ -x "$bin" ] || JOBS="${JOBS:-1}" bash scripts/build.sh release tokenscope >/dev/null
python=/usr/bin/python3
"$python" -c "import pandas, scipy" 2>/dev/null ||
  { echo "$python cannot import pandas and scipy: apt-get install python3-pandas python3-scipy" >&2; exit 2; }
if [ -n "${2:-}" ]; then
  work="$2"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
results="$work/results"
: > "$results"
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)); load average $(load)"
for who in base cand; do
  seed=1; perturb=none
  [ "$who" = cand ] && { seed=2; perturb="tail:fraction=1%"; }
  if [ ! -f "$work/$who/run.json" ]; then
    "$bin" sim --num-requests "$requests" --rate 20 --seed "$seed" --perturb "$perturb" --out "$work/$who" \
      --overwrite --quiet --no-history
  fi
done
echo "runs: $requests requests each; requests.jsonl $(($(stat -c %s "$work/base/requests.jsonl") / 1000000)) MB," \
     "steps.jsonl $(($(stat -c %s "$work/base/steps.jsonl") / 1000000)) MB, samples.jsonl" \
     "$(($(stat -c %s "$work/base/samples.jsonl") / 1000000)) MB per run"

measure() {  # name cpus command...
  local name="$1" on="$2"; shift 2
  local rc=0
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" taskset -c "$on" "$@" > "$work/out.txt" 2> "$work/err.txt" || rc=$?
  # check exits 1 when something regressed: that is a result, not a failure.
  if [ "$rc" -ne 0 ] && { [ "$name" = peer ] || [ "$rc" -ne 1 ]; }; then
    echo "$name failed ($rc):" >&2; cat "$work/err.txt" >&2; exit 1
  fi
  # (/usr/bin/time puts "Command exited with non-zero status 1" first when check found a regression.)
  read -r wall u s rss < <(tail -1 "$work/time")
  echo "$name $wall $(awk "BEGIN {printf \"%.2f\", $u + $s}") $rss" >> "$results"
  echo "  $name: wall $wall s, CPU $(awk "BEGIN {printf \"%.2f\", $u + $s}") s, peak RSS $((rss / 1024)) MiB"
}

for r in $(seq "$repeats"); do
  echo "repetition $r (load average before: $(load))"
  rm -f "$work/base/.tokenscope-cache" "$work/cand/.tokenscope-cache"
  measure cold "$cpus" "$bin" check "$work/base" "$work/cand" --out "$work/check.json"
  grep -E "^overall" "$work/out.txt" | sed 's/^/    /'
  measure warm1 0 "$bin" check "$work/base" "$work/cand" --out "$work/check.json"
  grep -E "^overall" "$work/out.txt" | sed 's/^/    /'
  measure warm "$cpus" "$bin" check "$work/base" "$work/cand" --out "$work/check.json"
  measure peer "$cpus" "$python" benchmarks/peers/scipy_check.py "$work/base" "$work/cand"
done

median() {  # name field
  grep "^$1 " "$results" | awk -v f="$2" '{print $f}' | sort -g |
    awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
cw=$(median cold 2); ww=$(median warm 2); pw=$(median peer 2)
echo "medians over $repeats repetitions (CPUs $cpus; warm on one core: CPU 0):"
echo "  tokenscope check, cold (JSONL read, caches written), CPUs $cpus: wall $cw s, CPU $(median cold 3) s, peak RSS $(( $(median cold 4) / 1024 )) MiB"
echo "  tokenscope check, warm (caches read), one core: wall $(median warm1 2) s, CPU $(median warm1 3) s, peak RSS $(( $(median warm1 4) / 1024 )) MiB"
echo "  tokenscope check, warm (caches read), CPUs $cpus: wall $ww s, CPU $(median warm 3) s, peak RSS $(( $(median warm 4) / 1024 )) MiB"
echo "  pandas/scipy peer: wall $pw s, CPU $(median peer 3) s, peak RSS $(( $(median peer 4) / 1024 )) MiB"
echo "  ratio (peer / tokenscope, wall): cold $(awk "BEGIN {printf \"%.1f\", $pw / $cw}"), warm $(awk "BEGIN {printf \"%.1f\", $pw / $ww}")"
echo "  run cache: $(( $(stat -c %s "$work/base/.tokenscope-cache") / 1000000 )) MB per run"
