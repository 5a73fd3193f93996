#!/usr/bin/env python3
"""CPU per /metrics scrape: tokenscope beside Prometheus, on the same page.

   benchmarks/exposition_bench.py [--rounds 3] [--seconds 60] [--warmup 10] [--engines 6]

A vLLM-sized page (benchmarks/vllm_exposition.py: about 2,100 series, 240
KB of Prometheus text 0.0.4) is served over loopback by a small static
server in this script (Content-Type text/plain; version=0.0.4). Each round:

  1. Prometheus (Debian's prometheus, /usr/bin/prometheus) with no target
     for WARMUP + SECONDS: its idle CPU (utime + stime of /proc/PID/stat
     over the last SECONDS), the baseline;
  2. Prometheus scraping the page every 1 s for WARMUP + SECONDS: its CPU
     over the last SECONDS minus the idle baseline, divided by the scrapes
     the server answered in that window (scrape, parse, TSDB append, WAL);
  3. tokenscope's scrape loop (build/release/benchmarks/exposition_scrape:
     net::fetch, parse_exposition, flatten moving the samples out, one
     scrape every 1 s): WARMUP scrapes, then SECONDS scrapes measured: its
     CPU per scrape from getrusage and from /proc/self/stat (the same
     clock ticks as Prometheus's figure), and how much of it went to the
     fetch and to the parse.

Prints every round, then the medians as a Markdown table with the ratio and
each as a percentage of one core at one scrape per second
(docs/performance.md, "Exposition parsing"). Needs the release build of
exposition_scrape (scripts/build.sh release exposition_scrape) and the
prometheus package (scripts/setup.sh).
"""
import argparse
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """The static /metrics server, counting the scrapes it answers."""

    def __init__(self, body):
        self.body = body
        self.requests = 0
        lock = threading.Lock()
        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                self.wfile.write(page.body)
                with lock:
                    page.requests += 1

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def stat_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def prometheus_ticks(workdir, target_port, warmup, seconds, page):
    """Ticks Prometheus used over `seconds` after `warmup`, and the scrapes answered then."""
    name = "scrape" if target_port else "idle"
    config = os.path.join(workdir, f"{name}.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1m\n")
        if target_port:
            f.write("scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{target_port}']\n")
        else:
            f.write("scrape_configs: []\n")
    data = os.path.join(workdir, f"data-{name}")
    shutil.rmtree(data, ignore_errors=True)
    log = open(os.path.join(workdir, f"{name}.log"), "w")
    proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{free_port()}"], stdout=log, stderr=log)
    try:
        time.sleep(warmup)
        if proc.poll() is not None:
            sys.exit(f"prometheus exited ({proc.returncode}); see {log.name}")
        t0, r0 = stat_ticks(proc.pid), page.requests
        time.sleep(seconds)
        t1, r1 = stat_ticks(proc.pid), page.requests
    finally:
        proc.terminate()
        proc.wait()
        log.close()
    return t1 - t0, r1 - r0


