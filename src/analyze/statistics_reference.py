#!/usr/bin/python3
"""Prints the reference values that src/analyze/statistics_test.cpp hard-codes.

Run with Debian's python3 and python3-scipy (scripts/setup.sh installs them):
    /usr/bin/python3 src/analyze/statistics_reference.py
The tests do not run this script; it is here so that anyone can regenerate
and check every expected value. Each section names the test it feeds and the
scipy call behind each number. The data sets are built from integer
arithmetic only, so the C++ tests build bit-identical ones.
"""

import itertools
import math
import warnings

import numpy as np
from scipy import spatial, special, stats


def show(label, value):
    if isinstance(value, float):
        print(f"  {label} = {value!r}")
    else:
        print(f"  {label} = {value}")


# --- data sets (mirrored in statistics_test.cpp) -----------------------------
SMALL_BASE = [1.1, 2.3, 3.7, 4.2, 5.9]
SMALL_CAND = [2.8, 4.9, 6.1, 7.3, 8.0, 9.4]
TIED_BASE = [1, 2, 2, 3, 3, 3, 4, 5]
TIED_CAND = [2, 3, 4, 4, 5, 5, 6, 7, 7]


def modular_sample(n, multiplier, offset):
    """(i * multiplier) mod 10007 + offset for i in [0, n): distinct within a
    sample for n <= 10007 (10007 is prime), ties across samples."""
    return [float((i * multiplier) % 10007 + offset) for i in range(n)]


LARGE_BASE = modular_sample(2000, 7919, 0)
LARGE_CAND = modular_sample(2500, 104729, 300)
# Sizes 3 and 20, no ties: exact p-value.
FEW_BASE = [24.5, 33.5, 38.5]
FEW_CAND = [float(v) for v in range(1, 41, 2)]  # 1, 3, ..., 39
# Sizes 8 and 200, no ties (base values are halves): exact p-value from a
# larger null distribution.
EIGHT_BASE = [12.5, 40.5, 77.5, 101.5, 130.5, 150.5, 170.5, 199.5]
WIDE_CAND = [float(v) for v in range(200)]
# 30 and 30 without ties: exact only when asked for.
THIRTY_BASE = modular_sample(30, 7919, 0)
THIRTY_CAND = modular_sample(30, 104729, 2000.5)
# CDFs that cross: cand has both a lower and a higher tail than base.
CROSS_BASE = [float(v) for v in range(1, 11)]
CROSS_CAND = [0.5, 0.6, 4.5, 5.5, 6.5, 7.5, 20.0, 21.0, 22.0, 23.0]


def mann_whitney():
    print("Mann-Whitney U (scipy.stats.mannwhitneyu(cand, base, ...))")
    cases = [
        ("small, exact", SMALL_BASE, SMALL_CAND, "exact"),
        ("tied, asymptotic", TIED_BASE, TIED_CAND, "asymptotic"),
        ("large, asymptotic", LARGE_BASE, LARGE_CAND, "asymptotic"),
        ("3 vs 20, exact", FEW_BASE, FEW_CAND, "exact"),
        ("8 vs 200, exact", EIGHT_BASE, WIDE_CAND, "exact"),
        ("30 vs 30, exact on request", THIRTY_BASE, THIRTY_CAND, "exact"),
    ]
    for name, base, cand, method in cases:
        print(f" {name}")
        for alt in ("two-sided", "greater", "less"):
            r = stats.mannwhitneyu(cand, base, alternative=alt, method=method)
            if len(base) <= 8 or len(cand) <= 8:
                auto = stats.mannwhitneyu(cand, base, alternative=alt)
                assert auto.pvalue == r.pvalue, "auto chose the other method"
            show(f"U ({alt})", float(r.statistic))
            show(f"p ({alt})", float(r.pvalue))
        # z without continuity correction, tie-corrected sigma
        # (scipy.stats._mannwhitneyu._get_mwu_z with continuity=False).
        n1, n2 = len(base), len(cand)
        ranks = stats.rankdata(cand + base)
        _, t = np.unique(ranks, return_counts=True)
        n = n1 + n2
        s = math.sqrt(n1 * n2 / 12 * ((n + 1) - float((t**3 - t).sum()) / (n * (n - 1))))
        u = stats.mannwhitneyu(cand, base).statistic
        show("z", float((u - n1 * n2 / 2) / s))
    # The exact null distribution for 3 and 4 values, by enumeration of all
    # C(7, 3) orderings (independent of scipy).
    counts = [0] * 13
    for chosen in itertools.combinations(range(7), 3):
        # U of the 3 chosen (as cand) = rank sum - 3*4/2
        counts[sum(c + 1 for c in chosen) - 6] += 1
    show("counts of U for 3 vs 4 (of 35)", counts)


