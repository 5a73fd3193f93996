#!/usr/bin/env python3
"""Checks that two builds of tokenscope write the same runs (a refactoring's
acceptance check, docs/architecture.md "Checking a refactoring").

  scripts/same-runs.py OLD_BINARY NEW_BINARY

- sim: seeded runs (plain, with a steal perturbation and contention series,
  multi-tenant with tenant switches and shared prefixes, a slice of the
  Azure trace when ../shared/traces has it) by each binary into the same
  directory: run.json, requests.jsonl, samples.jsonl and steps.jsonl must be
  byte-identical, and the one-run check of each (read from its run cache)
  the same but for its timings (numbers within 1e-6 relative).
- bench against one `tokenscope serve` (the new binary's): a seeded load by
  each binary (with --csv and --compat vllm): the same files, the same
  fields in run.json (key paths), and per request id the same outcome,
  prompt and output tokens and number of output events; latencies are
  measured, so only their presence is compared.

Exit 0 when everything matches, 1 with every difference listed otherwise.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "AzureLLMInferenceTrace_conv.csv")
CACHE = ".tokenscope-cache"

SIMS = [
    ["--num-requests", "600", "--rate", "20", "--seed", "7"],
    ["--num-requests", "400", "--rate", "30", "--perturb", "steal:share=0.5,period_s=4", "--seed", "3"],
    ["--num-requests", "500", "--rate", "20", "--tenants", "4", "--max-active-tenants", "2",
     "--context-switch-ms", "5", "--prefix-groups", "4", "--prefix-tokens", "256", "--seed", "11"],
    ["--num-requests", "300", "--rate", "10", "--no-steps", "--no-samples", "--seed", "5"],
]
if os.path.exists(TRACE):
    SIMS.append(["--trace", TRACE, "--max-requests", "3000", "--time-scale", "2"])

problems = []


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode not in (0, 1):
        problems.append(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[:500]}")
    return r


def key_paths(j, prefix=""):
    out = set()
    if isinstance(j, dict):
        for k, v in j.items():
            out.add(prefix + "/" + k)
            out |= key_paths(v, prefix + "/" + k)
    elif isinstance(j, list):
        for v in j:
            out |= key_paths(v, prefix + "[]")
    return out


def check_json(path):
    j = json.load(open(path))
    for item in j.get("items", []):
        item.pop("elapsed_ms", None)
    return j


def close(x, y, path=""):
    """Paths where two check.json differ: numbers by more than 1e-6 relative
    (sums of step durations are exact in ns since issue 22, where they were
    sums of ms: the attribution moves in its 14th digit, and the standard
    errors of its ill-conditioned adjusted fit in their 8th)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in sorted(set(x) | set(y)) for d in close(x.get(k), y.get(k), f"{path}/{k}")]
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return [path]
        return [d for i, (u, v) in enumerate(zip(x, y)) for d in close(u, v, f"{path}[{i}]")]
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return [] if abs(x - y) <= 1e-6 * max(1.0, abs(x), abs(y)) else [path]
    return [] if x == y else [path]


def compare_sims(old, new, work):
    for k, extra in enumerate(SIMS):
        runs = {}
        for label, binary in (("old", old), ("new", new)):
            d = os.path.join(work, "sim")
            shutil.rmtree(d, ignore_errors=True)
            run([binary, "sim", "--quiet", "--no-history", "--out", d] + extra)
            run([binary, "check", d, "--out", os.path.join(work, f"check-{label}.json")])
            runs[label] = os.path.join(work, f"sim-{label}")
            shutil.rmtree(runs[label], ignore_errors=True)
            shutil.move(d, runs[label])
        for f in ("run.json", "requests.jsonl", "samples.jsonl", "steps.jsonl"):
            a, b = (os.path.join(runs[x], f) for x in ("old", "new"))
            if os.path.exists(a) != os.path.exists(b):
                problems.append(f"sim {k}: {f} in one run only")
            elif os.path.exists(a) and open(a, "rb").read() != open(b, "rb").read():
                problems.append(f"sim {k}: {f} differs")
        if os.path.exists(os.path.join(runs["old"], CACHE)) != os.path.exists(os.path.join(runs["new"], CACHE)):
            problems.append(f"sim {k}: a run cache in one run only")
        diff = close(check_json(os.path.join(work, "check-old.json")), check_json(os.path.join(work, "check-new.json")))
        if diff:
            problems.append(f"sim {k}: check RUN differs at {diff[:5]}")
        print(f"sim {k}: compared ({' '.join(extra)[:80]})")


def requests_by_id(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        out[r["id"]] = r
    return out


def compare_bench(old, new, work):
    port_file = os.path.join(work, "port")
    server = subprocess.Popen([new, "serve", "--port", "0", "--port-file", port_file],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        url = f"http://127.0.0.1:{open(port_file).read().strip()}"
        runs = {}
        for label, binary in (("old", old), ("new", new)):
            d = os.path.join(work, f"bench-{label}")
            shutil.rmtree(d, ignore_errors=True)
            run([binary, "bench", "--target", url, "--quiet", "--progress", "none", "--no-history",
                 "--num-requests", "120", "--rate", "40", "--seed", "9", "--input-len", "fixed:64",
                 "--output-len", "uniform:8:48", "--csv", "--compat", "vllm", "--scrape-interval", "0.2",
                 "--out", d])
            runs[label] = d
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    files = {x: sorted(f for f in os.listdir(runs[x]) if f != CACHE) for x in runs}
    if files["old"] != files["new"]:
        problems.append(f"bench: files differ: {files['old']} against {files['new']}")
    a, b = (json.load(open(os.path.join(runs[x], "run.json"))) for x in ("old", "new"))
    # Lists whose entries depend on what was measured (series, samples) are
    # compared by their keys only, as the rest.
    ka, kb = key_paths(a), key_paths(b)
    if ka != kb:
        problems.append(f"bench: run.json keys only in old {sorted(ka - kb)[:10]}, only in new {sorted(kb - ka)[:10]}")
    ra, rb = (requests_by_id(os.path.join(runs[x], "requests.jsonl")) for x in ("old", "new"))
    if sorted(ra) != sorted(rb):
        problems.append(f"bench: request ids differ ({len(ra)} against {len(rb)})")
    for rid in sorted(set(ra) & set(rb)):
        x, y = ra[rid], rb[rid]
        for key in ("outcome", "prompt_tokens", "output_tokens", "prompt_tokens_planned", "output_tokens_planned",
                    "tenant", "warmup"):
            if x.get(key) != y.get(key):
                problems.append(f"bench: request {rid}: {key} {x.get(key)} against {y.get(key)}")
        if len(x.get("event_offsets_ns", [])) != len(y.get("event_offsets_ns", [])):
            problems.append(f"bench: request {rid}: number of output events differs")
        if set(x) != set(y):
            problems.append(f"bench: request {rid}: fields {sorted(set(x) ^ set(y))}")
    for f in ("requests.csv",):
        la, lb = (sum(1 for _ in open(os.path.join(runs[x], f))) for x in ("old", "new"))
        if la != lb:
            problems.append(f"bench: {f} has {la} lines against {lb}")
    print(f"bench: compared {len(ra)} requests")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = (os.path.abspath(p) for p in sys.argv[1:])
    with tempfile.TemporaryDirectory() as work:
        compare_sims(old, new, work)
        compare_bench(old, new, work)
    for p in problems:
        print("DIFFERENT:", p)
    print("same runs" if not problems else f"{len(problems)} differences")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
