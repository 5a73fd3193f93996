#!/usr/bin/env python3
"""Client benchmarks of `tokenscope bench` (docs/performance.md), each beside
its peers in the same run, against the same servers, on the same machine.
Servers are pinned to core 0, every client (tokenscope, wrk, the Python peer)
to core 1, one client at a time.

Sections (--only NAME,...; all by default), each repeated --rounds times,
the rounds interleaved (round 1 of every section, then round 2, ...) so that
the drift of a noisy machine hits every section alike:

  events  SSE output events per client CPU-second, closed loop, 64 streams in
          flight, against the canned-SSE nginx of ../shared/bench/canned-sse
          (131-event chat streams of which 128 carry text). tokenscope's events
          are counted from requests.jsonl (the length of every record's
          event_offsets_ns), its CPU is run.json's client.process_cpu_s. Beside
          it: the Python asyncio/aiohttp peer (benchmarks/peers/py_client.py)
          and wrk's ceiling (streams per wrk CPU-second, wrk's CPU from
          /usr/bin/time).
  rate    the highest open-loop (Poisson) rate of non-streaming requests
          (POST /v1/json on the canned nginx) held with one client thread: a
          rate is held when every planned request was sent and completed, none
          failed and the p99 send lag is under 1 ms; sustained when all were
          sent and ok at 95% of the offered rate or more, whatever the lag.
          Rates are tried in ascending order until two in a row are not
          sustained. Beside it: wrk's closed-loop ceiling on the same URL
          (wrk -t1 -c64 post.lua), the Python peer searched the same way,
          and the floor: benchmarks/open_loop_floor.cpp, the least an open-
          loop client can do per request (raw epoll, one timerfd, the same
          request bytes sent as prepared, the response found by its length
          and not read), searched the same way: the rate any client could
          hold on this core. CPU per request is printed per rate: each
          client's whole process (/usr/bin/time: start-up, schedule, prompts,
          the writer and the summary included) over the requests completed.
          With --split, tokenscope is searched a second time with its client
          thread alone on core 1 and the rest of the process (the record
          writer) on core 0 beside the server: `--client-cpus 1`, the
          process allowed both cores. Its CPU is still the whole process's.
  prompts the rate search again with tokenscope's default prompt lengths
          (lognormal, mean 1,155 tokens) instead of 8 tokens, beside the
          floor sending a body of the mean size of tokenscope's (measured
          first by a capture server): what the prompt bytes cost. With
          --split, tokenscope is searched again here too, its client
          thread alone on core 1.
  stream  the same search with 4-token streams against `tokenscope serve
          --fixed-step-ms 0 --threads 1` (a zero-cost engine on core 0),
          beside the Python peer.
  closed  closed-loop non-streaming requests/s, 64 connections, tokenscope
          beside wrk, against the zero-cost server and the canned nginx.
  tls     the events section and the closed loop against nginx over TLS:
          the same canned nginx also listening with TLS 1.3 and a
          self-signed certificate (openssl, RSA 2048, made per run);
          tokenscope (--insecure), the Python peer (--insecure) and wrk;
          and the rate search with tokenscope over TLS.
  media   client CPU per request for multimodal chat bodies beside text
          bodies: open loop (Poisson, 500 req/s), --media-requests non-streaming
          chat requests to the canned nginx (/v1/json) from workload files of
          one class each: text (64 prompt tokens), image (the same and one
          1,024 x 1,024 PNG, about 200 kB of base64) and audio (the same and
          10 s of 16 kHz WAV, 427 kB of base64); CPU from run.json's
          client.process_cpu_s over the requests completed.

Every round starts by measuring the client core itself: a 3 s busy loop at
the clients' priority counts the gaps over 0.5 ms in which it did not run
(other work on a shared machine, kernel threads, interrupts): a floor under
any send lag. Servers and clients all run at --nice (default -20, where
permitted), so that other builds on a shared machine do not take their core
in the middle of a schedule.

Prints every measurement as it happens, then per section the median, the
spread (min-max) and the runs. --out DIR keeps results.json there.

usage: python3 benchmarks/client_bench.py [--rounds 3] [--seconds 3] [--only events,rate,prompts,stream,closed,tls,media] [--split]
"""
import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TOKENSCOPE_BIN", os.path.join(ROOT, "build/release/src/cli/tokenscope"))  # env: another build
FLOOR = os.path.join(ROOT, "build/release/benchmarks/open_loop_floor")
CANNED = os.path.join(ROOT, "../shared/bench/canned-sse")
DEFAULT_INPUT_LEN = "lognormal:1155:0.9:max=7000"  # bench's default --input-len (src/workload/workload_spec.h)
PY = "/usr/bin/python3"  # Debian's, with python3-aiohttp
NGINX = None  # http://127.0.0.1:PORT of the canned nginx: its 8090 moved to a free port (two runs can coexist)
SERVER_CORE, CLIENT_CORE = "0", "1"
LAG_LIMIT_MS = 1.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print(msg, flush=True)


def loadavg():
    return os.getloadavg()[0]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


NICE = []  # ["nice", "-n", "-20"] when --nice is allowed here: every server and client alike


def timed(cmd, cores=None):
    """Runs cmd under /usr/bin/time on the client core (or on `cores`): (CompletedProcess, cpu_s, wall_s)."""
    tf = tempfile.NamedTemporaryFile(delete=False)
    tf.close()
    p = run(["/usr/bin/time", "-f", "%U %S %e", "-o", tf.name] + NICE + ["taskset", "-c", cores or CLIENT_CORE] + cmd)
    u, s, e = open(tf.name).read().split()[-3:]
    os.unlink(tf.name)
    return p, float(u) + float(s), float(e)


