#!/usr/bin/env bash
# The CPU probes as docs/probes.md ("What it looked like on this machine")
# shows them: every command there, run RUNS times (default 3, at least 3),
# each run's figures side by side, medians over the runs where the doc quotes
# one. The probes themselves repeat every measurement (cache-line 21 times,
# kv-layout 15) and report medians with 95% intervals; this script repeats
# whole runs, because the hypervisor's placement of the vCPUs changes between
# runs more than within one.
# The timing probes run at nice $NICE (default -20, where permitted) so that
# other work on a shared machine takes their cores as little as it can; the
# cache-line probe still says "cannot show here" when its threads did not run
# at the same time.
#   [NICE=N] benchmarks/probes.sh [RUNS] [OUT_DIR]      (OUT_DIR keeps every run's JSON)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
[ "$runs" -ge 3 ] || { echo "RUNS must be at least 3" >&2; exit 2; }
bin="$(pwd)/build/release/src/cli/tokenscope"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="${2:-$work/out}"
nice=()
if [ "${NICE:--20}" != 0 ] && [ -z "$(nice -n "${NICE:--20}" true 2>&1)" ]; then nice=(nice -n "${NICE:--20}"); fi
mkdir -p "$out"
echo "probes: $runs runs, $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg), $(date '+%F %T'), timing probes at nice ${nice[2]:-unchanged}"
grep -m1 "model name" /proc/cpuinfo

echo
echo "## probe cache-line (default settings), $runs runs"
for i in $(seq "$runs"); do
  "${nice[@]}" "$bin" probe cache-line --out "$out/cache-line.$i" > /dev/null
  echo "run $i done (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(f"{out}/cache-line.{i}/cache-line.json")) for i in range(1, n + 1)]
def ci(m): return f"{m['median']:.2f} [{m['ci95_low']:.2f}, {m['ci95_high']:.2f}]" if m["ci95_low"] is not None else f"{m['median']:.2f}"
def ratio(d, name): return next(r["ratio"] for r in d["false_sharing"]["ratios"] if r["name"] == name)
def ns(d, name): return next(v["ns_per_increment"]["median"] for v in d["false_sharing"]["variants"] if v["name"] == name)
def slow(d, dist): return next(c for c in d["coherence_sweep"] if c["distance_bytes"] == dist)["slowdown_vs_far"]
def c2c(d): return d["core_to_core"][0]["one_way_ns"]["median"] if d["core_to_core"] else float("nan")
rows = [
    ("detected line size (coherence granularity)", lambda d: f"{d['line_size']['detected']} B"),
    ("stride-sweep knee", lambda d: f"{d['line_size']['stride_knee']} B"),
    ("stride sweep ms at 8 / 16 / 32 / 64 / 128 / 256 / 512 B",
     lambda d: " / ".join(f"{x['sweep_ms']['median']:.2f}" for x in d["stride_sweep"])),
    ("packed / padded64 (median [95% CI])", lambda d: ci(ratio(d, "packed/padded64"))),
    ("packed / padded128", lambda d: ci(ratio(d, "packed/padded128"))),
    ("padded64 / padded128", lambda d: ci(ratio(d, "padded64/padded128"))),
    ("ns per increment, packed / padded64", lambda d: f"{ns(d, 'packed'):.2f} / {ns(d, 'padded64'):.2f}"),
    ("coherence slowdown at 8 / 16 / 32 B (vs 4096 B)",
     lambda d: " / ".join(f"{slow(d, x)['median']:.2f}" for x in (8, 16, 32))),
    ("coherence slowdown at 64 B", lambda d: ci(slow(d, 64))),
    ("core-to-core one-way latency, cpu 0 ↔ 1", lambda d: f"{c2c(d):.1f} ns"),
    ("concurrency (of 2 cpus' worth)", lambda d: f"{d['concurrency']:.2f}"),
    ("verdict", lambda d: "cannot show here" if d["false_sharing"]["verdict"].startswith("cannot show")
     else d["false_sharing"]["verdict"].split(" (")[0]),
]
print("| | " + " | ".join(f"run {i}" for i in range(1, n + 1)) + " | median |")
print("|---|" + "---:|" * (n + 1))
medians = {
    "packed / padded64 (median [95% CI])": statistics.median(ratio(d, "packed/padded64")["median"] for d in runs),
    "packed / padded128": statistics.median(ratio(d, "packed/padded128")["median"] for d in runs),
    "core-to-core one-way latency, cpu 0 ↔ 1": statistics.median(c2c(d) for d in runs),
}
for name, f in rows:
    m = medians.get(name)
    print(f"| {name} | " + " | ".join(f(d) for d in runs) + f" | {'' if m is None else f'{m:.2f}'} |")
