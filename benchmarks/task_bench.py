#!/usr/bin/env python3
"""The task driver's own cost (docs/performance.md "Agentic tasks"), beside
the plain request path in the same rounds, against the same server.

`tokenscope serve --fixed-step-ms 0 --threads 1` (a zero-cost engine) runs
on core 0, `tokenscope bench --client-threads 1` on core 1, one run at a
time, both at --nice (default -20, where permitted).

  steps   client CPU per model call: N plain chat requests (64 prompt
          words, 16 output tokens, Poisson) beside N/4 tasks of 4 chained
          model steps of the same lengths (the same number of model calls);
          the difference per call is what the task driver adds to a step
          (templates, messages as JSON, the graph, the task record). Beside
          them, tasks of 4 steps of which 2 are tool calls to the mock tools
          (calculator, search): CPU per step with the mock tools' own
          serving (they run in the bench process). CPU is run.json's
          client.process_cpu_s.
  memory  10,000 tasks alive at once: each calls a mock tool that answers
          500, then waits out a backoff of --hold-s before its retry, so
          every task of a burst (5,000 arrivals/s) is in flight together;
          peak RSS (/usr/bin/time) beside a run of 100 such tasks, and the
          peak number of tasks in flight counted from tasks.jsonl.

Prints every measurement, then medians over the rounds. usage:
  python3 benchmarks/task_bench.py [--rounds 3] [--calls 2000] [--only steps,memory]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TOKENSCOPE_BIN", os.path.join(ROOT, "build/release/src/cli/tokenscope"))
SERVER_CORE, CLIENT_CORE = "0", "1"


def log(msg):
    print(msg, flush=True)


def nice_prefix(n):
    try:
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))
        subprocess.run(["nice", "-n", str(n), "true"], check=True, capture_output=True)
        if n < 0 and os.geteuid() != 0:
            return []
        return ["nice", "-n", str(n)]
    except Exception:
        return []


def bench(work, name, args, nice):
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = nice + ["taskset", "-c", CLIENT_CORE, "/usr/bin/time", "-f", "%M", BIN, "bench", "--progress", "none",
                  "--quiet", "--max-error-rate", "1", "--client-threads", "1", "--no-cache", "--out", out] + args
    p = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(os.path.join(out, "run.json")):
        raise SystemExit(f"bench failed ({p.returncode}): {p.stderr[-2000:]}\n{' '.join(cmd)}")
    rss_kb = int(p.stderr.strip().splitlines()[-1])
    run = json.load(open(os.path.join(out, "run.json")))
    calls = ok = 0
    with open(os.path.join(out, "requests.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            calls += 1
            ok += r["outcome"] == "ok"
    tasks = []
    if os.path.exists(os.path.join(out, "tasks.jsonl")):
        with open(os.path.join(out, "tasks.jsonl")) as f:
            tasks = [json.loads(line) for line in f]
    steps = sum(len(t["steps"]) for t in tasks)
    # Tasks in flight at once: a sweep over their start and end times.
    events = sorted([(t["t_start_ns"], 1) for t in tasks] + [(t["t_end_ns"], -1) for t in tasks])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    result = {"cpu_s": run["client"]["process_cpu_s"], "calls": calls, "ok": ok, "tasks": len(tasks),
              "tasks_ok": sum(t["outcome"] == "ok" for t in tasks), "steps": steps, "peak_tasks": peak,
              "rss_mb": rss_kb / 1024}
    shutil.rmtree(out, ignore_errors=True)
    return result


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000, help="model calls per run (section steps)")
    ap.add_argument("--rate", type=float, default=400, help="model calls per second (section steps)")
    ap.add_argument("--tasks", type=int, default=10000, help="tasks alive at once (section memory)")
    ap.add_argument("--hold-s", type=float, default=6, help="the backoff every task waits out (section memory)")
    ap.add_argument("--only", default="steps,memory")
    ap.add_argument("--nice", type=int, default=-20)
    a = ap.parse_args()
    sections = a.only.split(",")
    nice = nice_prefix(a.nice)
    work = tempfile.mkdtemp(prefix="task-bench-")
    port_file = os.path.join(work, "port")
    serve = subprocess.Popen(nice + ["taskset", "-c", SERVER_CORE, BIN, "serve", "--port", "0", "--port-file",
                                     port_file, "--fixed-step-ms", "0", "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.log"), "w"))
    try:
        for _ in range(500):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.01)
        target = f"http://127.0.0.1:{open(port_file).read().strip()}"
        n, rate = a.calls, a.rate
        plain = write(os.path.join(work, "plain.yaml"), f"""num_requests: {n}
arrival: {{process: poisson, rate_rps: {rate}}}
classes:
  - {{name: chat, input_len: fixed:64, output_len: fixed:16}}