class Bench:
    def __init__(self, work):
        self.work = work
        self.n = 0

    def tokenscope(self, args, split=False):
        """One `tokenscope bench` run; counts what arrived from requests.jsonl. split: the client thread alone on
        the client core, the rest of the process on the server core (--client-cpus)."""
        self.n += 1
        out = os.path.join(self.work, f"run{self.n}")
        pin = ["--client-cpus", CLIENT_CORE] if split else []
        p, time_cpu, wall = timed([BIN, "bench", "--progress", "none", "--quiet", "--max-error-rate", "1",
                                   "--client-threads", "1", "--out", out] + pin + args,
                                  cores=f"{SERVER_CORE},{CLIENT_CORE}" if split else None)
        if not os.path.exists(os.path.join(out, "run.json")):
            raise SystemExit(f"tokenscope bench failed (exit {p.returncode}): {p.stderr.strip()}\nargs: {args}")
        run_json = json.load(open(os.path.join(out, "run.json")))
        s, c = run_json["summary"], run_json["client"]
        records = events = tokens = ok = 0
        outcomes = {}
        with open(os.path.join(out, "requests.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                records += 1
                outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
                if r["outcome"] != "ok":
                    continue
                ok += 1
                n = len(r.get("event_offsets_ns", ()))
                events += n
                tokens += sum(r["event_tokens"]) if "event_tokens" in r else n
        shutil.rmtree(out)
        planned = run_json["settings"]["effective"]["load"]["planned_requests"]  # null in the closed loop
        return {"exit": p.returncode, "planned": planned if planned is not None else records,
                "records": records, "ok": ok, "outcomes": outcomes, "completed": s["requests_completed"],
                "failed": s["requests_failed"], "not_sent": c.get("requests_not_sent", 0),
                "rps": s["request_throughput_rps"], "lag_p50_ms": s["send_lag_ms"]["p50"],
                "lag_p99_ms": s["send_lag_ms"]["p99"], "cpu_s": c["process_cpu_s"], "time_cpu_s": time_cpu,
                "wall_s": wall, "output_events": events, "output_tokens": tokens,
                "writer_waits": c.get("records_waited_for_writer")}

    @staticmethod
    def wrk(url, seconds, script, conns=64):
        p, cpu, wall = timed(["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "-s", script, url])
        req = rps = errors = None
        for line in p.stdout.splitlines():
            w = line.split()
            if "requests in" in line:
                req = int(w[0])
            elif line.startswith("Requests/sec:"):
                rps = float(w[1])
            elif "Non-2xx" in line or "Socket errors" in line:
                errors = line.strip()
        if req is None or rps is None:
            raise SystemExit(f"wrk failed: {p.stdout}{p.stderr}")
        return {"requests": req, "rps": rps, "cpu_s": cpu, "wall_s": wall, "errors": errors}

    @staticmethod
    def floor(args):
        """One run of the open-loop floor (benchmarks/open_loop_floor.cpp)."""
        p, cpu, _ = timed([FLOOR] + args)
        if not p.stdout.strip():
            raise SystemExit(f"open_loop_floor failed (exit {p.returncode}): {p.stderr}")
        f = json.loads(p.stdout)
        f["time_cpu_s"] = cpu  # the whole process, as for tokenscope and the Python peer
        f["cpu_us_per_request"] = 1e6 * cpu / max(1, f["completed"])
        return f

    @staticmethod
    def python(args):
        p, cpu, _ = timed([PY, os.path.join(ROOT, "benchmarks/peers/py_client.py")] + args)
        if p.returncode != 0:
            raise SystemExit(f"py_client failed: {p.stderr}")
        r = json.loads(p.stdout)
        r["time_cpu_s"] = cpu
        return r


STALL_PROBE = r"""
import json, time
gaps, t0 = [], time.perf_counter()
last, c0 = t0, time.process_time()
while last - t0 < 3:
    t = time.perf_counter()
    if t - last > 0.0005:
        gaps.append(t - last)
    last = t
print(json.dumps({"wall_s": last - t0, "cpu_s": time.process_time() - c0, "gaps": len(gaps),
                  "gap_ms_total": sum(gaps) * 1e3, "gap_ms_max": max(gaps, default=0) * 1e3}))
"""


def mean_request_body(argv):
    """The mean Content-Length of the POST /v1/json requests `tokenscope bench argv` sends, read by a capture
    server that answers them with a small JSON body (and every other path with 404)."""
    import http.server
    import threading
    sizes = []
    reply = json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()

    class Capture(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            n = int(self.headers.get("Content-Length", 0))
            self.rfile.read(n)
            ok = self.path == "/v1/json"
            if ok:
                sizes.append(n)
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(reply)

        do_GET = do_POST

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    out = tempfile.mkdtemp(prefix="capture.")
    try:
        p = run([BIN, "bench", "--progress", "none", "--quiet", "--max-error-rate", "1", "--out", out,
                 "--target", f"http://127.0.0.1:{srv.server_address[1]}"] + argv)
        if not sizes:
            raise SystemExit(f"the capture server saw no request: {p.stderr}")
    finally:
        srv.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    return statistics.mean(sizes), len(sizes)


def stalls():
    """What the machine itself takes from the client core: a 3 s busy loop at the clients' priority on their
    core, counting the gaps over 0.5 ms in which it did not run (other tasks, kernel threads, interrupts)."""
    p, _, _ = timed([sys.executable, "-c", STALL_PROBE])
    return json.loads(p.stdout)


def held_ts(r):
    return (r["ok"] == r["planned"] and r["failed"] == 0 and r["not_sent"] == 0
            and r["lag_p99_ms"] is not None and r["lag_p99_ms"] < LAG_LIMIT_MS)


def held_py(r, n):
    return (r["completed"] == n and r["errors"] == 0 and r["send_lag_p99_ms"] is not None
            and r["send_lag_p99_ms"] < LAG_LIMIT_MS)


def sustained_ts(r, rate):
    """Every planned request sent and ok, at 95% of the offered rate or more, whatever the send lag."""
    return r["ok"] == r["planned"] and r["not_sent"] == 0 and r["rps"] >= 0.95 * rate


def sustained_py(r, n, rate):
    return r["completed"] == n and r["errors"] == 0 and r["achieved_rps"] >= 0.95 * rate


def search(rates, measure):
    """Tries rates in ascending order until two in a row are not sustained. Returns (the highest rate held,
    the highest sustained, 0 when none, the trials)."""
    best = best_sustained = misses = 0
    trials = []
    for rate in rates:
        held, sustained, line = measure(rate)
        trials.append(line)
        if held:
            best = rate
        if sustained:
            best_sustained, misses = rate, 0
        else:
            misses += 1
            if misses == 2:
                break
    return best, best_sustained, trials


def per_rate_table(rounds, key, held_key="held"):
    """Markdown: per rate, over the rounds that ran it, the medians of achieved rate and send lag."""
    rows = {}
    for r in rounds:
        for t in r[key]:
            rows.setdefault(t["rate"], []).append(t)
    out = ["| offered req/s | rounds | held | achieved req/s (median) | send lag p50 ms (median) | "
           "p99 ms (median) | p99 runs ms | CPU us/request (median) |", "|---:|---:|---:|---:|---:|---:|---|---:|"]
    for rate in sorted(rows):
        ts = rows[rate]
        ach = statistics.median(t.get("rps", t.get("achieved_rps")) for t in ts)
        p50 = statistics.median(t.get("lag_p50_ms", t.get("send_lag_p50_ms")) for t in ts)
        p99s = [t.get("lag_p99_ms", t.get("send_lag_p99_ms")) for t in ts]
        cpu = [t["cpu_us_per_request"] for t in ts if "cpu_us_per_request" in t]
        out.append(f"| {rate:,} | {len(ts)} | {sum(t[held_key] for t in ts)} | {ach:,.0f} | {p50:.3f} | "
                   f"{statistics.median(p99s):.3f} | {', '.join(f'{x:.3f}' for x in p99s)} | "
                   f"{statistics.median(cpu) if cpu else float('nan'):.1f} |")
    return "\n".join(out)


def verdict(held, sustained):
    return "held" if held else ("sustained, lag over" if sustained else "NOT sustained")


def spread(values):
    v = [x for x in values if x is not None]
    if not v:
        return "n/a"
    return f"median {fmt(statistics.median(v))} (min {fmt(min(v))}, max {fmt(max(v))}; runs: {', '.join(fmt(x) for x in v)})"


def fmt(x):
    if isinstance(x, int) or (isinstance(x, float) and x >= 100):
        return f"{x:,.0f}"
    return f"{x:.3f}"


def main():
    global NGINX
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=3, help="schedule length of each open-loop run, wrk's -d")
    ap.add_argument("--only", default="events,rate,prompts,stream,closed,tls,media")
    ap.add_argument("--media-requests", type=int, default=2000, help="section media: requests per body kind")
    ap.add_argument("--streams", type=int, default=20000, help="section events: tokenscope's streams per round")
    ap.add_argument("--py-streams", type=int, default=2000, help="section events: the Python peer's streams")
    ap.add_argument("--rates", default=",".join(str(r) for r in [1000, 2000] + list(range(5000, 150001, 5000))),
                    help="section rate: rates to try, req/s")
    ap.add_argument("--py-rates", default="250,500,1000,2000,5000,10000", help="the Python peer's rates, req/s")
    ap.add_argument("--stream-rates", default="1000,2000,4000,6000,8000,10000,12000,15000,20000")
    ap.add_argument("--nice", type=int, default=-20,
                    help="priority of every server and client (the same for all), so that other work on a shared "
                         "machine does not take their cores mid-schedule; ignored where not permitted")
    ap.add_argument("--out", help="keep results.json here")
    ap.add_argument("--split", action="store_true",
                    help="sections rate and prompts: search tokenscope again with --client-cpus (its writer on the server core)")
    a = ap.parse_args()
    sections = a.only.split(",")
    if a.rounds < 3:
        log("note: fewer than 3 rounds: the medians below are over fewer runs than the docs use")
    if not os.access(BIN, os.X_OK):
        subprocess.run(["bash", "scripts/build.sh", "release", "tokenscope"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    if not os.access(FLOOR, os.X_OK) and ("rate" in sections or "prompts" in sections):
        subprocess.run(["cmake", "--build", os.path.join(ROOT, "build/release"), "--target", "open_loop_floor"],
                       check=True, stdout=subprocess.DEVNULL)
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    if a.nice and run(["nice", "-n", str(a.nice), "true"]).stderr == "":
        NICE[:] = ["nice", "-n", str(a.nice)]
    work = tempfile.mkdtemp(prefix="client_bench.")
    os.chmod(work, 0o755)
    procs = []
    nginx_pid = os.path.join(work, "canned/logs/nginx.pid")
    try:
        # The canned-SSE nginx, set up as its README says, on the server core.
        canned = os.path.join(work, "canned")
        shutil.copytree(CANNED, canned)
        for d in ("logs", "tmp", "www/v1/chat", "www/compat/v1/chat"):
            os.makedirs(os.path.join(canned, d), exist_ok=True)
        subprocess.run([sys.executable, "make_bodies.py", "128"], cwd=canned, check=True, stdout=subprocess.DEVNULL)
        conf = os.path.join(canned, "nginx.conf")
        nginx_port = free_port()
        NGINX = f"http://127.0.0.1:{nginx_port}"
        text = open(conf).read().replace("$CANNED_DIR", canned).replace("127.0.0.1:8090", f"127.0.0.1:{nginx_port}")
        tls_url = None
        if "tls" in sections:  # the same server block, also over TLS with a self-signed certificate
            crt, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                            "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
            tls_port = free_port()
            listen = f"listen 127.0.0.1:{nginx_port} backlog=4096;"
            assert listen in text, "the canned nginx.conf's listen line changed"
            text = text.replace(listen, listen + f"\n        listen 127.0.0.1:{tls_port} ssl backlog=4096;"
                                f"\n        ssl_certificate {crt};\n        ssl_certificate_key {key};"
                                f"\n        ssl_protocols TLSv1.3;")
            tls_url = f"https://127.0.0.1:{tls_port}"
        open(conf, "w").write(text)
        subprocess.run(NICE + ["taskset", "-c", SERVER_CORE, "nginx", "-c", conf, "-p", canned + "/"], check=True)
        port = None
        if "stream" in sections or "closed" in sections:
            port_file = os.path.join(work, "port")
            procs.append(subprocess.Popen(
                NICE + ["taskset", "-c", SERVER_CORE, BIN, "serve", "--port", "0", "--port-file", port_file,
                 "--fixed-step-ms", "0", "--threads", "1", "--natural-output-len", "none"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.log"), "w")))
            for _ in range(500):
                if os.path.exists(port_file) and open(port_file).read().strip():
                    break
                time.sleep(0.01)
            port = open(port_file).read().strip()
        sim = f"http://127.0.0.1:{port}"
        for _ in range(500):
            if run(["curl", "-s", "-o", "/dev/null", NGINX + "/v1/json"]).returncode == 0:
                break
            time.sleep(0.01)
        post_lua = os.path.join(CANNED, "post.lua")
        serve_post_lua = os.path.join(ROOT, "benchmarks/serve/post.lua")
        b = Bench(work)
        results = {s: [] for s in sections}
        secs = a.seconds
        log(f"client_bench: {a.rounds} rounds, {secs:g} s schedules, {os.cpu_count()} CPUs, "
            f"load average {loadavg():.2f}, {time.strftime('%Y-%m-%d %H:%M:%S')}, "
            f"servers and clients at nice {NICE[-1] if NICE else 'unchanged'}")
        results["stalls"] = []
        rates = [int(x) for x in a.rates.split(",")]

        def rate_of_ts(extra, target=None, split=False):
            """One tokenscope open-loop trial per rate, non-streaming chat to /v1/json (8-token prompts unless
            `extra` says otherwise)."""
            def measure(rate):
                t = b.tokenscope(["--target", target or NGINX, "--endpoint", "/v1/json", "--no-stream", "--api",
                                  "chat", "--model", "m", "--rate", str(rate), "--num-requests",
                                  str(int(rate * secs)), "--output-len", "fixed:1"]
                                 + (extra if "--input-len" in extra else ["--input-len", "fixed:8"] + extra),
                                 split=split)
                ok, sus = held_ts(t), sustained_ts(t, rate)
                t["cpu_us_per_request"] = 1e6 * t["time_cpu_s"] / max(1, t["ok"])
                log(f"{'ts split' if split else 'tokenscope':10} {rate:>6,}/s: {verdict(ok, sus)}: planned {t['planned']:,}, "
                    f"ok {t['ok']:,}, failed {t['failed']:,} {t['outcomes']}, not sent {t['not_sent']:,}, "
                    f"achieved {t['rps']:,.0f}/s, send lag p50 {t['lag_p50_ms']:.3f} ms p99 {t['lag_p99_ms']:.3f} ms, "
                    f"CPU {t['cpu_s']:.2f} s ({t['cpu_us_per_request']:.1f} us/request)"
                    + (f", {t['writer_waits']} waits for the writer" if t["writer_waits"] else ""))
                return ok, sus, {"rate": rate, "held": ok, "sustained": sus, **t}
            return measure

        def rate_of_floor(extra):
            """One trial of the open-loop floor per rate against the canned nginx's /v1/json."""
            def measure(rate):
                n = int(rate * secs)
                f = b.floor(["--port", str(nginx_port), "--rate", str(rate), "--num-requests", str(n),
                             "--seed", str(rate)] + extra)
                ok = (f["completed"] == n and f["errors"] == 0 and f["not_sent"] == 0
                      and f["send_lag_p99_ms"] < LAG_LIMIT_MS)
                sus = f["completed"] == n and f["errors"] == 0 and f["achieved_rps"] >= 0.95 * rate
                log(f"floor      {rate:>6,}/s: {verdict(ok, sus)}: planned {n:,}, ok {f['completed']:,}, "
                    f"errors {f['errors']:,}, achieved {f['achieved_rps']:,.0f}/s, send lag p50 "
                    f"{f['send_lag_p50_ms']:.3f} ms p99 {f['send_lag_p99_ms']:.3f} ms, CPU {f['cpu_s']:.2f} s "
                    f"({f['cpu_us_per_request']:.1f} us/request)")
                return ok, sus, {"rate": rate, "held": ok, "sustained": sus, **f}
            return measure

        if "prompts" in sections:  # the floor sends a body of the mean size of tokenscope's
            prompt_bytes, captured = mean_request_body(
                ["--endpoint", "/v1/json", "--no-stream", "--api", "chat", "--model", "m", "--rate", "2000",
                 "--num-requests", "2000", "--input-len", DEFAULT_INPUT_LEN, "--output-len", "fixed:1"])
            words = "lorem ipsum dolor sit amet " * (int(prompt_bytes) // 27 + 1)
            stub = json.dumps({"model": "m", "messages": [{"role": "user", "content": ""}], "max_tokens": 1,
                               "ignore_eos": True, "stream": False})
            prompt_body = stub.replace('"content": ""', '"content": "' +
                                       words[:max(0, int(round(prompt_bytes)) - len(stub))] + '"')
            log(f"tokenscope's request bodies with default-length prompts: {prompt_bytes:,.0f} bytes on average "
                f"over {captured:,} requests; the floor sends {len(prompt_body):,}")

        for rnd in range(1, a.rounds + 1):
            st = stalls()
            st["load"] = loadavg()
            results["stalls"].append(st)
            log(f"## round {rnd}: the client core itself: {st['gaps']} gaps over 0.5 ms in a {st['wall_s']:.1f} s busy "
                f"loop, {st['gap_ms_total']:.1f} ms in all, the longest {st['gap_ms_max']:.1f} ms (load {st['load']:.2f})")
            if "events" in sections:
                log(f"## events, round {rnd} (load {loadavg():.2f})")
                t = b.tokenscope(["--target", NGINX, "--api", "chat", "--model", "m", "--concurrency", "64",
                                  "--num-requests", str(a.streams), "--input-len", "fixed:8",
                                  "--output-len", "fixed:128"])
                p = b.python([NGINX + "/v1/chat/completions", "--chat", "--concurrency", "64",
                              "--num-requests", str(a.py_streams), "--max-tokens", "128"])
                w = b.wrk(NGINX + "/v1/chat/completions", secs, post_lua)
                r = {"ts_events_per_cpu_s": t["output_events"] / t["cpu_s"],
                     "ts_streams_per_cpu_s": t["ok"] / t["cpu_s"],
                     "py_events_per_cpu_s": p["output_events"] / p["cpu_s"],
                     "wrk_streams_per_cpu_s": w["requests"] / w["cpu_s"], "wrk_streams_per_s": w["rps"],
                     "ts": t, "py": p, "wrk": w, "load": loadavg()}
                r["ts_over_py"] = r["ts_events_per_cpu_s"] / r["py_events_per_cpu_s"]
                r["ts_over_wrk"] = r["ts_streams_per_cpu_s"] / r["wrk_streams_per_cpu_s"]
                results["events"].append(r)
                log(f"tokenscope: {t['ok']:,} of {t['planned']:,} streams ok, {t['output_events']:,} output events "
                    f"counted ({t['output_tokens']:,} tokens), {t['cpu_s']:.3f} CPU s (time: {t['time_cpu_s']:.2f}), "
                    f"{r['ts_events_per_cpu_s']:,.0f} events/CPU-s, {r['ts_streams_per_cpu_s']:,.0f} streams/CPU-s")
                log(f"python:     {p['completed']:,} streams ok, {p['errors']} errors, {p['output_events']:,} output "
                    f"events ({p['events']:,} parsed), {p['cpu_s']:.3f} CPU s, "
                    f"{r['py_events_per_cpu_s']:,.0f} output events/CPU-s")
                log(f"wrk:        {w['requests']:,} streams in {secs:g} s ({w['rps']:,.0f}/s), {w['cpu_s']:.2f} CPU s, "
                    f"{r['wrk_streams_per_cpu_s']:,.0f} streams/CPU-s{', ' + w['errors'] if w['errors'] else ''}")
                log(f"ratios: tokenscope/python events per CPU-s {r['ts_over_py']:.1f}, "
                    f"tokenscope/wrk streams per CPU-s {r['ts_over_wrk']:.2f}")

            if "rate" in sections:
                log(f"## rate, non-streaming open loop on {NGINX}/v1/json, round {rnd} (load {loadavg():.2f})")
                w = b.wrk(NGINX + "/v1/json", secs, post_lua)
                log(f"wrk -t1 -c64: {w['rps']:,.0f} req/s, {w['cpu_s']:.2f} CPU s"
                    f"{', ' + w['errors'] if w['errors'] else ''}")

                ts_rate = rate_of_ts([])
                floor_rate = rate_of_floor([])

                def py_rate(rate):
                    n = int(rate * secs)
                    p = b.python([NGINX + "/v1/json", "--chat", "--no-stream", "--rate", str(rate),
                                  "--num-requests", str(n), "--max-tokens", "1"])
                    ok, sus = held_py(p, n), sustained_py(p, n, rate)
                    p["cpu_us_per_request"] = 1e6 * p["time_cpu_s"] / max(1, p["completed"])
                    log(f"python     {rate:>6,}/s: {verdict(ok, sus)}: planned {n:,}, ok {p['completed']:,}, "
                        f"errors {p['errors']:,}, achieved {p['achieved_rps']:,.0f}/s, send lag p50 "
                        f"{p['send_lag_p50_ms']:.3f} ms p99 {p['send_lag_p99_ms']:.3f} ms, CPU {p['cpu_s']:.2f} s")
                    return ok, sus, {"rate": rate, "held": ok, "sustained": sus, **p}

                best, sus, trials = search(rates, ts_rate)
                if a.split:
                    sp_best, sp_sus, sp_trials = search(rates, rate_of_ts([], split=True))
                fl_best, fl_sus, fl_trials = search(rates, floor_rate)
                py_best, py_sus, py_trials = search([int(x) for x in a.py_rates.split(",")], py_rate)
                results["rate"].append({"wrk": w, "ts_held": best, "ts_sustained": sus, "py_held": py_best,
                                        "py_sustained": py_sus, "ts_over_wrk": best / w["rps"],
                                        "ts_sustained_over_wrk": sus / w["rps"], "ts_trials": trials,
                                        "floor_held": fl_best, "floor_sustained": fl_sus, "floor_trials": fl_trials,
                                        "floor_over_wrk": fl_best / w["rps"],
                                        "ts_over_floor": best / fl_best if fl_best else None,
                                        "py_trials": py_trials, "load": loadavg()})
                if a.split:
                    results["rate"][-1].update({"split_held": sp_best, "split_sustained": sp_sus,
                                                "split_over_wrk": sp_best / w["rps"], "split_trials": sp_trials,
                                                "split_every_lower_held": all(
                                                    t["held"] for t in sp_trials if t["rate"] <= sp_best)})
                    log(f"highest held, client thread alone on its core: {sp_best:,}/s = "
                        f"{sp_best / w['rps']:.2f} of wrk's (sustained: {sp_sus:,}/s)")
                log(f"highest held: tokenscope {best:,}/s = {best / w['rps']:.2f} of wrk's {w['rps']:,.0f}/s "
                    f"(sustained: {sus:,}/s = {sus / w['rps']:.2f}); floor {fl_best:,}/s "
                    f"(sustained: {fl_sus:,}/s); python {py_best:,}/s (sustained: {py_sus:,}/s)")

            if "prompts" in sections:
                log(f"## prompts: the rate search with default-length prompts ({prompt_bytes:,.0f}-byte bodies on "
                    f"average), round {rnd} (load {loadavg():.2f})")
                best, sus, trials = search(rates, rate_of_ts(["--input-len", DEFAULT_INPUT_LEN]))
                fl_best, fl_sus, fl_trials = search(rates, rate_of_floor(["--body", prompt_body]))
                if a.split:
                    sp_best, sp_sus, sp_trials = search(rates, rate_of_ts(["--input-len", DEFAULT_INPUT_LEN],
                                                                          split=True))
                results["prompts"].append({"ts_held": best, "ts_sustained": sus, "ts_trials": trials,
                                           "floor_held": fl_best, "floor_sustained": fl_sus,
                                           "floor_trials": fl_trials, "body_bytes": prompt_bytes,
                                           "ts_over_floor": best / fl_best if fl_best else None,
                                           "load": loadavg()})
                log(f"highest held with default-length prompts: tokenscope {best:,}/s (sustained {sus:,}/s), "
                    f"floor {fl_best:,}/s (sustained {fl_sus:,}/s)")
                if a.split:
                    results["prompts"][-1].update({"split_held": sp_best, "split_sustained": sp_sus,
                                                   "split_trials": sp_trials,
                                                   "split_over_floor": sp_best / fl_best if fl_best else None})
                    log(f"highest held with default-length prompts, client thread alone on its core: "
                        f"{sp_best:,}/s (sustained {sp_sus:,}/s)")

            if "stream" in sections:
                log(f"## stream, 4-token streams open loop on the zero-cost simulator, round {rnd} (load {loadavg():.2f})")

                def ts_stream(rate):
                    t = b.tokenscope(["--target", sim, "--rate", str(rate), "--num-requests", str(int(rate * secs)),
                                      "--input-len", "fixed:8", "--output-len", "fixed:4", "--timeout-s", "30"])
                    ok, sus = held_ts(t), sustained_ts(t, rate)
                    log(f"tokenscope {rate:>6,}/s: {verdict(ok, sus)}: planned {t['planned']:,}, "
                        f"ok {t['ok']:,}, failed {t['failed']:,} {t['outcomes']}, not sent {t['not_sent']:,}, "
                        f"achieved {t['rps']:,.0f}/s, send lag p50 {t['lag_p50_ms']:.3f} ms p99 {t['lag_p99_ms']:.3f} ms, "
                        f"{t['output_events']:,} events")
                    return ok, sus, {"rate": rate, "held": ok, "sustained": sus, **t}

                def py_stream(rate):
                    n = int(rate * secs)
                    p = b.python([sim + "/v1/completions", "--rate", str(rate), "--num-requests", str(n),
                                  "--max-tokens", "4"])
                    ok, sus = held_py(p, n), sustained_py(p, n, rate)
                    log(f"python     {rate:>6,}/s: {verdict(ok, sus)}: planned {n:,}, ok {p['completed']:,}, "
                        f"errors {p['errors']:,}, achieved {p['achieved_rps']:,.0f}/s, send lag p50 "
                        f"{p['send_lag_p50_ms']:.3f} ms p99 {p['send_lag_p99_ms']:.3f} ms")
                    return ok, sus, {"rate": rate, "held": ok, "sustained": sus, **p}

                best, sus, trials = search([int(x) for x in a.stream_rates.split(",")], ts_stream)
                py_best, py_sus, py_trials = search([int(x) for x in a.py_rates.split(",")], py_stream)
                results["stream"].append({"ts_held": best, "ts_sustained": sus, "py_held": py_best,
                                          "py_sustained": py_sus, "ts_trials": trials, "py_trials": py_trials,
                                          "load": loadavg()})
                log(f"highest held: tokenscope {best:,}/s (sustained {sus:,}/s), python {py_best:,}/s "
                    f"(sustained {py_sus:,}/s)")

            if "closed" in sections:
                log(f"## closed loop, non-streaming, 64 connections, {secs:g} s, round {rnd} (load {loadavg():.2f})")
                row = {"load": loadavg()}
                for name, url, script, args in [
                        ("serve", sim + "/v1/completions", serve_post_lua, ["--target", sim]),
                        ("nginx", NGINX + "/v1/json", post_lua,
                         ["--target", NGINX, "--endpoint", "/v1/json", "--api", "chat", "--model", "m"])]:
                    w = b.wrk(url, secs, script)
                    t = b.tokenscope(args + ["--no-stream", "--concurrency", "64", "--duration-s", str(secs),
                                             "--input-len", "fixed:8", "--output-len", "fixed:1"])
                    row[name] = {"wrk_rps": w["rps"], "ts_rps": t["rps"], "ratio": t["rps"] / w["rps"],
                                 "ts_failed": t["failed"]}
                    log(f"{name}: wrk {w['rps']:,.0f} req/s, tokenscope {t['rps']:,.0f} req/s ({t['ok']:,} ok, "
                        f"{t['failed']} failed), ratio {t['rps'] / w['rps']:.2f}")
                results["closed"].append(row)

            if "tls" in sections:
                log(f"## TLS: events and the closed loop on {tls_url}, round {rnd} (load {loadavg():.2f})")
                t = b.tokenscope(["--target", tls_url, "--insecure", "--api", "chat", "--model", "m",
                                  "--concurrency", "64", "--num-requests", str(a.streams), "--input-len", "fixed:8",
                                  "--output-len", "fixed:128"])
                p = b.python([tls_url + "/v1/chat/completions", "--insecure", "--chat", "--concurrency", "64",
                              "--num-requests", str(a.py_streams), "--max-tokens", "128"])
                w = b.wrk(tls_url + "/v1/chat/completions", secs, post_lua)
                wc = b.wrk(tls_url + "/v1/json", secs, post_lua)
                tc = b.tokenscope(["--target", tls_url, "--insecure", "--endpoint", "/v1/json", "--api", "chat",
                                   "--model", "m", "--no-stream", "--concurrency", "64", "--duration-s", str(secs),
                                   "--input-len", "fixed:8", "--output-len", "fixed:1"])
                r = {"ts_events_per_cpu_s": t["output_events"] / t["cpu_s"],
                     "py_events_per_cpu_s": p["output_events"] / p["cpu_s"],
                     "ts_streams_per_cpu_s": t["ok"] / t["cpu_s"],
                     "wrk_streams_per_cpu_s": w["requests"] / w["cpu_s"],
                     "closed_wrk_rps": wc["rps"], "closed_ts_rps": tc["rps"], "closed_ratio": tc["rps"] / wc["rps"],
                     "ts": t, "py": p, "wrk": w, "load": loadavg()}
                r["ts_over_py"] = r["ts_events_per_cpu_s"] / r["py_events_per_cpu_s"]
                r["ts_over_wrk"] = r["ts_streams_per_cpu_s"] / r["wrk_streams_per_cpu_s"]
                r["rate_held"], r["rate_sustained"], r["rate_trials"] = search(
                    rates, rate_of_ts(["--insecure"], target=tls_url))
                r["rate_held_over_wrk"] = r["rate_held"] / wc["rps"]
                results["tls"].append(r)
                log(f"tokenscope: {t['ok']:,} of {t['planned']:,} streams ok, {t['cpu_s']:.3f} CPU s, "
                    f"{r['ts_events_per_cpu_s']:,.0f} events/CPU-s; python: {p['completed']:,} ok, {p['errors']} errors, "
                    f"{r['py_events_per_cpu_s']:,.0f} events/CPU-s; wrk {r['wrk_streams_per_cpu_s']:,.0f} streams/CPU-s"
                    f"{', ' + w['errors'] if w['errors'] else ''}")
                log(f"ratios: tokenscope/python {r['ts_over_py']:.1f}, tokenscope/wrk streams per CPU-s "
                    f"{r['ts_over_wrk']:.2f}; closed loop: wrk {wc['rps']:,.0f} req/s, tokenscope {tc['rps']:,.0f} "
                    f"req/s ({tc['failed']} failed), ratio {r['closed_ratio']:.2f}; open loop held "
                    f"{r['rate_held']:,}/s = {r['rate_held_over_wrk']:.2f} of wrk's closed loop over TLS")

            if "media" in sections:
                log(f"## media, round {rnd} (load {loadavg():.2f})")
                row = {"load": loadavg()}
                media = {"text": "", "image": "    images: {count: 1, width: fixed:1024, height: fixed:1024}\n",
                         "audio": "    audio: {duration_ms: fixed:10000}\n"}
                for kind, extra in media.items():
                    yaml = os.path.join(work, f"media-{kind}.yaml")
                    with open(yaml, "w") as f:
                        f.write(f"num_requests: {a.media_requests}\nseed: {rnd}\narrival: {{process: poisson, "
                                f"rate_rps: 500}}\nclasses:\n  - name: {kind}\n    input_len: fixed:64\n"
                                f"    output_len: fixed:1\n" + extra)
                    t = b.tokenscope(["--target", NGINX, "--endpoint", "/v1/json", "--no-stream", "--api", "chat",
                                      "--model", "m", "--workload", yaml, "--prompt-check", "0",
                                      "--exact-prompts", "off"])
                    row[kind] = {"cpu_us_per_request": 1e6 * t["cpu_s"] / max(1, t["ok"]), "ok": t["ok"],
                                 "outcomes": t["outcomes"],
                                 "failed": t["failed"]}
                    log(f"{kind}: {t['ok']:,} ok, {t['failed']} failed {t['outcomes']}, "
                        f"{row[kind]['cpu_us_per_request']:.1f} client CPU us per request")
                for kind in ("image", "audio"):
                    row[f"{kind}_over_text"] = row[kind]["cpu_us_per_request"] / row["text"]["cpu_us_per_request"]
                results["media"].append(row)

        log(f"\n# Summary over {a.rounds} rounds (median, spread, runs); load average now {loadavg():.2f}")
        st = results["stalls"]
        log("the client core itself (3 s busy loop per round): gaps over 0.5 ms "
            f"{spread([x['gaps'] for x in st])}; longest gap ms {spread([x['gap_ms_max'] for x in st])}; "
            f"load average {spread([x['load'] for x in st])}")
        if results.get("events"):
            e = results["events"]
            log("events per client CPU-second, 64 canned 131-event streams in flight (output events counted):")
            log(f"  tokenscope output events/CPU-s: {spread([r['ts_events_per_cpu_s'] for r in e])}")
            log(f"  tokenscope streams/CPU-s:       {spread([r['ts_streams_per_cpu_s'] for r in e])}")
            log(f"  python output events/CPU-s:     {spread([r['py_events_per_cpu_s'] for r in e])}")
            log(f"  wrk streams/CPU-s:              {spread([r['wrk_streams_per_cpu_s'] for r in e])}")
            log(f"  wrk streams/s:                  {spread([r['wrk_streams_per_s'] for r in e])}")
            log(f"  ratio tokenscope/python (events per CPU-s): {spread([r['ts_over_py'] for r in e])}")
            log(f"  ratio tokenscope/wrk (streams per CPU-s):   {spread([r['ts_over_wrk'] for r in e])}")
        if results.get("media"):
            e = results["media"]
            log("client CPU per request, open loop at 500 req/s, non-streaming chat to the canned nginx:")
            for kind in ("text", "image", "audio"):
                log(f"  {kind:5} CPU us/request: {spread([r[kind]['cpu_us_per_request'] for r in e])}")
            log(f"  image / text: {spread([r['image_over_text'] for r in e])}")
            log(f"  audio / text: {spread([r['audio_over_text'] for r in e])}")
        if results.get("rate"):
            e = results["rate"]
            log(f"highest open-loop non-streaming rate held (p99 send lag < {LAG_LIMIT_MS:g} ms, all sent and ok):")
            log(f"  tokenscope req/s:  {spread([r['ts_held'] for r in e])}")
            log(f"  wrk -c64 req/s:    {spread([r['wrk']['rps'] for r in e])}")
            log(f"  tokenscope / wrk:  {spread([r['ts_over_wrk'] for r in e])}")
            log(f"  python req/s:      {spread([r['py_held'] for r in e])}")
            log(f"  floor req/s:       {spread([r['floor_held'] for r in e])}")
            log(f"  floor / wrk:       {spread([r['floor_over_wrk'] for r in e])}")
            if "split_held" in e[0]:
                log(f"  tokenscope, client thread alone on its core (--split) req/s: "
                    f"{spread([r['split_held'] for r in e])}")
                log(f"  the same / wrk:    {spread([r['split_over_wrk'] for r in e])}")
                log(f"  the same, every lower rate tried held too: "
                    f"{sum(r['split_every_lower_held'] for r in e)} of {len(e)} rounds")
            log(f"  tokenscope / floor: {spread([r['ts_over_floor'] for r in e])}")
            log("highest rate sustained (all sent and ok, achieved >= 95% of offered; any send lag):")
            log(f"  tokenscope req/s:  {spread([r['ts_sustained'] for r in e])}")
            log(f"  tokenscope / wrk:  {spread([r['ts_sustained_over_wrk'] for r in e])}")
            log(f"  python req/s:      {spread([r['py_sustained'] for r in e])}")
            log(f"  floor req/s:       {spread([r['floor_sustained'] for r in e])}")
            log("tokenscope per rate:\n" + per_rate_table(e, "ts_trials"))
            log("floor per rate:\n" + per_rate_table(e, "floor_trials"))
            if "split_trials" in e[0]:
                log("tokenscope, client thread alone on its core, per rate:\n" + per_rate_table(e, "split_trials"))
            log("python per rate:\n" + per_rate_table(e, "py_trials"))
        if results.get("prompts"):
            e = results["prompts"]
            log(f"default-length prompts ({e[0]['body_bytes']:,.0f}-byte bodies on average), highest rate held:")
            log(f"  tokenscope req/s:  {spread([r['ts_held'] for r in e])}")
            log(f"  floor req/s:       {spread([r['floor_held'] for r in e])}")
            log(f"  tokenscope / floor: {spread([r['ts_over_floor'] for r in e])}")
            if "split_held" in e[0]:
                log(f"  tokenscope, client thread alone on its core (--split) req/s: "
                    f"{spread([r['split_held'] for r in e])}")
                log(f"  the same / floor:  {spread([r['split_over_floor'] for r in e])}")
            log("tokenscope per rate:\n" + per_rate_table(e, "ts_trials"))
            log("floor per rate:\n" + per_rate_table(e, "floor_trials"))
            if "split_trials" in e[0]:
                log("tokenscope, client thread alone on its core, per rate:\n" + per_rate_table(e, "split_trials"))
        if results.get("stream"):
            e = results["stream"]
            log("highest open-loop rate of 4-token streams held against the zero-cost simulator:")
            log(f"  tokenscope req/s:  {spread([r['ts_held'] for r in e])}")
            log(f"  python req/s:      {spread([r['py_held'] for r in e])}")
            log("highest rate sustained (all sent and ok, achieved >= 95% of offered; any send lag):")
            log(f"  tokenscope req/s:  {spread([r['ts_sustained'] for r in e])}")
            log(f"  python req/s:      {spread([r['py_sustained'] for r in e])}")
            log("tokenscope per rate:\n" + per_rate_table(e, "ts_trials"))
            log("python per rate:\n" + per_rate_table(e, "py_trials"))
        if results.get("tls"):
            e = results["tls"]
            log("over TLS (TLS 1.3, self-signed, the canned nginx):")
            log(f"  tokenscope output events/CPU-s: {spread([r['ts_events_per_cpu_s'] for r in e])}")
            log(f"  python output events/CPU-s:     {spread([r['py_events_per_cpu_s'] for r in e])}")
            log(f"  ratio tokenscope/python:        {spread([r['ts_over_py'] for r in e])}")
            log(f"  ratio tokenscope/wrk (streams per CPU-s): {spread([r['ts_over_wrk'] for r in e])}")
            log(f"  closed loop: wrk req/s {spread([r['closed_wrk_rps'] for r in e])}")
            log(f"  closed loop: tokenscope req/s {spread([r['closed_ts_rps'] for r in e])}")
            log(f"  closed loop: ratio {spread([r['closed_ratio'] for r in e])}")
            log(f"  open loop held req/s: {spread([r['rate_held'] for r in e])}")
            log(f"  open loop held / wrk's closed loop: {spread([r['rate_held_over_wrk'] for r in e])}")
            log("tokenscope per rate over TLS:\n" + per_rate_table(e, "rate_trials"))
        if results.get("closed"):
            e = results["closed"]
            log("closed loop, 64 connections, non-streaming:")
            for name in ("serve", "nginx"):
                log(f"  {name}: wrk req/s {spread([r[name]['wrk_rps'] for r in e])}")
                log(f"  {name}: tokenscope req/s {spread([r[name]['ts_rps'] for r in e])}")
                log(f"  {name}: ratio {spread([r[name]['ratio'] for r in e])}")
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            json.dump(results, open(os.path.join(a.out, "results.json"), "w"), indent=1)
    finally:
        if os.path.exists(nginx_pid):
            subprocess.run(["kill", open(nginx_pid).read().strip()])
        for p in procs:
            p.send_signal(2)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
