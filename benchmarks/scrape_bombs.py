#!/usr/bin/env python3
"""A target's /metrics as another team's hostile server (issue 23, scrape
bombs): bench against the in-process simulator while scraping a page of
1,000,000 tiny series, a DCGM-looking page of 400,000 series and a
TGI-shaped histogram of 560 label sets x 560 distinct bounds, then the
report of each run. Prints, for each binary given, the client's peak memory
and CPU, the reads it made, the overruns run.json counts, samples.jsonl's
size, and the report's peak memory, time and page size.

  python3 benchmarks/scrape_bombs.py [--seconds 15] BIN [BIN ...]

Each binary runs the same pages, one after the other (these machines are
noisy: compare binaries in one run). Pages are served from loopback by this
script (http.server, one thread per scrape).
"""
import argparse
import http.server
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def tiny_page():
    return "".join(f"x_{i} 1\n" for i in range(1_000_000))


def dcgm_page():
    names = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK"]
    out = []
    for n in names:
        out.append(f"# TYPE {n} gauge\n")
        out.extend(f'{n}{{gpu="{g}"}} {g % 97}\n' for g in range(100_000))
    return "".join(out)


def tgi_page():
    out = ["# TYPE tgi_request_duration histogram\n"]
    for s in range(560):
        out.extend(f'tgi_request_duration_bucket{{r="{s}",le="{s * 560 + b + 1}"}} {b}\n' for b in range(560))
        out.append(f'tgi_request_duration_bucket{{r="{s}",le="+Inf"}} 560\n')
    return "".join(out)


class Pages(http.server.BaseHTTPRequestHandler):
    pages = {}

    def do_GET(self):
        body = self.pages.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def one(argv):
    """measured() in a fresh interpreter, so that ru_maxrss is this child's alone."""
    code = (
        "import json,resource,subprocess,sys,time\n"
        "t0=time.monotonic()\n"
        "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE)\n"
        "w=time.monotonic()-t0\n"
        "r=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps([p.returncode,r.ru_maxrss/1024.0,r.ru_utime+r.ru_stime,w,p.stderr.decode(errors='replace')[-2000:]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code] + argv, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("bins", nargs="+")
    a = ap.parse_args()
    Pages.pages = {"/tiny": tiny_page().encode(), "/dcgm": dcgm_page().encode(), "/tgi": tgi_page().encode()}
    for k, v in Pages.pages.items():
        print(f"page {k}: {len(v) / 1e6:.1f} MB", flush=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    work = tempfile.mkdtemp(prefix="scrape_bombs_")
    rate = 4.0
    n = int(a.seconds * rate)
    print("| binary | page | bench exit | bench peak MiB | bench CPU s | reads | overruns | samples.jsonl MB | "
          "report exit | report peak MiB | report s | page MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        for b in a.bins:
            for page, flag in (("tiny", "--scrape"), ("dcgm", "--gpu-sampler"), ("tgi", "--scrape")):
                out = os.path.join(work, f"{os.path.basename(b)}-{page}")
                shutil.rmtree(out, ignore_errors=True)
                argv = [b, "bench", "--num-requests", str(n), "--rate", str(rate), "--output-len", "fixed:8",
                        "--scrape-interval", "1", flag, base + "/" + page, "--no-gpu", "--no-host",
                        "--no-history", "--progress", "none", "--out", out]
                code, rss, cpu, wall, err = one(argv)
                reads = overruns = "-"
                try:
                    run = json.load(open(os.path.join(out, "run.json")))
                    src = [s for s in run["observe"]["sources"] if s["source"] in ("server", "gpu")][0]
                    reads, overruns = src["reads"], src["overruns"]
                except Exception:
                    pass
                samples = os.path.join(out, "samples.jsonl")
                size = os.path.getsize(samples) / 1e6 if os.path.exists(samples) else 0
                rcode, rrss, _, rwall, rerr = one([b, "report", out, "--no-cache"])
                html = os.path.join(out, "report.html")
                psize = os.path.getsize(html) / 1e6 if os.path.exists(html) else 0
                print(f"| {b} | {page} | {code} | {rss:.0f} | {cpu:.1f} | {reads} | {overruns} | {size:.1f} | "
                      f"{rcode} | {rrss:.0f} | {rwall:.1f} | {psize:.1f} |", flush=True)
                if code != 0:
                    print("  bench stderr: " + err[-300:].replace("\n", " "), flush=True)
                if rcode != 0:
                    print("  report stderr: " + rerr[-300:].replace("\n", " "), flush=True)
    finally:
        server.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
