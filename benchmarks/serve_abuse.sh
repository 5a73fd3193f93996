#!/usr/bin/env bash
# Resident memory (VmRSS) of `tokenscope serve` under abuse, the numbers of
# docs/reliability.md ("serve under abuse"):
#  1. 1,000 idle connections: before, with all of them open, and after they
#     have closed;
#  2. 50 stalled readers (streamed completions of 8 x 4,000 tokens whose
#     clients never read, each with a 4 KiB receive buffer): before, the peak
#     while the server holds them, and after it has let them go.
# Each round starts a fresh server (one I/O thread, --fixed-step-ms 1, the
# default limits); ROUNDS rounds (default 3), then the medians.
#   benchmarks/serve_abuse.sh [ROUNDS]
#   BIN=/path/to/tokenscope benchmarks/serve_abuse.sh   (another build, e.g. an older one)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
bin="${BIN:-$(pwd)/build/release/src/cli/tokenscope}"
[ -x "$bin" ] || bash scripts/build.sh release tokenscope >/dev/null
echo "serve_abuse: $bin, $rounds rounds, $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg), $(date '+%F %T')"
python3 - "$bin" "$rounds" <<'PY'
import json, os, resource, signal, socket, statistics, subprocess, sys, tempfile, time

binary, rounds = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)

def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")

def fetch(port, path):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        s.close()
        return out.decode(errors="replace")
    except OSError:
        return ""

def metric(port, name, label=""):
    for line in fetch(port, "/metrics").splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return None

def settle(pid, seconds=3.0):
    # The server trims freed memory within a second of the connections
    # falling to half their peak; give it a few seconds, then read.
    time.sleep(seconds)
    return rss_mib(pid)

def one_round():
    work = tempfile.mkdtemp()
    port_file = os.path.join(work, "port")
    server = subprocess.Popen([binary, "serve", "--port", "0", "--port-file", port_file, "--fixed-step-ms", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(3000):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.01)
        port = int(open(port_file).read())
        fetch(port, "/health")
        r = {}
        # 1. Idle connections.
        r["idle_before"] = settle(server.pid, 1.0)
        counted = (metric(port, "tokenscope:connections") or 0) >= 1  # older builds: always 0
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
        deadline = time.time() + (30 if counted else 2)
        while time.time() < deadline and (metric(port, "tokenscope:connections") or 0) < 1000:
            time.sleep(0.1)
        r["idle_during"] = settle(server.pid, 1.0)
        for s in idle:
            s.close()
        r["idle_after"] = settle(server.pid)
        # 2. Stalled readers.
        body = json.dumps({"prompt": ["stalled"] * 8, "max_tokens": 4000, "ignore_eos": True, "stream": True})
        request = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
        r["stalled_before"] = rss_mib(server.pid)
        stalled = []
        for _ in range(50):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            s.sendall(request)
            stalled.append(s)
        # Held until the server has dropped them all, or generation has ended
        # (a server without a bound keeps them), at most 120 s.
        peak, t0 = 0.0, time.time()
        while time.time() - t0 < 120:
            peak = max(peak, rss_mib(server.pid))
            running = metric(port, "vllm:num_requests_running")
            dropped = metric(port, "tokenscope:connections_dropped_total", 'reason="send_queue_full"') or 0
            dropped += metric(port, "tokenscope:connections_dropped_total", 'reason="write_timeout"') or 0
            if dropped >= 50 or (running == 0 and time.time() - t0 > 2):
                break
            time.sleep(0.1)
        r["stalled_held_s"] = time.time() - t0
        r["stalled_peak"] = max(peak, rss_mib(server.pid))
        r["stalled_dropped"] = dropped
        for s in stalled:
            s.close()
        r["stalled_after"] = settle(server.pid)
        return r
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()

results = []
for i in range(rounds):
    r = one_round()
    results.append(r)
    print(f"round {i + 1}: idle 1,000: {r['idle_before']:.1f} -> {r['idle_during']:.1f} -> {r['idle_after']:.1f} MiB; "
          f"stalled 50: {r['stalled_before']:.1f} -> peak {r['stalled_peak']:.1f} -> {r['stalled_after']:.1f} MiB "
          f"(held {r['stalled_held_s']:.1f} s, {r['stalled_dropped']:.0f} dropped by the server)", flush=True)

med = lambda k: statistics.median(r[k] for r in results)
print()
print("| case | RSS before, MiB | during (peak), MiB | after, MiB | runs (before / during / after) |")
print("|---|---:|---:|---:|---|")
for name, key in (("1,000 idle connections", "idle"), ("50 stalled readers", "stalled")):
    during = f"{key}_during" if key == "idle" else f"{key}_peak"
    runs = "; ".join(f"{r[key + '_before']:.1f} / {r[during]:.1f} / {r[key + '_after']:.1f}" for r in results)
    print(f"| {name} | {med(key + '_before'):.1f} | {med(during):.1f} | {med(key + '_after'):.1f} | {runs} |")
print(f"\nper idle connection: {(med('idle_during') - med('idle_before')) * 1024 * 1024 / 1000:,.0f} bytes")
PY
