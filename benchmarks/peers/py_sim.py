#!/usr/bin/env python3
"""REFERENCE PEER, not part of tokenscope: a plain-Python discrete-event
simulator of a continuous-batching server, written the way the Python
simulators in this field are (a step loop over request objects), used only
to measure tokenscope sim's speed against and to cross-check its numbers.

It implements the same scheduling and cost model as tokenscope's engine for
a workload without shared prefixes (the Azure conversation trace): FCFS,
running first, token budget with chunked prefill, max_num_seqs, paged KV
blocks with recompute preemption of the newest request, and the roofline
step cost of docs/engine.md for Llama-3-8B on one H100-SXM.

usage: py_sim.py AZURE_CSV  ->  prints one JSON line with the results
"""
import csv
import datetime as dt
import json
import math
import sys

# Llama-3-8B on H100-SXM, tokenscope's defaults (docs/engine.md).
L, H, HEADS, KV, HD, I, V = 32, 4096, 32, 8, 128, 14336, 128256
ATTN = H * HEADS * HD + 2 * H * KV * HD + HEADS * HD * H
MLP = 3 * H * I
ACTIVE = L * (ATTN + MLP)
WEIGHTS = (L * (ATTN + 2 * H + MLP) + V * H) * 2
KV_PER_TOKEN = 2 * L * KV * HD * 2
PEAK, BW = 989e12, 3.35e12 * 0.8
MFU_LIN, MFU_ATT = 0.6, 0.4
OVERHEAD = 0.3e-3 + L * 3e-6
BLOCK = 16
TOTAL_PARAMS = L * (ATTN + MLP + 2 * H) + 2 * V * H + H
GIB = 1024 ** 3
NUM_BLOCKS = int((80 * 0.9 - TOTAL_PARAMS * 2 / GIB - 2.0) * GIB // (BLOCK * KV_PER_TOKEN))
BUDGET, MAX_SEQS, MAX_LEN = 8192, 256, 8192


def step_cost(prefill_tokens, pairs_p, kvread_p, decode, pairs_d, logits):
    tokens = prefill_tokens + decode
    f_lin = 2 * ACTIVE * tokens + 2 * V * H * logits
    lin = max(f_lin / (PEAK * MFU_LIN), WEIGHTS / BW)
    fa = 4 * L * HEADS * HD
    ap = max(fa * pairs_p / (PEAK * MFU_ATT), KV_PER_TOKEN * kvread_p / BW)
    ad = max(fa * pairs_d / (PEAK * MFU_ATT), KV_PER_TOKEN * pairs_d / BW)
    return lin + ap + ad + OVERHEAD


class Req:
    __slots__ = ("arrival", "prompt", "target", "out", "computed", "blocks", "first", "last", "tokens")

    def __init__(self, arrival, prompt, target):
        self.arrival, self.prompt, self.target = arrival, prompt, target
        self.out = self.computed = self.blocks = 0
        self.first = self.last = None
        self.tokens = []


def main(path):
    reqs = []
    t0 = None
    with open(path) as f:
        for row in csv.DictReader(f):
            t = dt.datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            t0 = t if t0 is None else t0
            reqs.append(Req(t - t0, int(row["ContextTokens"]), int(row["GeneratedTokens"])))
    reqs = [r for r in reqs if r.prompt + r.target <= MAX_LEN]
    free = NUM_BLOCKS
    waiting, running, done = [], [], []
    now, nxt, steps = 0.0, 0, 0
    while nxt < len(reqs) or waiting or running:
        if not waiting and not running:
            now = max(now, reqs[nxt].arrival)
        while nxt < len(reqs) and reqs[nxt].arrival <= now:
            waiting.append(reqs[nxt]); nxt += 1
        budget, sched, preempted = BUDGET, [], False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt + r.out - r.computed, budget)
            while True:
                need = -(-(r.computed + n) // BLOCK) - r.blocks
                if need <= free:
                    free -= need; r.blocks += need; sched.append((r, n)); budget -= n; i += 1
                    break
                v = running.pop()
                free += v.blocks; v.blocks = 0; v.computed = 0; waiting.insert(0, v); preempted = True
                sched = [(s, k) for (s, k) in sched if s is not v]
                if v is r:
                    break
        if not preempted:
            while waiting and budget > 0 and len(running) < MAX_SEQS:
                r = waiting[0]
                n = min(r.prompt + r.out, budget)
                need = -(-n // BLOCK)
                if need > free:
                    break
                free -= need; r.blocks = need; waiting.pop(0); running.append(r); sched.append((r, n)); budget -= n
        pt = pp = kp = dec = pd = lg = 0
        for r, n in sched:
            c = r.computed
            samples = c + n == r.prompt + r.out
            if r.out > 0 and n == 1 and samples:
                dec += 1; pd += c + 1
            else:
                pt += n; pp += n * c + n * (n + 1) / 2; kp += c + n
            lg += samples
        now += step_cost(pt, pp, kp, dec, pd, lg)
        steps += 1
        for r, n in sched:
            r.computed += n
            if r.computed == r.prompt + r.out:
                r.out += 1
                r.tokens.append(now)
                if r.first is None:
                    r.first = now
                if r.out >= r.target:
                    running.remove(r); free += r.blocks; r.blocks = 0; done.append(r)
    ttft = sorted((r.first - r.arrival) * 1e3 for r in done)
    tpot = sorted((r.tokens[-1] - r.first) / (r.out - 1) * 1e3 for r in done if r.out > 1)
    pick = lambda v, p: v[max(0, math.ceil(p * len(v)) - 1)]
    print(json.dumps({"requests_completed": len(done), "steps": steps, "virtual_s": now,
                      "output_tokens": sum(r.out for r in done),
                      "ttft_p50_ms": pick(ttft, 0.5), "ttft_p99_ms": pick(ttft, 0.99),
                      "tpot_p50_ms": pick(tpot, 0.5), "tpot_p99_ms": pick(tpot, 0.99)}))


if __name__ == "__main__":
    main(sys.argv[1])