""")
        step = 'model: {prompt: "{{input}}", input_len: fixed:64, output_len: fixed:16}'
        chain = write(os.path.join(work, "chain.yaml"), f"""num_requests: {n // 4}
arrival: {{process: poisson, rate_rps: {rate / 4}}}
classes:
  - name: chain
    task:
      input_len: fixed:8
      steps:
        - {{id: a, {step}}}
        - {{id: b, {step}, after: [a]}}
        - {{id: c, {step}, after: [b]}}
        - {{id: d, {step}, after: [c]}}
""")
        tools = write(os.path.join(work, "tools.yaml"), f"""num_requests: {n // 4}
arrival: {{process: poisson, rate_rps: {rate / 4}}}
documents: {{count: 200, tokens: fixed:20}}
tools:
  - {{name: calc, kind: calculator, parameters: {{type: object, properties: {{expression: {{type: string}}}}}}}}
  - {{name: search, kind: search, parameters: {{type: object, properties: {{query: {{type: string}}}}}}}}
classes:
  - name: tools
    task:
      input_len: fixed:8
      steps:
        - {{id: a, {step}}}
        - {{id: b, tool: {{name: calc, arguments: {{expression: "6 * 7"}}}}, after: [a]}}
        - {{id: c, retrieve: {{query: "{{{{input}}}}", top_k: 2}}, after: [b]}}
        - {{id: d, {step}, after: [c]}}
""")
        hold = write(os.path.join(work, "hold.yaml"), f"""num_requests: {a.tasks}
arrival: {{process: constant, rate_rps: 5000}}
tools:
  - {{name: down, parameters: {{type: object}}, errors: {{http_5xx: 1}}}}
classes:
  - name: waiting
    task:
      steps:
        - {{id: call, tool: down, retries: 1, backoff_ms: {a.hold_s * 1000:.0f}}}
""")
        hold_small = write(os.path.join(work, "hold-small.yaml"),
                           open(hold).read().replace(f"num_requests: {a.tasks}", "num_requests: 100"))
        rows = {"plain": [], "chain": [], "tools": [], "overhead": [], "mem_big": [], "mem_small": [], "peak": []}
        for rnd in range(1, a.rounds + 1):
            if "steps" in sections:
                p = bench(work, "plain", ["--api", "chat", "--target", target, "--workload", plain], nice)
                c = bench(work, "chain", ["--target", target, "--workload", chain], nice)
                t = bench(work, "tools", ["--target", target, "--workload", tools], nice)
                per_plain = p["cpu_s"] / max(1, p["ok"]) * 1e6
                per_chain = c["cpu_s"] / max(1, c["steps"]) * 1e6
                per_tools = t["cpu_s"] / max(1, t["steps"]) * 1e6
                log(f"round {rnd}: plain {p['ok']}/{p['calls']} ok, {per_plain:.1f} us/call; chain {c['tasks_ok']}/"
                    f"{c['tasks']} tasks ok, {c['steps']} steps, {per_chain:.1f} us/step; tools {t['tasks_ok']}/"
                    f"{t['tasks']} ok, {per_tools:.1f} us/step (with the mock tools)")
                rows["plain"].append(per_plain)
                rows["chain"].append(per_chain)
                rows["tools"].append(per_tools)
                rows["overhead"].append(per_chain - per_plain)
            if "memory" in sections:
                big = bench(work, "hold", ["--target", target, "--workload", hold], nice)
                small = bench(work, "hold-small", ["--target", target, "--workload", hold_small], nice)
                log(f"round {rnd}: {big['tasks']} tasks, peak {big['peak_tasks']} in flight, RSS {big['rss_mb']:.1f} MB;"
                    f" {small['tasks']} tasks: RSS {small['rss_mb']:.1f} MB")
                rows["mem_big"].append(big["rss_mb"])
                rows["mem_small"].append(small["rss_mb"])
                rows["peak"].append(big["peak_tasks"])
        def med(k):
            v = rows[k]
            return f"median {statistics.median(v):.1f} (runs: {', '.join(f'{x:.1f}' for x in v)})" if v else "-"
        log("\n## results")
        log(f"plain chat request, client CPU per call (us): {med('plain')}")
        log(f"task of 4 model steps, client CPU per step (us): {med('chain')}")
        log(f"the task driver's cost per model step (us, chain - plain, per round): {med('overhead')}")
        log(f"task of 2 model + 2 tool steps, CPU per step with the mock tools (us): {med('tools')}")
        log(f"{a.tasks} tasks, peak in flight: {med('peak')}; peak RSS (MB): {med('mem_big')}; "
            f"100 tasks: {med('mem_small')}")
        if rows["mem_big"]:
            per = [(b - s) * 1024 * 1024 / max(1, p - 100) for b, s, p in zip(rows["mem_big"], rows["mem_small"], rows["peak"])]
            log(f"memory per task in flight (bytes): median {statistics.median(per):.0f} (runs: "
                f"{', '.join(f'{x:.0f}' for x in per)})")
    finally:
        serve.terminate()
        serve.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
