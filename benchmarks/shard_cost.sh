#!/usr/bin/env bash
# What sharding costs (docs/performance.md "Sharded bench"), two figures:
#
# 1. The client's CPU per request in a shard against one process sending the
#    same load: against a `tokenscope serve` process, streamed, a plain run
#    of NUM/2 requests at RATE/2 req/s, then shard 0/2 and shard 1/2 of NUM
#    requests at RATE (each its share: NUM/2 at RATE/2), one after the other;
#    each process's own CPU seconds (run.json client.process_cpu_s) per
#    request it sent. In turns, REPEATS times.
# 2. The merge's cost per million records: SHARDS shard directories holding
#    RECORDS records between them (lines of a real run's requests.jsonl,
#    renumbered, on clocks of their own), merged REPEATS times: wall and CPU
#    seconds, peak RSS.
# Prints every repeat and the medians.
#   benchmarks/shard_cost.sh [REPEATS]   (default 3, at least 3)
#   NUM=2000 RATE=200 RECORDS=1000000 SHARDS=4 benchmarks/shard_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
[ "$repeats" -ge 3 ] || { echo "REPEATS must be at least 3 (medians)" >&2; exit 2; }
num="${NUM:-2000}"
rate="${RATE:-200}"
records="${RECORDS:-1000000}"
shards="${SHARDS:-4}"
bin="$(realpath "${BIN:-build/release/src/cli/tokenscope}")"
[ -x "$bin" ] || bash scripts/build.sh release >/dev/null
work="$(mktemp -d)"
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
echo "shard_cost: $repeats repeats, $num requests at $rate req/s; merge of $records records in $shards shards;" \
     "load average $(cut -d' ' -f1 /proc/loadavg), $(nproc) CPUs, $(git rev-parse --short HEAD), $(date '+%F %T')"

# ---- 1. client CPU per request
"$bin" serve --port 0 --port-file "$work/port" --threads 2 > "$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
url="http://127.0.0.1:$(cat "$work/port")"
common=(--target "$url" --seed 5 --input-len fixed:256 --output-len fixed:64 --progress none --no-history --no-cache
        --quiet)
half=$((num / 2))
half_rate=$(echo "scale=3; $rate / 2" | bc)
cpu_per_request() {  # run directory -> microseconds of the client's CPU per request sent
  /usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1] + "/run.json"))
print("%.1f" % (1e6 * r["client"]["process_cpu_s"] / r["summary"]["requests_total"]))' "$1"
}
# Each process alone with the server, the same load per process: a plain
# run of NUM/2 requests at RATE/2, and each shard of the NUM-request run at
# RATE (its share: NUM/2 requests at RATE/2). What differs is the shard's
# own work: the whole schedule built, its share kept, the agreed start.
# (Two shards at once on this machine's two cores would also share them
# with each other and the server: their CPU per request would measure
# that contention, not sharding.)
single=(); shard0=(); shard1=(); rank0=(); rank1=(); together0=(); together1=()
# 3. The same NUM requests at RATE as the two ranks of `mpirun -n 2 bench
#    --mpi` (when Open MPI is installed): the ranks run together, so they
#    share the two cores with each other and the server; their CPU per
#    request is each rank's run.json client.process_cpu_s.
mpirun_bin="$(command -v mpirun || true)"
for i in $(seq "$repeats"); do
  "$bin" bench "${common[@]}" --num-requests "$half" --rate "$half_rate" --out "$work/single-$i" > /dev/null
  for k in 0 1; do
    "$bin" bench "${common[@]}" --num-requests "$num" --rate "$rate" --shard "$k/2" \
      --start-at "$(( $(date +%s) + 2 ))" --out "$work/s$i-$k" > /dev/null
  done
  a=$(cpu_per_request "$work/single-$i"); b=$(cpu_per_request "$work/s$i-0"); c=$(cpu_per_request "$work/s$i-1")
  single+=("$a"); shard0+=("$b"); shard1+=("$c")
  line="repeat $i: client CPU per request: one process ${a} us, shard 0 ${b} us, shard 1 ${c} us"
  if [ -n "$mpirun_bin" ]; then
    "$mpirun_bin" --allow-run-as-root --oversubscribe -n 2 "$bin" bench --mpi "${common[@]}" \
      --num-requests "$num" --rate "$rate" --out "$work/m$i" > /dev/null
    d=$(cpu_per_request "$work/m$i.shards/0"); e=$(cpu_per_request "$work/m$i.shards/1")
    rank0+=("$d"); rank1+=("$e")
    line="$line, MPI rank 0 ${d} us, rank 1 ${e} us"
    # The same two shards as plain processes at once: the contention the
    # ranks meet, without MPI.
    start=$(( $(date +%s) + 2 ))
    pids=()
    for k in 0 1; do
      "$bin" bench "${common[@]}" --num-requests "$num" --rate "$rate" --shard "$k/2" --start-at "$start" \
        --out "$work/t$i-$k" > /dev/null &
      pids+=($!)
    done
    wait "${pids[@]}"  # these two, not the server
    f=$(cpu_per_request "$work/t$i-0"); g=$(cpu_per_request "$work/t$i-1")
    together0+=("$f"); together1+=("$g")
    line="$line, shards at once ${f} us, ${g} us"
  fi
  echo "$line"