PY

kv_case() {  # title, probe args...
  local title="$1"; shift
  echo
  echo "## probe kv-layout $* ($title), $runs runs"
  local dir="$out/kv-layout.$(echo "$*" | tr -c 'a-z0-9' '_')"
  for i in $(seq "$runs"); do
    "${nice[@]}" "$bin" probe kv-layout "$@" --out "$dir.$i" > /dev/null
  done
  python3 - "$dir" "$runs" <<'PY'
import json, statistics, sys
base, n = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(f"{base}.{i}/kv-layout.json")) for i in range(1, n + 1)]
print("| variant | straddling rows | KV lines shared | metadata lines shared | positions/s (median of runs) | "
      + " | ".join(f"run {i} time vs fastest [95% CI]" for i in range(1, n + 1)) + " |")
print("|---|---:|---:|---:|---:|" + "---:|" * n)
def ci(m): return f"{m['median']:.2f} [{m['ci95_low']:.2f}, {m['ci95_high']:.2f}]" if m.get("ci95_low") is not None else f"{m['median']:.2f}"
for k, v in enumerate(runs[0]["variants"]):
    a = v["analysis"]
    pos = statistics.median(r["variants"][k]["positions_per_s"]["median"] for r in runs)
    print(f"| {v['name']} | {a['straddle_share'] * 100:.0f}% | {a['kv_lines_shared_between_threads']:,}/{a['kv_lines']:,} | "
          f"{a['metadata_lines_shared_between_threads']}/{a['metadata_lines']} | {pos:,.0f} | "
          + " | ".join(ci(r["variants"][k]["time_vs_fastest"]) for r in runs) + " |")
for i, r in enumerate(runs, 1):
    print(f"run {i} findings:")
    for f in r["findings"]:
        print(f"  {f}")
PY
}
kv_case "defaults: 2 threads, 8 sequences, 128-token slots, window 32, bf16 256-byte rows"
kv_case "16-byte fp8 rows, four to a line" --head-dim 16 --dtype fp8
kv_case "the append path alone, 16-byte rows, split by head" --read-window 1 --head-dim 16 --dtype fp8 --split head
kv_case "the append path alone, 256-byte rows, split by head" --read-window 1 --split head
kv_case "a pool 32 bytes past a line boundary" --base-offset 32

echo
echo "## probe line-sim --generate CASE (seed 1, 4 threads, 200 iterations; deterministic)"
echo "| case | accesses | true-sharing misses | false-sharing misses | HITM | line classes | false misses left when padded |"
echo "|---|---:|---:|---:|---:|---|---:|"
for c in packed-counters padded-counters shared-counter producer-consumer read-mostly sequence-structs mixed-line block-table; do
  "$bin" probe line-sim --generate "$c" --json > "$work/line-sim.json"
  python3 - "$work/line-sim.json" "$c" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = d["simulation"]["totals"]; case = sys.argv[2]
classes = sorted({l["classification"] for l in d["simulation"]["lines"]} - {"none"})
label = ", ".join(classes) or ("none" if t["hitm"] else "—")
padded = next(p["totals"]["false_sharing_misses"] for p in d["predictions"] if p["padded"])
print(f"| `{case}` | {t['accesses']} | {t['true_sharing_misses']} | {t['false_sharing_misses']} | {t['hitm']} | "
      f"{label} | {padded} |")
PY
done

echo
echo "## probe line-sim on a large trace: sequence-structs --gen-iterations 250000, replayed $runs times"
"$bin" probe line-sim --generate sequence-structs --gen-iterations 250000 --write-trace "$work/big.trace" > /dev/null
accesses=$(grep -vc '^#' "$work/big.trace")
echo "trace: $accesses accesses, $(( $(stat -c %s "$work/big.trace") / 1000000 )) MB as text"
for i in $(seq "$runs"); do
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.$i" "${nice[@]}" "$bin" probe line-sim "$work/big.trace" \
    --layout "$work/big.trace.layout" > /dev/null
  read -r e u s m < "$work/time.$i"
  echo "run $i: replay at 64 B with predictions at 32 B, 128 B and padded: $e s wall, $(awk "BEGIN {print $u + $s}") s CPU, peak RSS $((m / 1024)) MiB"
done
cat "$work"/time.* | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin]
print(f"median: {statistics.median(r[1] + r[2] for r in rows):.2f} s CPU, {statistics.median(r[0] for r in rows):.2f} s wall, "
      f"peak RSS {statistics.median(r[3] for r in rows) / 1024:.0f} MiB")'

echo
echo "## probe numa"
"$bin" probe numa | head -3
