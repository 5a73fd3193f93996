#!/usr/bin/env bash
# Where the open loop's CPU goes, user against kernel: tokenscope sends
# RATE non-streaming requests/s for 3 s (POST /v1/json on the canned-SSE
# nginx of ../shared/bench/canned-sse, nginx on core 0, the client on core
# 1), once under /usr/bin/time (user and system CPU) and once under
# `perf record -e cpu-clock -g` (software sampling: no PMU is needed), and
# prints the user/system split, the share of samples in the kernel and the
# system calls whose kernel paths hold the most samples.
# Usage: benchmarks/client_kernel_profile.sh [RATE]   (default 20000; needs perf)
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${1:-20000}"
bin="$(pwd)/build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 2; }
source benchmarks/canned_nginx.sh  # work, port, nice; nginx on core 0
sleep 0.3
args=(bench --target "http://127.0.0.1:$port" --endpoint /v1/json --no-stream --api chat --model m
      --rate "$rate" --num-requests "$((rate * 3))" --input-len fixed:8 --output-len fixed:1 --quiet
      --progress none --prompt-check 0 --client-threads 1)
/usr/bin/time -f "%U %S" -o "$work/time.txt" taskset -c 1 "$bin" "${args[@]}" --out "$work/run1" >/dev/null 2>&1
read -r user sys < "$work/time.txt"
python3 - "$work/run1" "$rate" "$user" "$sys" <<'PY'
import json, sys
out, rate, user, sys_ = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
s = json.load(open(out + "/run.json"))["summary"]
n = s["requests_completed"]
print(f"{rate:,} req/s for 3 s: {n:,} completed, send lag p99 {s['send_lag_ms']['p99']:.3f} ms; "
      f"CPU {user:.2f} s user + {sys_:.2f} s system = {1e6 * (user + sys_) / max(1, n):.1f} us per request "
      f"({100 * sys_ / max(1e-9, user + sys_):.0f}% in the kernel)")
PY
perf record -q -e cpu-clock -F 5000 -g -o "$work/perf.data" -- taskset -c 1 "$bin" "${args[@]}" \
  --out "$work/run2" >/dev/null 2>&1
perf report -i "$work/perf.data" --no-children --sort dso --stdio 2>/dev/null |
  awk '/^ +[0-9]/ && $2 == "[kernel.kallsyms]" { print "samples in the kernel: " $1 }'
echo "share of all samples in each system call (its kernel path included), the largest:"
perf report -i "$work/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
  awk '/^ +[0-9].*\[k\] __x64_sys_/ { sub("__x64_sys_", "", $NF); printf "  %-8s %s\n", $1, $NF }' | head -8
perf report -i "$work/perf.data" --no-children --sort dso --stdio 2>/dev/null |
  awk '/^ +[0-9]/ && $2 == "tokenscope" { print "samples in tokenscope'"'"'s own code: " $1 }'