done
kill "$server_pid"; server_pid=""

# ---- 2. the merge's cost
/usr/bin/python3 - "$work/single-1" "$work/merge" "$records" "$shards" <<'PY'
import json, os, sys
src, root, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(os.path.join(src, "requests.jsonl"))]
run = json.load(open(os.path.join(src, "run.json")))
t0 = min(r["t_sched_ns"] for r in lines)
span = max(r["t_close_ns"] for r in lines) - t0 + 1
for s in range(k):
    d = os.path.join(root, "shard-%d" % s)
    os.makedirs(d)
    epoch = 10**12 * (s + 1)  # each shard on a clock of its own
    with open(os.path.join(d, "requests.jsonl"), "w") as f:
        for i in range(s, n, k):
            r = dict(lines[i % len(lines)])
            shift = epoch + (i // len(lines)) * span - t0
            r["id"] = i
            for key in ("t_sched_ns", "t_send_ns", "t_headers_ns", "t_first_token_ns", "t_last_token_ns", "t_close_ns"):
                if r.get(key, -1) >= 0:
                    r[key] += shift
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    shard = {"index": s, "count": k, "source": "--shard", "start_at_unix_ns": 1767225600000000000,
             "epoch_monotonic_ns": epoch, "ready_late_ns": 0, "planned_requests": len(range(s, n, k)), "users": None,
             "clock_sync": {"available": True, "synchronized": True, "max_error_us": 100, "est_error_us": 10,
                            "source": "adjtimex"},
             "slo_from_schedule": True,
             "slos": {"default": {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": None, "ttfo_ms": None, "percentile": 99}}}
    r = dict(run)
    r["shard"] = shard
    json.dump(r, open(os.path.join(d, "run.json"), "w"))
PY
echo "merge input: $(du -sm "$work/merge" | cut -f1) MiB in $shards shards"
wall=(); cpu=(); rss=()
for i in $(seq "$repeats"); do
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$bin" merge "$work/merge"/shard-* --out "$work/merged" --overwrite \
    > /dev/null 2> "$work/merge.log"
  read -r e u s m < "$work/time"
  wall+=("$e"); cpu+=("$(echo "$u + $s" | bc)"); rss+=("$m")
  echo "repeat $i: merge ${e} s wall, $(echo "$u + $s" | bc) s CPU, peak RSS $((m / 1024)) MiB"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ms=$(median "${single[@]}"); m0=$(median "${shard0[@]}"); m1=$(median "${shard1[@]}")
echo "median client CPU per request: one process ${ms} us, shard 0 ${m0} us ($(echo "scale=3; $m0 / $ms" | bc)x)," \
     "shard 1 ${m1} us ($(echo "scale=3; $m1 / $ms" | bc)x)"
if [ ${#rank0[@]} -gt 0 ]; then
  r0=$(median "${rank0[@]}"); r1=$(median "${rank1[@]}")
  t0=$(median "${together0[@]}"); t1=$(median "${together1[@]}")
  echo "median client CPU per request under mpirun -n 2 (ranks together): rank 0 ${r0} us" \
       "($(echo "scale=3; $r0 / $ms" | bc)x), rank 1 ${r1} us ($(echo "scale=3; $r1 / $ms" | bc)x);" \
       "two --shard processes at once: ${t0} us ($(echo "scale=3; $t0 / $ms" | bc)x), ${t1} us" \
       "($(echo "scale=3; $t1 / $ms" | bc)x); rank against shard at once: $(echo "scale=3; $r0 / $t0" | bc)x," \
       "$(echo "scale=3; $r1 / $t1" | bc)x"
fi
mw=$(median "${wall[@]}"); mc=$(median "${cpu[@]}"); mr=$(median "${rss[@]}")
echo "median merge: ${mw} s wall, ${mc} s CPU for $records records" \
     "($(echo "scale=2; $mc * 1000000 / $records" | bc) CPU s per million), peak RSS $((${mr%.*} / 1024)) MiB"
