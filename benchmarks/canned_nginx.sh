# Sourced by the client benchmarks (client_ab.sh, client_closed_ab.sh,
# client_cpu_split.sh, client_sched.sh, client_kernel_profile.sh): starts the canned-SSE nginx of
# ../shared/bench/canned-sse as its README says, on a free port, on core 0,
# at nice -20 where permitted, in a scratch directory that goes when the
# sourcing script exits. Sets: work (the scratch directory), port, nice
# (the nice prefix, an array, empty where not permitted); defines
# open_loop_run (below).
nice=()
if [ -z "$(nice -n -20 true 2>&1)" ]; then nice=(nice -n -20); fi
work="$(mktemp -d)"; chmod 755 "$work"
cp -r ../shared/bench/canned-sse/. "$work/"
(cd "$work" && mkdir -p logs tmp www/v1/chat www/compat/v1/chat && python3 make_bodies.py 128 >/dev/null)
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
sed -i "s#\$CANNED_DIR#$work#g; s#127.0.0.1:8090#127.0.0.1:$port#" "$work/nginx.conf"
"${nice[@]}" taskset -c 0 nginx -c "$work/nginx.conf" -p "$work/"
trap 'kill "$(cat "$work/logs/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/logs/nginx.pid" ] && break; sleep 0.01; done

# One open-loop run of the tokenscope build $1 at $2 non-streaming requests/s
# for 3 s against this nginx (POST /v1/json, 8-token prompts or
# $TS_INPUT_LEN's (a --input-len, e.g. bench's default), the client on
# core 1): its run directory is $work/run, and the last line of
# $work/time.txt holds its user and system CPU seconds. Returns the client's
# exit status. The same run for every script that compares builds. With a
# third argument, split: the client thread alone on core 1 (--client-cpus
# 1), the rest of the process (the record writer) on core 0 beside nginx.
open_loop_run() {
  local cpus=(taskset -c 1) pin=()
  if [ "${3:-}" = split ]; then cpus=(taskset -c 0,1); pin=(--client-cpus 1); fi
  /usr/bin/time -f "%U %S" -o "$work/time.txt" "${nice[@]}" "${cpus[@]}" "$1" bench \
    --target "http://127.0.0.1:$port" --endpoint /v1/json --no-stream --api chat --model m --rate "$2" \
    --num-requests "$(($2 * 3))" --input-len "${TS_INPUT_LEN:-fixed:8}" --output-len fixed:1 --quiet --progress none \
    --client-threads 1 "${pin[@]}" --max-error-rate 1 --out "$work/run" >/dev/null 2>&1
}
