#!/usr/bin/env python3
"""The fault matrix: every injected fault is counted exactly by the client.

For each cell -- streaming or not x keep-alive or not (the client sends
`Connection: close`) x two request rates -- runs `tokenscope bench` against a
server that injects every fault kind at once, each at --share of the
requests, and matches each injected fault, by the X-Request-Id the client
sent, to the outcome of that request's record:

  http_5xx -> http_error (500)   http_429 -> http_error (429)
  reset -> connect_error          stall -> timeout
  malformed -> protocol_error     slow_first_byte -> ok
  no fault -> ok

Two servers:
  serve   `tokenscope serve --faults ... --trace-emissions` (its trace names
          the request of each fault)
  llama   llama.cpp's llama-server (scripts/llama-server.sh, a tiny model from
          scripts/tiny-model.py) behind scripts/fault_proxy.py, which injects
          the same kinds and logs each with the request id

Prints one Markdown table per server: per cell, the requests, for each kind
"injected/as expected", the requests without a fault that ended ok, and the
verdict; exits 1 when any cell is not exact.

Usage: benchmarks/fault_matrix.py [--servers serve,llama] [--requests 300]
                                  [--rates 50,300] [--share 0.04] [--seed 7]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build/release/src/cli/tokenscope")
KINDS = ["http_5xx", "http_429", "reset", "stall", "malformed", "slow_first_byte"]
EXPECTED = {"http_5xx": ("http_error", 500), "http_429": ("http_error", 429), "reset": ("connect_error", None),
            "stall": ("timeout", None), "malformed": ("protocol_error", None), "slow_first_byte": ("ok", 200)}
STALL_MS, SLOW_MS, TIMEOUT_S = 10000, 200, 4


def wait_port_file(path, proc, what):
    end = time.time() + 60
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before listening")
        time.sleep(0.05)
    raise SystemExit(f"{what} did not listen within 60 s")


def wait_http(url, what):
    end = time.time() + 120
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} not ready at {url}")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spec(share):
    return ",".join(f"{k}={share}" + (f"@{STALL_MS}" if k == "stall" else f"@{SLOW_MS}" if k == "slow_first_byte"
                                      else "") for k in KINDS)


def bench(url, work, cell, rate, n, seed, model=None):
    stream, keep = cell
    out = os.path.join(work, f"run-{'s' if stream else 'n'}-{'k' if keep else 'c'}-{rate}")
    args = [BIN, "bench", "--target", url, "--num-requests", str(n), "--rate", str(rate), "--input-len",
            "fixed:16", "--output-len", "fixed:12", "--timeout-s", str(TIMEOUT_S), "--max-error-rate", "1",
            "--prompt-check", "0", "--seed", str(seed), "--quiet", "--overwrite", "--out", out]
    if model:
        args += ["--model", model]
    if not stream:
        args.append("--no-stream")
    if not keep:
        args += ["--header", "Connection: close"]
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench failed ({p.returncode}): {p.stderr}")
    return [json.loads(l) for l in open(os.path.join(out, "requests.jsonl"))]


def match(records, faults):
    """faults: {record id: kind}. Returns per-kind (injected, as expected), ok without fault, total without."""
    by_id = {r["id"]: r for r in records}
    got = {k: [0, 0] for k in KINDS}
    bad = []
    for rid, kind in faults.items():
        got[kind][0] += 1
        r = by_id.get(rid)
        want, status = EXPECTED[kind]
        if r is not None and r["outcome"] == want and (status is None or r.get("http_status") == status):
            got[kind][1] += 1
        else:
            bad.append((rid, kind, r["outcome"] if r else "no record", (r or {}).get("detail", "")))
    clean = [r for r in records if r["id"] not in faults]
    clean_ok = sum(r["outcome"] == "ok" for r in clean)
    for r in clean:
        if r["outcome"] != "ok":
            bad.append((r["id"], "none", r["outcome"], r.get("detail", "")))
    return got, clean_ok, len(clean), bad


def serve_cells(a, work, cells):
    rows = []
    for cell in cells:
        for rate in a.rates:
            d = tempfile.mkdtemp(dir=work)
            trace = os.path.join(d, "emissions.jsonl")
            srv = subprocess.Popen([BIN, "serve", "--port", "0", "--port-file", os.path.join(d, "port"),
                                    "--threads", "2", "--faults", spec(a.share), "--fault-seed", str(a.seed),
                                    "--fixed-step-ms", "1", "--trace-emissions", trace],
                                   stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "serve.err"), "w"))
            try:
                port = wait_port_file(os.path.join(d, "port"), srv, "tokenscope serve")
                url = f"http://127.0.0.1:{port}"
                records = bench(url, d, cell, rate, a.requests, a.seed)
                metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
            finally:
                stop(srv)
            faults = {}
            for line in open(trace):
                e = json.loads(line)
                if "fault" in e:
                    faults[int(e["xrid"])] = e["fault"]
            counted = {}
            for l in metrics.splitlines():
                if l.startswith("tokenscope:faults_injected_total{"):
                    kind = l.split('kind="')[1].split('"')[0]
                    counted[kind] = int(float(l.rsplit(" ", 1)[1]))
            rows.append((cell, rate, records, faults, counted))
    return rows


def llama_cells(a, work, cells):
    server_bin = subprocess.run(["bash", "scripts/llama-server.sh"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
    model = subprocess.run(["/usr/bin/python3", "scripts/tiny-model.py", "--vocab", "spm"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    lport = 18000 + os.getpid() % 1000
    srv = subprocess.Popen([server_bin, "-m", model, "--host", "127.0.0.1", "--port", str(lport), "-np", "4",
                            "-c", "4096", "--metrics", "-t", "1"],
                           stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "llama.err"), "w"))
    try:
        wait_http(f"http://127.0.0.1:{lport}/health", "llama-server")
        for cell in cells:
            for rate in a.rates_llama:
                d = tempfile.mkdtemp(dir=work)
                log = os.path.join(d, "faults.jsonl")
                prx = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts/fault_proxy.py"), "--upstream",
                                        f"127.0.0.1:{lport}", "--log", log, "--seed", str(a.seed), "--rate",
                                        str(a.share), "--stall-ms", str(STALL_MS), "--slow-ms", str(SLOW_MS),
                                        "--port-file", os.path.join(d, "port")],
                                       stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "proxy.err"), "w"))
                try:
                    port = wait_port_file(os.path.join(d, "port"), prx, "fault_proxy.py")
                    records = bench(f"http://127.0.0.1:{port}", d, cell, rate, a.requests_llama, a.seed, "tiny")
                finally:
                    stop(prx)
                faults = {int(json.loads(l)["xrid"]): json.loads(l)["fault"] for l in open(log)}
                counted = {}
                for k in faults.values():
                    counted[k] = counted.get(k, 0) + 1
                rows.append((cell, rate, records, faults, counted))
    finally:
        stop(srv)
    return rows


def table(title, rows):
    print(f"\n{title}\n")
    print("| streaming | keep-alive | req/s | requests | " + " | ".join(KINDS) + " | no fault: ok | exact |")
    print("|---|---|---:|---:|" + "---:|" * len(KINDS) + "---:|---|")
    exact_all = True
    for (stream, keep), rate, records, faults, counted in rows:
        got, clean_ok, clean_n, bad = match(records, faults)
        trace_agrees = all(counted.get(k, 0) == got[k][0] for k in KINDS)
        exact = not bad and trace_agrees and len(records) == len({r["id"] for r in records})
        exact_all &= exact
        cells = " | ".join(f"{g[1]}/{g[0]}" for g in (got[k] for k in KINDS))
        print(f"| {'yes' if stream else 'no'} | {'yes' if keep else 'no'} | {rate} | {len(records)} | {cells} | "
              f"{clean_ok}/{clean_n} | {'yes' if exact else 'NO'} |")
        for b in bad[:5]:
            print(f"|  | mismatch: request {b[0]}, fault {b[1]}, outcome {b[2]}: {b[3][:80]} |", file=sys.stderr)
    return exact_all


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="serve,llama")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--requests-llama", type=int, default=150)
    ap.add_argument("--rates", default="50,300")
    ap.add_argument("--rates-llama", default="10,50")
    ap.add_argument("--share", type=float, default=0.04, help="share of the requests per fault kind")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    a.rates = [int(x) for x in a.rates.split(",")]
    a.rates_llama = [int(x) for x in a.rates_llama.split(",")]
    if not os.access(BIN, os.X_OK):
        subprocess.run(["bash", "scripts/build.sh", "release", "tokenscope"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    cells = [(s, k) for s in (True, False) for k in (True, False)]
    ok = True
    with tempfile.TemporaryDirectory() as work:
        print(f"fault matrix: each kind at {a.share:g} of the requests, stall {STALL_MS} ms past a "
              f"{TIMEOUT_S} s timeout, slow first byte {SLOW_MS} ms; cells: injected faults ended as expected "
              f"/ injected")
        if "serve" in a.servers:
            ok &= table(f"`tokenscope serve --faults` ({a.requests} requests a cell)", serve_cells(a, work, cells))
        if "llama" in a.servers:
            ok &= table(f"llama-server behind scripts/fault_proxy.py ({a.requests_llama} requests a cell)",
                        llama_cells(a, work, cells))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
