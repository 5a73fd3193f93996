#!/usr/bin/env bash
# Where the client's time goes, in counts that do not depend on the
# machine's speed: system calls per request (strace -c -f, 6,000
# non-streaming requests at 2,000 req/s) and instructions per output event
# (valgrind --tool=callgrind, 1,000 streams of 128 events, 16 in flight),
# both against the canned-SSE nginx of ../shared/bench/canned-sse; and
# instructions per non-streaming request on each thread (callgrind
# --separate-threads: 20,000 requests of POST /v1/json, 16 in flight): the
# client thread's, and the record writer's, that shares its core.
# Usage: benchmarks/client_profile.sh   (needs strace and valgrind)
#   TOKENSCOPE_BIN=path: another build (default build/release's)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TOKENSCOPE_BIN:-$(pwd)/build/release/src/cli/tokenscope}"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
command -v strace >/dev/null || { echo "needs strace (apt-get install strace)" >&2; exit 2; }
work="$(mktemp -d)"; chmod 755 "$work"
cp -r ../shared/bench/canned-sse/. "$work/"
(cd "$work" && mkdir -p logs tmp www/v1/chat www/compat/v1/chat && python3 make_bodies.py 128 >/dev/null)
sed -i "s#\$CANNED_DIR#$work#g" "$work/nginx.conf"
sed -i "s#127.0.0.1:8090#127.0.0.1:18097#" "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work/"
trap 'kill "$(cat "$work/logs/nginx.pid")" 2>/dev/null; rm -rf "$work"' EXIT
sleep 0.3
strace -c -f -o "$work/strace.txt" "$bin" bench --target http://127.0.0.1:18097 --endpoint /v1/json --no-stream \
  --api chat --model m --rate 2000 --num-requests 6000 --input-len fixed:8 --output-len fixed:1 --quiet \
  --prompt-check 0 --out "$work/strace-run"
echo "system calls for 6,000 non-streaming requests at 2,000 req/s (calls, of which failed):"
awk '$NF ~ /^(sendto|recvfrom|epoll_wait|timerfd_settime|writev|write|read|epoll_ctl|connect)$/ {
       if (NF == 6) printf "  %-16s %8d  %6d\n", $6, $4, $5; else printf "  %-16s %8d  %6d\n", $5, $4, 0 }' \
  "$work/strace.txt"
awk '$NF == "total" { printf "  %-16s %8d  %6d\n", "total", $(NF-2), $(NF-1) }' "$work/strace.txt"
if command -v valgrind >/dev/null; then
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" "$bin" bench --target http://127.0.0.1:18097 \
    --api chat --model m --concurrency 16 --num-requests 1000 --input-len fixed:8 --output-len fixed:128 \
    --quiet --prompt-check 0 --out "$work/cg-run" >/dev/null 2>&1
  total="$(callgrind_annotate "$work/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  echo "instructions for 1,000 streams of 128 output events: $total ($((total / 128000)) per event, everything included)"
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/nj.out" "$bin" bench \
    --target http://127.0.0.1:18097 --endpoint /v1/json --no-stream --api chat --model m --concurrency 16 \
    --num-requests 20000 --input-len fixed:8 --output-len fixed:1 --quiet --prompt-check 0 \
    --out "$work/nj-run" >/dev/null 2>&1
  echo "instructions per non-streaming request, by thread (20,000 requests, 16 in flight):"
  for f in "$work"/nj.out-*; do
    listing="$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null)"
    if grep -q '(below main)' <<<"$listing"; then continue; fi  # the main thread: start-up and summary
    if grep -q 'Runner::Shard::launch' <<<"$listing"; then
      label="client thread"
    elif grep -q 'RecordDrain::drain' <<<"$listing"; then
      label="record writer"
    else
      continue
    fi
    n="$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
    echo "  $label: $n ($((n / 20000)) per request)"
    [ "$label" = "client thread" ] || continue
    # Its largest parts, each with what it calls (the first, largest, line of each).
    # The response's reader (net/response_reader.h) where the build has it,
    # else Beast's parser alone (builds before it).
    reader="ResponseReader::put("
    grep -qF "$reader" <<<"$listing" || reader="basic_parser<false>::put(boost::asio::const_buffer"
    for part in "HTTP response parse|$reader" \
                "body JSON parse and walk (simdjson)|ChunkParser::parse_dom(" \
                "request built|Runner::Shard::encode(" \
                "record queued|RecordQueue::push("; do
      what="${part%%|*}"; pattern="${part#*|}"
      m="$(awk -v p="$pattern" 'index($0, p) { gsub(",", "", $1); print $1; exit }' <<<"$listing")"
      if [ -n "$m" ]; then echo "    of which $what: $((m / 20000)) per request"; fi
    done
  done
fi
