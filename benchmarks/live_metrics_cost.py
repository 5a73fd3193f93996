#!/usr/bin/env python3
"""What bench --metrics-port costs the client (docs/performance.md, "bench
--metrics-port: the cost of being scraped").

Each round runs the same open-loop bench against the in-process simulator
twice, in alternating order:
  * peer: no --metrics-port; the scraper still runs, against a closed port
    (each try is refused), so that both runs share the machine with it;
  * live: --metrics-port 0, scraped every --every-ms over one kept-alive
    connection, as Prometheus does (its usual interval is 1-60 s: this is a
    hundred times or more as often).
It prints, per run, the send lag (median and p99 of run.json's send_lag_ms),
the process CPU seconds (run.json client.process_cpu_s, the in-process
simulator included), the completed requests, and for the live runs the
scrapes and their latency (median, p99) and size; then the medians over
the rounds.

  python3 benchmarks/live_metrics_cost.py [--rounds 3] [--rate 100] [--seconds 8] [--every-ms 10]
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build/release/src/cli/tokenscope")


def scraper(port_of, every_s, stop, out):
    """Scrapes GET /metrics every every_s until stop is set; out gets
    (latency s, bytes) per answered scrape and a count of failed tries."""
    conn = None
    while not stop.is_set():
        start = time.monotonic()
        port = port_of()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            body = conn.getresponse().read()
            out["scrapes"].append((time.monotonic() - start, len(body)))
        except OSError:
            out["failed"] += 1
            if conn is not None:
                conn.close()
            conn = None
        except http.client.HTTPException:
            out["failed"] += 1
            conn.close()
            conn = None
        left = every_s - (time.monotonic() - start)
        if left > 0:
            stop.wait(left)
    if conn is not None:
        conn.close()


def closed_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: every connect is refused
    return port


def run(live, args, work, tag):
    out_dir = os.path.join(work, tag)
    cmd = [BIN, "bench", "--rate", str(args.rate), "--duration-s", str(args.seconds), "--input-len",
           "fixed:64", "--output-len", "fixed:32", "--progress", "none", "--out", out_dir]
    if live:
        cmd += ["--metrics-port", "0", "--metrics-linger-s", "0"]
    err_path = os.path.join(work, tag + ".err")
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    port = {"value": closed_port()}
    if live:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", open(err_path).read())
            if m:
                port["value"] = int(m.group(1))
                break
            if proc.poll() is not None:
                break
            time.sleep(0.01)
    stop = threading.Event()
    got = {"scrapes": [], "failed": 0}
    t = threading.Thread(target=scraper, args=(lambda: port["value"], args.every_ms / 1e3, stop, got))
    t.start()
    code = proc.wait(timeout=args.seconds + 120)
    stop.set()
    t.join()
    if code != 0:
        sys.exit(f"{tag}: bench exited {code}: {open(err_path).read()}")
    r = json.load(open(os.path.join(out_dir, "run.json")))
    s = r["summary"]
    lat = sorted(x[0] for x in got["scrapes"])
    return {
        "lag_p50_ms": s["send_lag_ms"]["p50"],
        "lag_p99_ms": s["send_lag_ms"]["p99"],
        "cpu_s": r["client"]["process_cpu_s"],
        "completed": s["requests_completed"],
        "scrapes": len(lat),
        "scrape_p50_ms": statistics.median(lat) * 1e3 if lat else None,
        "scrape_p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else None,
        "bytes": got["scrapes"][-1][1] if got["scrapes"] else None,
        "failed_tries": got["failed"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--every-ms", type=float, default=10)
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} is missing: JOBS=1 bash scripts/build.sh release tokenscope")
    print(f"load average {os.getloadavg()[0]:.2f}; {args.rounds} rounds, {args.rate} req/s for "
          f"{args.seconds} s, scrape every {args.every_ms} ms")
    results = {"peer": [], "live": []}
    with tempfile.TemporaryDirectory() as work:
        for i in range(args.rounds):
            order = ["peer", "live"] if i % 2 == 0 else ["live", "peer"]
            for tag in order:
                r = run(tag == "live", args, work, f"{tag}-{i}")
                results[tag].append(r)
                print(f"round {i + 1} {tag}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                          for k, v in r.items()), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| | peer (no endpoint) | live (scraped) | live / peer |")
    print("|---|---:|---:|---:|")
    for key in ["lag_p50_ms", "lag_p99_ms", "cpu_s", "completed"]:
        a = statistics.median(r[key] for r in results["peer"])
        b = statistics.median(r[key] for r in results["live"])
        print(f"| {key} (median of {args.rounds}) | {a:.3f} | {b:.3f} | {b / a if a else float('nan'):.2f} |")
    for key in ["scrapes", "scrape_p50_ms", "scrape_p99_ms", "bytes"]:
        print(f"| {key} (median) | | {statistics.median(r[key] for r in results['live']):.3f} | |")


if __name__ == "__main__":
    main()
