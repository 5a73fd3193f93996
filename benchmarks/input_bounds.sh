#!/usr/bin/env bash
# Peak memory and time of tokenscope on bad and oversized input files: the
# numbers of docs/reliability.md ("bad input"). Each case runs the real binary
# once under GNU time and prints its exit code, peak RSS, wall time and the
# first line of its error output, as a Markdown table.
#   benchmarks/input_bounds.sh [BIN] [BEFORE_BIN]
# BIN defaults to build/release/src/cli/tokenscope. With BEFORE_BIN (an older
# build) every case runs with it too, for a before/after table; old builds can
# take minutes and gigabytes on these files.
# Needs about 400 MB of free disk in $TMPDIR (the 2 GiB file is sparse).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:-build/release/src/cli/tokenscope}"
before="${2:-}"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "making the input files in $work ..." >&2
truncate -s 2G "$work/sparse"                     # 2 GiB of NUL bytes, no disk used
: > "$work/empty.csv"
mkdir "$work/folder"
python3 - "$work" <<'PY'
import struct, sys
work = sys.argv[1]
# 200 MB Azure trace of valid rows, the last row bad.
with open(f"{work}/big.csv", "w") as f:
    f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    size, i, rows = 0, 0, []
    while size < 200_000_000:
        row = f"2023-11-16 18:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.6805900,{100 + i % 4000},244\n"
        rows.append(row)
        size += len(row)
        i += 1
        if len(rows) == 100_000:
            f.write("".join(rows))
            rows = []
    f.write("".join(rows))
    f.write("2023-11-16 19:00:00.0000000,oops,244\n")
print(f"big.csv: {i:,} valid rows, then a bad one", file=sys.stderr)
# A native row with the documented maximum token counts (2^30).
with open(f"{work}/max.jsonl", "w") as f:
    f.write('{"t_ms": 0, "input_tokens": 1073741824, "output_tokens": 1073741824}\n')
    f.write('{"t_ms": 1, "input_tokens": 100, "output_tokens": 10}\n')
# 100 MB binary access traces (6.25 M records): valid, and with a bad last record.
n = 100_000_000 // 16
header = b"TSAT" + struct.pack("<III", 1, 16, 0)
block = b"".join(struct.pack("<QIHBB", 0x1000 + 8 * (k % 64), k % 4, 8, 1, 0) for k in range(4096))
for name, bad_last in (("accesses.bin", False), ("accesses_bad.bin", True)):
    with open(f"{work}/{name}", "wb") as f:
        f.write(header)
        left = n
        while left > 0:
            chunk = block[: 16 * min(4096, left)]
            left -= len(chunk) // 16
            if left == 0 and bad_last:
                chunk = chunk[:-16] + struct.pack("<QIHBB", 0x1000, 0, 8, 7, 0)
            f.write(chunk)
PY

cases=(
  "2 GiB sparse file, format auto|600|sim --trace $work/sparse"
  "2 GiB sparse file, --trace-format native|600|sim --trace $work/sparse --trace-format native"
  "2 GiB sparse file, --trace-format sharegpt|600|sim --trace $work/sparse --trace-format sharegpt"
  "2 GiB sparse file as an access trace|600|probe line-sim $work/sparse"
  "empty file|600|sim --trace $work/empty.csv"
  "a directory|600|sim --trace $work/folder"
  "200 MB Azure trace, bad last row (reads every row)|600|sim --trace $work/big.csv"
  "200 MB Azure trace, --max-requests 1000|600|sim --trace $work/big.csv --max-requests 1000 --quiet"
  "200 MB Azure trace, --max-requests 100000|600|sim --trace $work/big.csv --max-requests 100000 --no-steps --quiet"
  "200 MB Azure trace, --max-requests 1000000|600|sim --trace $work/big.csv --max-requests 1000000 --no-steps --quiet"
  "row of 2^30 input and output tokens|600|sim --trace $work/max.jsonl --quiet"
  "100 MB binary access trace, bad last record|600|probe line-sim $work/accesses_bad.bin"
  "100 MB binary access trace (6.25 M accesses), simulated|600|probe line-sim $work/accesses.bin"
  "probe cache-line --threads 100000|60|probe cache-line --threads 100000 --skip stride,coherence,ping-pong --repetitions 1 --increments 1000"
  "probe cache-line --threads 0|60|probe cache-line --threads 0 --skip stride,coherence,ping-pong --repetitions 1 --increments 1000"
)

run() {  # run LABEL TAG SECONDS BIN ARGS...: one table row (exit 124: killed after SECONDS)
  local label="$1" tag="$2" limit="$3" exe="$4"
  shift 4
  local rc=0
  /usr/bin/time -f "%M %e" -o "$work/time" timeout "$limit" "$exe" "$@" > "$work/out" 2> "$work/err" || rc=$?
  local rss secs
  read -r rss secs < <(tail -n 1 "$work/time")
  local msg
  msg="$({ grep -v '^Command exited\|^Run .tokenscope --help' "$work/err" || true; } | head -n 1 | sed "s|$work/||g" |
    cut -c1-110)"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$label" "$tag" "$rc" "$((rss / 1024))" "$secs" "${msg//|/\\|}"
}

echo
echo "| case | build | exit | peak RSS MiB | wall s | first line of stderr |"
echo "|---|---|---:|---:|---:|---|"
for c in "${cases[@]}"; do
  IFS='|' read -r label limit rest <<< "$c"
  read -r -a args <<< "$rest"
  if [ -n "$before" ]; then run "$label" before "$limit" "$before" "${args[@]}"; fi
  run "$label" "${before:+after}" "$limit" "$bin" "${args[@]}"
done
