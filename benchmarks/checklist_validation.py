#!/usr/bin/env python3
"""Detection and false-alarm rates of `tokenscope check`'s items on runs where
the truth is known (docs/checklist-validation.md).

For each of N pairs (seed i): a base run, a null candidate (same settings,
another seed) and one candidate per injected perturbation (sim --perturb,
docs/engine.md "Perturbations"), all made by `tokenscope sim` in virtual
time; then `tokenscope check BASE CAND` on each pair. An item detects a
perturbation when its verdict is "regressed"; a false alarm is "regressed"
on a null pair, and the check's false alarm is an exit 1 on a null pair
(any item or headline row regressed). Null pairs beyond the first N
(--null-pairs) make only the base and the null candidate. Prints a Markdown
table and writes the raw verdicts as JSON.

  python3 benchmarks/checklist_validation.py [--workload project|azure] [--pairs 100] [--null-pairs 200]
                                            [--jobs 2] [--out FILE]

Workloads: "project" is the project's own (synthetic, Poisson arrivals, shared
prefixes); "azure" is the first 3,000 requests of the Azure 2023 conversation
trace (../shared/traces) at its own bursty arrival times, each spread within
its 3 s bucket (--jitter-bucket-ms 3000).
"""
import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENSCOPE = os.environ.get("TOKENSCOPE", os.path.join(ROOT, "build/release/src/cli/tokenscope"))

# The workload of every run: 1,500 synthetic requests at 8 req/s (about
# 190 s of virtual time, half the simulated H100's capacity), with shared
# prefixes so that the prefix cache has something to hit. The base and null
# runs carry a steal of share 0: the contention series at zero, as a host
# without a co-located process would show them (docs/engine.md).
WORKLOADS = {
    "project": ["--num-requests", "1500", "--rate", "8", "--prefix-groups", "8", "--prefix-tokens", "512"],
    "azure": ["--trace", os.path.join(ROOT, "..", "shared", "traces", "AzureLLMInferenceTrace_conv.csv"),
              "--max-requests", "3000", "--jitter-bucket-ms", "3000"],
}
WORKLOAD = WORKLOADS["project"]
NULL_PERTURB = "steal:share=0"

# Per item: the perturbation injected and its documented effect size.
CASES = [
    (1, "latency model", "batch_cap:max_num_seqs=16;" + NULL_PERTURB),
    (2, "SLO attainment", "tail:target=requests,fraction=0.15,dist=pareto,scale_ms=500,shape=1.5;" + NULL_PERTURB),
    (4, "tail shift", "tail:target=steps,fraction=0.02,dist=pareto,scale_ms=20,shape=1.5;" + NULL_PERTURB),
    (5, "lifecycle", "leak:per_min=10%;" + NULL_PERTURB),
    (5, "lifecycle", "warmup:factor=3,duration_s=40;" + NULL_PERTURB),
    (7, "KV-cache locality", "kv:fraction=0.02;" + NULL_PERTURB),
    (9, "recompilation", "recompile:ms=100;" + NULL_PERTURB),
    (10, "batching behaviour", "batch_cap:max_num_seqs=8;" + NULL_PERTURB),
    (12, "contention", "steal:share=0.5,period_s=20"),
]
# Item 2 needs an SLO: a TTFT target at p90 (thresholds file below).
THRESHOLDS = "slo:\n  classes:\n    default: {ttft_ms: 1000, percentile: 90}\n"
ITEMS = ["headline", "latency-model", "slo", "coupling", "tail", "lifecycle", "gpu", "locality", "collectives", "recompile",
         "batching", "quantization", "contention"]


def run(args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def clopper_pearson(k, n, conf=0.95):
    """The exact binomial interval of k successes in n (bisection on the CDF)."""
    def cdf(x, p):
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(x + 1))
    a = (1 - conf) / 2

    def solve(f):
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if f(mid):
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2
    low = 0.0 if k == 0 else solve(lambda p: 1 - cdf(k - 1, p) < a)
    high = 1.0 if k == n else solve(lambda p: cdf(k, p) > a)
    return low, high


def sim(out, seed, perturb):
    run([TOKENSCOPE, "sim", *WORKLOAD, "--seed", str(seed), "--perturb", perturb, "--quiet", "--overwrite",
         "--no-history", "--out", out])


