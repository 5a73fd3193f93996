#!/usr/bin/env bash
# CPU cost per read of the host, process, cgroup and GPU collectors
# (benchmarks/sampler_cost.cpp) beside psutil reading the same quantities
# (benchmarks/peers/psutil_sampler.py, Debian python3-psutil), alternated in
# one run. Prints every round, then the markdown table of docs/performance.md
# ("Sampler costs"): medians over all rounds of all repeats.
#   benchmarks/sampler_cost.sh [REPEATS] [READS]     (defaults 3 and 2000; 5 rounds each)
# Where /sys/fs/cgroup is not cgroup v2, the cgroup collector reads a fake
# cgroup v2 tree of regular files in a temporary directory (the file values
# of a busy service); the GPU collector reads the test build's fake NVML
# (libtokenscope_fake_nvml.so) unless NVML= names a real libnvidia-ml.so.1.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
reads="${2:-2000}"
bin=build/release/benchmarks/sampler_cost
fake_nvml=build/release/src/observe/libtokenscope_fake_nvml.so
[ -x "$bin" ] && [ -f "$fake_nvml" ] || JOBS="${JOBS:-1}" bash scripts/build.sh release sampler_cost tokenscope_fake_nvml >/dev/null
nvml="${NVML:-$PWD/$fake_nvml}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "sampler_cost: $repeats repeats x 5 rounds x $reads reads, load average $(cut -d' ' -f1 /proc/loadavg), $(nproc) CPUs, $(uname -r), $(date '+%F %T')"

cgroup_root=/
cgroup_pid=0
cgroup_note="this host's cgroup v2"
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  cgroup_root="$work/root"
  cgroup_note="fake cgroup v2 tree, regular files"
  cgroup_pid=1
  d="$cgroup_root/sys/fs/cgroup/bench.slice"
  mkdir -p "$d" "$cgroup_root/proc/1"
  echo "0::/bench.slice" > "$cgroup_root/proc/1/cgroup"
  echo "cpu io memory pids" > "$cgroup_root/sys/fs/cgroup/cgroup.controllers"
  echo "cpu io memory" > "$d/cgroup.controllers"
  printf 'usage_usec 912345678\nuser_usec 812345678\nsystem_usec 100000000\nnr_periods 120000\nnr_throttled 4312\nthrottled_usec 98765432\nnr_bursts 0\nburst_usec 0\n' > "$d/cpu.stat"
  printf 'some avg10=3.21 avg60=2.10 avg300=1.05 total=123456789\nfull avg10=1.00 avg60=0.50 avg300=0.25 total=23456789\n' | tee "$d/cpu.pressure" "$d/memory.pressure" > "$d/io.pressure"
  echo 34359738368 > "$d/memory.current"
  printf 'low 0\nhigh 120\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n' > "$d/memory.events"
  printf '259:0 rbytes=123456789 wbytes=987654321 rios=12345 wios=54321 dbytes=0 dios=0\n8:0 rbytes=1000 wbytes=2000 rios=10 wios=20 dbytes=0 dios=0\n' > "$d/io.stat"
fi

for r in $(seq "$repeats"); do
  # Each reads its own /proc/PID.
  "$bin" --reads "$reads" --rounds 5 --nvml "$nvml" --cgroup-root "$cgroup_root" --cgroup-pid "$cgroup_pid" > "$work/ts.$r"
  /usr/bin/python3 benchmarks/peers/psutil_sampler.py "$reads" 5 > "$work/py.$r"
  cat "$work/ts.$r" "$work/py.$r" | sed "s/^/repeat $r: /"
done

cat "$work"/ts.* "$work"/py.* > "$work/all"
/usr/bin/python3 - "$work/all" "$cgroup_note" "$nvml" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5 and f[1].isdigit():
        rows.setdefault(f[0], []).append((float(f[2]), float(f[3]), float(f[4])))
def med(name, i):
    v = [r[i] for r in rows.get(name, [])]
    return statistics.median(v) if v else None
def us(x):
    return "n/a" if x is None else f"{x / 1000:.1f}"
def spread(name, i=0):  # "median (min–max)" in µs
    v = [r[i] for r in rows.get(name, [])]
    return "n/a" if not v else f"{us(statistics.median(v))} ({us(min(v))}–{us(max(v))})"
print()
print(f"| collector | CPU µs/read (min–max) | wall µs/read | series/read | files alone, CPU µs | psutil, CPU µs/read (min–max) | psutil / tokenscope |")
print(f"|---|---:|---:|---:|---:|---:|---:|")
for name, floor, peer, what in [("host", "host_files_only", "psutil_host", "host"),
                                ("process", "process_files_only", "psutil_process", "process"),
                                ("cgroup", None, None, f"cgroup ({sys.argv[2]})"),
                                ("gpu", None, None, "gpu (" + ("fake NVML, no driver time" if "fake" in sys.argv[3] else sys.argv[3]) + ")")]:
    c = med(name, 0)
    if c is None:
        print(f"| {what} | unavailable | | | | | |")
        continue
    p = med(peer, 0) if peer else None
    ratio = f"{p / c:.1f}x" if p else "n/a"
    print(f"| {what} | {spread(name)} | {us(med(name, 1))} | {med(name, 2):.0f} | {us(med(floor, 0)) if floor else 'n/a'} | {spread(peer) if peer else 'n/a'} | {ratio} |")
print()
print(f"Medians over {len(rows.get('host', []))} rounds.")
PY