def tokenscope_scrapes(scrape_bin, port, warmup, seconds):
    out = subprocess.run([scrape_bin, f"http://127.0.0.1:{port}/metrics", str(seconds), "1000", str(warmup)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=60, help="measured window (and tokenscope's scrapes)")
    ap.add_argument("--warmup", type=int, default=10, help="seconds before each Prometheus window")
    ap.add_argument("--engines", type=int, default=6, help="vllm_exposition.py --engines")
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    args = ap.parse_args()
    scrape_bin = os.path.join(args.build, "benchmarks/exposition_scrape")
    if not os.path.exists(scrape_bin):
        sys.exit(f"{scrape_bin} missing: scripts/build.sh release exposition_scrape")
    if not shutil.which("prometheus"):
        sys.exit("prometheus missing: apt-get install -y prometheus (scripts/setup.sh)")
    gen = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks/vllm_exposition.py"),
                          "--engines", str(args.engines)], check=True, capture_output=True)
    body = gen.stdout
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    short_version = version.split()[2] if len(version.split()) > 2 else version
    print(f"page: {gen.stderr.decode().strip()}; {version}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; "
          f"{args.rounds} rounds of {args.seconds} s windows, 1 s scrape interval")
    page = Page(body)
    rows = []
    with tempfile.TemporaryDirectory(prefix="exposition_bench.") as workdir:
        try:
            for r in range(1, args.rounds + 1):
                idle_ticks, _ = prometheus_ticks(workdir, None, args.warmup, args.seconds, page)
                busy_ticks, scrapes = prometheus_ticks(workdir, page.port, args.warmup, args.seconds, page)
                ts = tokenscope_scrapes(scrape_bin, page.port, args.warmup, args.seconds)
                if ts["failed"] or ts["rejected"] or not scrapes:
                    sys.exit(f"round {r}: failed scrapes: tokenscope {ts}, prometheus {scrapes} scrapes")
                prom_ms = (busy_ticks - idle_ticks) / TICKS_PER_S * 1e3 / scrapes
                ts_stat_ms = ts["stat_ticks"] / TICKS_PER_S * 1e3 / ts["scrapes"]
                row = {"round": r, "load": os.getloadavg()[0], "prom_idle_ticks": idle_ticks,
                       "prom_busy_ticks": busy_ticks, "prom_scrapes": scrapes, "prom_ms": prom_ms,
                       "ts_ms": ts["cpu_ms_per_scrape"], "ts_stat_ms": ts_stat_ms, "ts_scrapes": ts["scrapes"],
                       "ts_fetch_ms": ts["fetch_ms_per_scrape"], "ts_parse_ms": ts["parse_ms_per_scrape"],
                       "series": ts["series"]}
                rows.append(row)
                print(f"round {r}: prometheus {busy_ticks} ticks scraping ({scrapes} scrapes) - {idle_ticks} idle "
                      f"= {prom_ms:.2f} ms/scrape; tokenscope {ts['cpu_ms_per_scrape']:.3f} ms/scrape (getrusage; fetch "
                      f"{ts['fetch_ms_per_scrape']:.3f}, parse + flatten {ts['parse_ms_per_scrape']:.3f}), "
                      f"{ts_stat_ms:.2f} ms/scrape (/proc/self/stat, {ts['stat_ticks']} ticks), "
                      f"{ts['series']} series; load {row['load']:.2f}", flush=True)
        finally:
            page.close()

    def med(key):
        return statistics.median(x[key] for x in rows)

    def spread(key, fmt):
        return f"{fmt.format(min(x[key] for x in rows))}–{fmt.format(max(x[key] for x in rows))}"

    prom, ts, ts_stat = med("prom_ms"), med("ts_ms"), med("ts_stat_ms")
    print()
    print(f"Medians of {len(rows)} rounds, {rows[0]['series']} series, {len(body)} bytes per scrape:")
    print()
    print("| scraper (one scrape every 1 s) | CPU per scrape | range | % of one core |")
    print("|---|---:|---:|---:|")
    print(f"| Prometheus {short_version}: scrape, parse, TSDB append (/proc/PID/stat, minus idle) "
          f"| {prom:.2f} ms | {spread('prom_ms', '{:.2f}')} | {prom / 10:.2f} % |")
    print(f"| tokenscope: net::fetch + parse_exposition + flatten, all of a scrape (getrusage) "
          f"| {ts:.3f} ms | {spread('ts_ms', '{:.3f}')} | {ts / 10:.3f} % |")
    print(f"| tokenscope, same (/proc/self/stat, 10 ms ticks) "
          f"| {ts_stat:.2f} ms | {spread('ts_stat_ms', '{:.2f}')} | {ts_stat / 10:.2f} % |")
    fetch, parse = med("ts_fetch_ms"), med("ts_parse_ms")
    print(f"| tokenscope, of which net::fetch (connect, GET, read the page) "
          f"| {fetch:.3f} ms | {spread('ts_fetch_ms', '{:.3f}')} | {fetch / 10:.3f} % |")
    print(f"| tokenscope, of which parse_exposition + flatten (moving) "
          f"| {parse:.3f} ms | {spread('ts_parse_ms', '{:.3f}')} | {parse / 10:.3f} % |")
    print()
    print(f"Prometheus / tokenscope (getrusage): {prom / ts:.2f}x; per round: "
          + ", ".join(f"{x['prom_ms'] / x['ts_ms']:.2f}x" for x in rows))


if __name__ == "__main__":
    main()