def check(base, cand, thresholds):
    p = subprocess.run([TOKENSCOPE, "check", base, cand, "--thresholds", thresholds, "--format", "json",
                        "--out", os.path.join(cand, "check.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"check {base} {cand}: exit {p.returncode}: {p.stderr.decode()}")
    j = json.loads(p.stdout)
    out = {it["id"]: it["verdict"] for it in j["items"]}
    out["exit"] = p.returncode
    return out


def one_pair(i, work, thresholds, detect):
    d = os.path.join(work, f"pair-{i}")
    base = os.path.join(d, "base")
    sim(base, 1 + i, NULL_PERTURB)
    out = {}
    cands = [("null", NULL_PERTURB)] + ([(f"case-{k}", c[2]) for k, c in enumerate(CASES)] if detect else [])
    for name, perturb in cands:
        cand = os.path.join(d, name)
        sim(cand, 100001 + i, perturb)
        out[name] = check(base, cand, thresholds)
        shutil.rmtree(cand)
    shutil.rmtree(d)
    return out


def report(results, n, workload):
    """Prints the tables from the verdicts; returns the rows and the count of null pairs exiting 1."""
    nulls = len(results)
    shown_workload = " ".join(os.path.relpath(w, ROOT) if os.path.isabs(w) else w for w in WORKLOADS[workload])
    print(f"{n} pairs with every perturbation, {nulls} null pairs; workload ({workload}): tokenscope sim "
          f"{shown_workload}; thresholds: SLO TTFT 1000 ms at p90, other keys at their defaults\n")
    print("| # | item | injected (sim --perturb) | detected | false alarms (null pairs) | headline regressed "
          "| check exit 1 |")
    print("|---:|---|---|---:|---:|---:|---:|")
    rows = []
    for k, (num, title, perturb) in enumerate(CASES):
        item = ITEMS[num]
        det = sum(1 for r in results[:n] if r[f"case-{k}"][item] == "regressed")
        head = sum(1 for r in results[:n] if r[f"case-{k}"]["headline"] == "regressed")
        exit1 = sum(1 for r in results[:n] if r[f"case-{k}"]["exit"] == 1)
        fa = sum(1 for r in results if r["null"][item] == "regressed")
        shown = perturb.replace(";" + NULL_PERTURB, "")
        rows.append({"item": num, "perturb": shown, "detected": det, "false_alarms": fa, "pairs": n,
                     "null_pairs": nulls, "headline_regressed": head, "exit_1": exit1})
        print(f"| {num} | {title} | `{shown}` | {det}/{n} ({100.0 * det / n:.0f}%) | {fa}/{nulls} "
              f"({100.0 * fa / nulls:.1f}%) | {head}/{n} | {exit1}/{n} |")
    # Every item's false alarms on the null pairs, the items no case covers too.
    print("\nfalse alarms per item on the null pairs (regressed / inconclusive / no-data):")
    for item in ITEMS:
        vs = [r["null"][item] for r in results]
        print(f"  {item:14s} {vs.count('regressed'):4d} {vs.count('inconclusive'):4d} {vs.count('no-data'):4d}")
    exits = sum(1 for r in results if r["null"]["exit"] == 1)
    lo, hi = clopper_pearson(exits, nulls)
    print(f"\ncheck exit 1 on null pairs (overall false alarms, every item and headline row on): {exits}/{nulls} "
          f"({100.0 * exits / nulls:.1f}%, 95% interval {100 * lo:.1f}-{100 * hi:.1f}%)")
    return rows, exits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100, help="pairs with every perturbation")
    ap.add_argument("--null-pairs", type=int, default=200, help="null pairs in all (at least --pairs)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="project")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="", help="write verdicts.json here")
    ap.add_argument("--from", dest="from_file", default="",
                    help="print the tables of an earlier --out file instead of running")
    a = ap.parse_args()
    if a.from_file:
        with open(a.from_file) as f:
            j = json.load(f)
        report(j["verdicts"], j["rows"][0]["pairs"], j["workload"])
        return
    global WORKLOAD
    WORKLOAD = WORKLOADS[a.workload]
    a.null_pairs = max(a.null_pairs, a.pairs)
    work = tempfile.mkdtemp(prefix="tokenscope-validation-")
    thresholds = os.path.join(work, "thresholds.yaml")
    with open(thresholds, "w") as f:
        f.write(THRESHOLDS)
    try:
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            results = list(ex.map(lambda i: one_pair(i, work, thresholds, i < a.pairs), range(a.null_pairs)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows, exits = report(results, a.pairs, a.workload)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"workload": a.workload, "rows": rows, "verdicts": results,
                       "overall_false_alarms": exits, "null_pairs": len(results)}, f)


if __name__ == "__main__":
    main()
