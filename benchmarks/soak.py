#!/usr/bin/env python3
"""Soak: a long run at a moderate rate against `tokenscope serve`, with the
memory, descriptors and threads of both processes sampled every 10 s.

Starts `tokenscope serve` (2 I/O threads, a fixed 2 ms step: a steady
server) and `tokenscope bench` against it (open loop, Poisson, --rate req/s
for --minutes, 2 client threads), samples /proc of both every --every
seconds, and prints the samples and, per process and quantity, the first and
last value, the range and the least-squares slope over the run after its
first 10% (per minute, and for bench per thousand finished requests: bench
keeps every request's latencies for exact percentiles, so its memory grows
with the requests by design). Exits 1 when either process died or bench's
run did not end with every request ok.

Usage: benchmarks/soak.py [--minutes 30] [--rate 20] [--every 10] [--out DIR]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build/release/src/cli/tokenscope")


def proc_sample(pid):
    try:
        status = open(f"/proc/{pid}/status").read()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    vals = {}
    for line in status.splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "Threads"):
            vals[k] = int(v.split()[0])
    return {"rss_kb": vals.get("VmRSS", 0), "fds": fds, "threads": vals.get("Threads", 0)}


def slope(xs, ys):
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--out", help="keep the run directory and samples.json here")
    a = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        subprocess.run(["bash", "scripts/build.sh", "release", "tokenscope"], cwd=ROOT, check=True)
    work = a.out or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    port_file = os.path.join(work, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    serve = subprocess.Popen([BIN, "serve", "--port", "0", "--port-file", port_file, "--threads", "2",
                              "--fixed-step-ms", "2"], stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(work, "serve.err"), "w"))
    end = time.time() + 30
    while not os.path.exists(port_file) and time.time() < end:
        time.sleep(0.05)
    port = int(open(port_file).read())
    seconds = int(a.minutes * 60)
    bench = subprocess.Popen([BIN, "bench", "--target", f"http://127.0.0.1:{port}", "--rate", str(a.rate),
                              "--duration-s", str(seconds), "--input-len", "lognormal:512:0.6:max=2000",
                              "--output-len", "lognormal:128:0.6:max=512", "--client-threads", "2",
                              "--progress", "none", "--quiet", "--overwrite", "--out", os.path.join(work, "run")],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "bench.err"), "w"))
    t0 = time.time()
    samples = []
    while bench.poll() is None:
        s = {"t_s": round(time.time() - t0, 1), "serve": proc_sample(serve.pid), "bench": proc_sample(bench.pid)}
        try:
            with open(os.path.join(work, "run", "requests.jsonl"), "rb") as f:
                s["requests_done"] = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:
            s["requests_done"] = 0
        if s["serve"] and s["bench"]:
            samples.append(s)
        time.sleep(a.every)
    bench_rc = bench.wait()
    serve_alive = serve.poll() is None
    serve.send_signal(signal.SIGTERM)
    serve_rc = serve.wait(30)
    json.dump(samples, open(os.path.join(work, "samples.json"), "w"), indent=1)
    summary = json.load(open(os.path.join(work, "run", "run.json")))["summary"]

    print(f"soak: {a.minutes:g} min at {a.rate:g} req/s against tokenscope serve (2 threads, 2 ms steps), "
          f"{len(samples)} samples every {a.every:g} s")
    print(f"bench exit {bench_rc}; serve alive until the end: {serve_alive} (exit {serve_rc} on SIGTERM); "
          f"requests {summary['requests_total']}, ok {summary['requests_by_outcome'].get('ok', 0)}, "
          f"failed {summary['requests_failed']}\n")
    print("| process | quantity | first | last | min | max | slope per minute (after the first 10%) | "
          "per 1,000 requests |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    steady = [s for s in samples if s["t_s"] >= 0.1 * seconds] or samples
    for proc in ("serve", "bench"):
        for q, unit in (("rss_kb", "kB"), ("fds", ""), ("threads", "")):
            ys = [s[proc][q] for s in steady]
            xs = [s["t_s"] / 60 for s in steady]
            per_min = slope(xs, ys)
            per_k = slope([s["requests_done"] / 1000 for s in steady], ys)
            allv = [s[proc][q] for s in samples]
            print(f"| {proc} | {q} | {allv[0]} | {allv[-1]} | {min(allv)} | {max(allv)} | {per_min:+.1f} {unit} | "
                  f"{per_k:+.1f} {unit} |")
    ok = bench_rc == 0 and serve_alive and summary["requests_failed"] == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
