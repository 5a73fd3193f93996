#!/usr/bin/env python3
"""What the observe layer costs the client (docs/performance.md, "Observe:
the cost to the client").

   python3 benchmarks/observe_overhead.py [--rounds 5] [--streams 1000] [--requests 8000] [--interval 1]

The same closed-loop bench, --concurrency STREAMS (1,000 streams in flight),
against the canned-SSE nginx of ../shared/bench/canned-sse (131-event chat
streams; nginx pinned to core 0, the client to core 1), twice per round in
alternating order:

  on   every collector at --scrape-interval: a vLLM-sized /metrics page
       (benchmarks/vllm_exposition.py, about 2,100 series, served by a static
       server in this script) scraped as the server source, the host
       collector, NVML (here: one "not available" line), a DCGM-style second
       scrape of the same page as --gpu-sampler;
  off  --no-scrape --no-host --no-gpu.

CPU per output event = run.json client.process_cpu_s / the events in
requests.jsonl. Prints every run, then the medians, the ratio on/off per
round and its median (target: under 1.02). Also the sampler's own CPU from
run.json observe.sources (cpu_ms_per_read, cpu_share_of_core).
"""
import argparse
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import client_bench as cb  # noqa: E402  (nginx set-up, timed runs)


class Page:
    """A static /metrics page on loopback, in a thread of this process (not the client's CPU)."""

    def __init__(self, body):
        page = body.encode()

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    if not os.path.exists(cb.BIN):
        raise SystemExit(f"{cb.BIN} missing: JOBS=2 bash scripts/build.sh release tokenscope")
    page = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks/vllm_exposition.py"), "--engines", "6"],
                          capture_output=True, text=True, check=True).stdout
    srv = Page(page)
    series = sum(1 for line in page.splitlines() if line and not line.startswith("#"))
    work = tempfile.mkdtemp(prefix="observe_overhead.")
    os.chmod(work, 0o755)
    canned = os.path.join(work, "canned")
    nginx_pid = os.path.join(canned, "logs/nginx.pid")
    try:
        shutil.copytree(cb.CANNED, canned)
        for d in ("logs", "tmp", "www/v1/chat", "www/compat/v1/chat"):
            os.makedirs(os.path.join(canned, d), exist_ok=True)
        subprocess.run([sys.executable, "make_bodies.py", "128"], cwd=canned, check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(canned, "nginx.conf")
        port = cb.free_port()
        nginx = f"http://127.0.0.1:{port}"
        text = open(conf).read().replace("$CANNED_DIR", canned).replace("127.0.0.1:8090", f"127.0.0.1:{port}")
        open(conf, "w").write(text)
        subprocess.run(["taskset", "-c", cb.SERVER_CORE, "nginx", "-c", conf, "-p", canned + "/"], check=True)
        for _ in range(500):
            if cb.run(["curl", "-s", "-o", "/dev/null", nginx + "/v1/json"]).returncode == 0:
                break
            time.sleep(0.01)
        b = cb.Bench(work)
        base = ["--target", nginx, "--api", "chat", "--model", "m", "--concurrency", str(a.streams),
                "--max-connections", str(a.streams), "--num-requests", str(a.requests), "--input-len", "fixed:8",
                "--output-len", "fixed:128", "--scrape-interval", str(a.interval)]
        modes = {"on": ["--scrape", srv.url, "--gpu-sampler", srv.url],
                 "off": ["--no-scrape", "--no-host", "--no-gpu"]}
        runs = {"on": [], "off": []}
        ratios = []
        print(f"# {a.streams} streams, {a.requests} requests of 128 events, page of {series} series "
              f"({len(page)} bytes), interval {a.interval} s", flush=True)
        for rnd in range(1, a.rounds + 1):
            order = ["on", "off"] if rnd % 2 else ["off", "on"]
            got = {}
            for mode in order:
                r = b.tokenscope(base + modes[mode])
                r["cpu_per_event_us"] = 1e6 * r["cpu_s"] / max(1, r["output_events"])
                got[mode] = r
                runs[mode].append(r)
                print(f"round {rnd} {mode:>3}: {r['output_events']} events, ok {r['ok']}, cpu {r['cpu_s']:.3f} s, "
                      f"{r['cpu_per_event_us']:.3f} us/event, wall {r['wall_s']:.1f} s (load {cb.loadavg():.2f})",
                      flush=True)
            ratios.append(got["on"]["cpu_per_event_us"] / got["off"]["cpu_per_event_us"])
        med = {m: statistics.median(x["cpu_per_event_us"] for x in runs[m]) for m in runs}
        print()
        print("| | observe off | observe on | on / off per round | median ratio |")
        print("|---|---:|---:|---|---:|")
        print(f"| client CPU per output event, us (median of {a.rounds}) | {med['off']:.3f} | {med['on']:.3f} | "
              f"{', '.join(f'{x:.3f}' for x in ratios)} | **{statistics.median(ratios):.3f}** |")
    finally:
        if os.path.exists(nginx_pid):
            subprocess.run(["kill", open(nginx_pid).read().strip()])
        srv.httpd.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
