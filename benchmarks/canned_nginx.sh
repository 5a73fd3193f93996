# Sourced by the client benchmarks (client_ab.sh, client_closed_ab.sh,
# client_sched.sh, client_kernel_profile.sh): starts the canned-SSE nginx of
# ../shared/bench/canned-sse as its README says, on a free port, on core 0,
# at nice -20 where permitted, in a scratch directory that goes when the
# sourcing script exits. Sets: work (the scratch directory), port, nice
# (the nice prefix, an array, empty where not permitted).
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
