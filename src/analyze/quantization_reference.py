#!/usr/bin/python3
"""Prints the reference values that src/analyze/quantization_test.cpp
hard-codes (check item 11, quantisation drift).

Run with Debian's python3 and python3-scipy (scripts/setup.sh installs them):
    /usr/bin/python3 src/analyze/quantization_reference.py
The tests do not run this script. The data sets are built from integer
arithmetic as in the test; the split of the base's requests in halves
follows analyze/run_data.h split_half() (restated below from
core/random.h's hash_combine64), and the per-request mean logprob is stored
as a float (RequestArrays::logprob_mean), hence np.float32.
"""

import math

import numpy as np
from scipy import stats

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def hash_combine64(a, b):
    return mix64(a ^ ((mix64(b) + 0x9E3779B97F4A7C15 + ((a << 6) & M64) + (a >> 2)) & M64))


def split_half(request_id):
    return hash_combine64(0x6C6F6770726F6273, request_id) & 1


BINS = 81


def bin_of(lp):
    if lp >= 0:
        return 0
    return min(int(-lp / 0.25), 80)


def kl_bits(p, q, pseudo=0.5):
    # scipy.stats.entropy(p, q, base=2) on the smoothed histograms.
    p = np.asarray(p, float) + pseudo
    q = np.asarray(q, float) + pseudo
    return stats.entropy(p, q, base=2)


def show(label, value):
    print(f"{label}: {value!r}")


# ---- ItemQuantization.ExactValuesOnASmallPair
# 40 requests per run, ids 0..39, four output tokens each.
def base_logprobs(i):
    return [-0.1, -0.3 - 0.25 * (i % 3), -1.0 - 0.5 * (i % 5), -2.6]


def cand_logprobs(i):
    return [-0.1, -0.6 - 0.25 * (i % 3), -2.0 - 0.5 * (i % 5), -4.1]


def run(fn):
    pooled = [0] * BINS
    halves = [[0] * BINS, [0] * BINS]
    means = []
    for i in range(40):
        lps = fn(i)
        for lp in lps:
            pooled[bin_of(lp)] += 1
            halves[split_half(i)][bin_of(lp)] += 1
        s = 0.0
        for lp in lps:
            s += max(-100.0, min(0.0, lp))
        means.append(float(np.float32(s / len(lps))))
    return pooled, halves, means


bp, bh, bm = run(base_logprobs)
cp, ch, cm = run(cand_logprobs)
print("base halves (requests):", sum(split_half(i) == 0 for i in range(40)), sum(split_half(i) == 1 for i in range(40)))
kl = kl_bits(bp, cp)
split = kl_bits(bh[0], bh[1])
show("kl_bits  scipy.stats.entropy(base+0.5, cand+0.5, base=2)", kl)
show("split_half_kl_bits  scipy.stats.entropy(half0+0.5, half1+0.5, base=2)", split)
show("threshold max(0.05, 3 x split)", max(0.05, 3 * split))
mb, mc = np.mean(bm), np.mean(cm)
change = mc - mb
se = math.sqrt(np.var(bm, ddof=1) / len(bm) + np.var(cm, ddof=1) / len(cm))
z = stats.norm.ppf(0.975)
show("mean_logprob base  numpy.mean of float32 per-request means", mb)
show("mean_logprob candidate", mc)
show("change", change)
show("ci_low  change - norm.ppf(0.975) * sqrt(var_b/n_b + var_c/n_c), ddof=1", change - z * se)
show("ci_high", change + z * se)