def exact_null_counts(n1, n2):
    """Counts of U over all orderings, by enumeration (small sizes only)."""
    n = n1 + n2
    counts = [0] * (n1 * n2 + 1)
    for chosen in itertools.combinations(range(n), n1):
        counts[sum(c + 1 for c in chosen) - n1 * (n1 + 1) // 2] += 1
    return counts


def hodges_lehmann():
    print("Hodges-Lehmann shift (median of cand_j - base_i; Bauer's interval)")
    for name, base, cand, conf in [("small", SMALL_BASE, SMALL_CAND, 0.95),
                                   ("small at 90%", SMALL_BASE, SMALL_CAND, 0.90)]:
        diffs = np.sort(np.subtract.outer(np.array(cand), np.array(base)).ravel())
        counts = exact_null_counts(len(base), len(cand))
        total = math.comb(len(base) + len(cand), len(base))
        half_alpha = (1 - conf) / 2
        cdf, k = 0, None
        for u, c in enumerate(counts):
            if (cdf + c) / total > half_alpha:
                break
            cdf += c
            k = u + 1
        print(f" {name}")
        show("estimate (numpy.median)", float(np.median(diffs)))
        show("k", k)
        show("ci_low = diffs[k-1]", float(diffs[k - 1]))
        show("ci_high = diffs[N-k]", float(diffs[len(diffs) - k]))
        show("coverage = 1 - 2 P(U <= k-1)", 1 - 2 * cdf / total)
    # Normal-approximation ranks for the large data set.
    base, cand = LARGE_BASE, LARGE_CAND
    n1, n2 = len(base), len(cand)
    z = stats.norm.ppf(0.975)
    sigma = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    k = math.floor(n1 * n2 / 2 + 0.5 - z * sigma)
    diffs = np.sort(np.subtract.outer(np.array(cand), np.array(base)).ravel())
    print(" large (normal approximation)")
    show("estimate (numpy.median)", float(np.median(diffs)))
    show("k = floor(N/2 + 1/2 - norm.ppf(0.975) sigma)", k)
    show("ci_low", float(diffs[k - 1]))
    show("ci_high", float(diffs[len(diffs) - k]))
    show("coverage = 1 - 2 norm.cdf((k - 1/2 - N/2) / sigma)",
         float(1 - 2 * stats.norm.cdf((k - 0.5 - n1 * n2 / 2) / sigma)))
    # Relative: exp(HL of logs) - 1.
    lb, lc = np.log(np.array(SMALL_BASE)), np.log(np.array(SMALL_CAND))
    ld = np.sort(np.subtract.outer(lc, lb).ravel())
    print(" small, relative (logs)")
    show("estimate = expm1(median of log differences)", float(np.expm1(np.median(ld))))
    show("ci_low = expm1(ld[k-1]), k = 4 as above", float(np.expm1(ld[4 - 1])))
    show("ci_high = expm1(ld[N-k])", float(np.expm1(ld[len(ld) - 4])))


def kolmogorov_smirnov():
    print("Kolmogorov-Smirnov")
    for name, base, cand in [("small", SMALL_BASE, SMALL_CAND), ("tied", TIED_BASE, TIED_CAND),
                             ("large", LARGE_BASE, LARGE_CAND), ("crossing", CROSS_BASE, CROSS_CAND)]:
        two = stats.ks_2samp(base, cand)
        plus = stats.ks_2samp(base, cand, alternative="greater")
        n1, n2 = len(base), len(cand)
        en = n1 * n2 / (n1 + n2)
        print(f" {name}")
        show("d (ks_2samp(base, cand).statistic)", float(two.statistic))
        show("d_plus (ks_2samp(base, cand, alternative='greater').statistic)", float(plus.statistic))
        show("d_plus swapped (ks_2samp(cand, base, alternative='greater').statistic)",
             float(stats.ks_2samp(cand, base, alternative="greater").statistic))
        show("p = kstwobign.sf(sqrt(en) d)", float(stats.kstwobign.sf(math.sqrt(en) * two.statistic)))
        show("p_plus = exp(-2 en d_plus^2)", math.exp(-2 * en * plus.statistic**2))
    for x in (0.3, 0.5, 0.8, 1.0, 1.3627, 2.0):
        show(f"scipy.special.kolmogorov({x})", float(special.kolmogorov(x)))
    show("DKW epsilon(100, 0.05) = sqrt(log(40) / 200)", math.sqrt(math.log(2 / 0.05) / 200))
    show("DKW epsilon(1000, 0.025)", math.sqrt(math.log(2 / 0.025) / 2000))


def tail_values(start=905):
    """Base 1..1000; cand the same up to 900 and, above, 100 values start,
    start + 10, ..., start + 990: the same p90 but a tail ten times as long."""
    base = [float(v) for v in range(1, 1001)]
    cand = [float(v) for v in range(1, 901)] + [float(start + 10 * k) for k in range(100)]
    return base, cand


def tails():
    print("Upper tails above base's p90 with DKW bands (alpha = 0.05)")
    for start in (905, 1001):
        tail_case(start)


def tail_case(start):
    base, cand = tail_values(start)
    print(f" cand's tail from {start}")
    b, c = np.array(base), np.array(cand)
    threshold = b[math.ceil(0.9 * len(b)) - 1]
    points = np.concatenate([[threshold], b[b >= threshold], c[c >= threshold]])
    gaps = (np.searchsorted(b, points, side="right") / len(b) -
            np.searchsorted(c, points, side="right") / len(c))
    where = int(np.argmax(np.abs(gaps)))
    show("threshold", float(threshold))
    show("max gap", float(abs(gaps[where])))
    show("signed gap", float(gaps[where]))
    show("at", float(points[where]))
    eps = math.sqrt(math.log(2 / 0.025) / (2 * 1000))
    show("epsilon each = sqrt(log(2/0.025) / 2000)", eps)


def order_statistic_interval(n, p, conf):
    """core's exact interval: r = max{r : F(r-1) <= a/2}, s = min{s : F(s-1) >= 1-a/2}."""
    half = (1 - conf) / 2
    cdf = stats.binom.cdf(np.arange(n), n, p)  # cdf[k] = F(k)
    r = [rr for rr in range(1, n + 1) if cdf[rr - 1] <= half]
    s = [ss for ss in range(1, n + 1) if cdf[ss - 1] >= 1 - half]
    rank_low = max(r) if r else None
    rank_high = min(s) if s else None
    coverage = (cdf[rank_high - 1] if rank_high else 1.0) - (cdf[rank_low - 1] if rank_low else 0.0)
    return rank_low, rank_high, coverage


def quantiles():
    print("Quantile shift at p90, 95% joint (each interval at 97.5%)")
    base, cand = tail_values()
    b, c = np.array(base), np.array(cand)
    for name, p in (("p90", 0.9), ("p99", 0.99)):
        bl, bh, bc = order_statistic_interval(len(b), p, 0.975)
        cl, ch, cc = order_statistic_interval(len(c), p, 0.975)
        qb = b[math.ceil(p * len(b)) - 1]
        qc = c[math.ceil(p * len(c)) - 1]
        print(f" {name}: base ranks ({bl}, {bh}), cand ranks ({cl}, {ch})")
        show("estimate", float(qc - qb))
        show("ci_low = cand[cl] - base[bh]", float(c[cl - 1] - b[bh - 1]))
        show("ci_high = cand[ch] - base[bl]", float(c[ch - 1] - b[bl - 1]))
        show("relative estimate", float(qc / qb - 1))
        show("relative ci_low", float(c[cl - 1] / b[bh - 1] - 1))
        show("relative ci_high", float(c[ch - 1] / b[bl - 1] - 1))
        show("coverage = product", float(bc * cc))
    # A sample of 20 at p99: the upper end is unbounded.
    print(" n = 20 at p99:", order_statistic_interval(20, 0.99, 0.975))


def entropy():
    print("Entropy and divergences (bits)")
    h = [10, 20, 30, 40]
    show("scipy.stats.entropy([10,20,30,40], base=2)", float(stats.entropy(h, base=2)))
    show("normalised by log2(4)", float(stats.entropy(h, base=2) / 2))
    h2 = [0, 5, 0, 5, 0, 0, 0, 0]
    show("entropy([0,5,0,5,0,0,0,0]) / log2(8)", float(stats.entropy(h2, base=2) / 3))
    p = np.array([10, 0, 5, 5], dtype=float)
    q = np.array([5, 5, 5, 5], dtype=float)
    for a in (0.0, 0.5, 1.0):
        ps, qs = (p + a) / (p.sum() + 4 * a), (q + a) / (q.sum() + 4 * a)
        show(f"KL(P||Q) pseudo {a}: entropy(ps, qs, base=2)", float(stats.entropy(ps, qs, base=2)))
        show(f"JS pseudo {a}: jensenshannon(ps, qs, base=2)**2",
             float(spatial.distance.jensenshannon(ps, qs, base=2) ** 2))
    ps, qs = q / q.sum(), p / p.sum()
    show("KL(Q||P) pseudo 0: entropy(q, p, base=2)", float(stats.entropy(ps, qs, base=2)))


def early_stopping():
    print("Early stopping (LoadGen's rule: binom.cdf(t, n, 1 - p) <= 1 - c)")

    def needed(t, p, c):
        n = t
        while stats.binom.cdf(t, n, 1 - p) > 1 - c:
            n += 1
        return n

    for t, p, c in ((0, 0.9, 0.99), (1, 0.9, 0.99), (10, 0.9, 0.99), (0, 0.99, 0.99), (5, 0.99, 0.95),
                    (172, 0.9, 0.99), (173, 0.9, 0.99), (174, 0.9, 0.99)):
        show(f"queries_needed(t={t}, p={p}, c={c})", needed(t, p, c))
    show("binom.cdf(1, 64, 0.1)", float(stats.binom.cdf(1, 64, 0.1)))
    show("binom.cdf(1, 63, 0.1)", float(stats.binom.cdf(1, 63, 0.1)))
    # The early-stopping estimate's rank: s = min{s : binom.cdf(s-1, n, p) >= c};
    # LoadGen's published runs (p90, 99%): n = 2048 -> 172 discarded, n = 2116
    # -> 178, n = 2145 -> 181, n = 7469 -> 685 (over_bound = discarded + 1).
    for n, p in ((2048, 0.9), (2116, 0.9), (2145, 0.9), (7469, 0.9), (2048, 0.99), (100, 0.5)):
        cdf = stats.binom.cdf(np.arange(n), n, p)
        s = int(np.argmax(cdf >= 0.99)) + 1
        show(f"rank for n={n}, p={p}, c=0.99 (over_bound = n - rank = {n - s})", s)


def more_samples():
    print("More samples needed: ceil(n (half / distance)^2 (1 - 1e-12)) - n")
    for n, half, dist in ((1000, 2.0, 1.0), (1000, 1.5, 1.0), (1000, 1.1, 1.0)):
        show(f"n={n}, half={half}, distance={dist}",
             math.ceil(n * (half / dist) ** 2 * (1 - 1e-12)) - n)


if __name__ == "__main__":
    # ks_2samp's exact method gives up on the large case and says so; its
    # statistic is then h / lcm(n1, n2), as the C++ computes it.
    warnings.simplefilter("ignore", RuntimeWarning)
    mann_whitney()
    hodges_lehmann()
    kolmogorov_smirnov()
    tails()
    quantiles()
    entropy()
    early_stopping()
    more_samples()
