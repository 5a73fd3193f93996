#!/usr/bin/env python3
"""Reference values for change_point_test.cpp (not run by the tests).

An independent, deliberately slow implementation of the change point method
that change_point.h describes: the energy divergence evaluated directly from
its definition for every (tau, kappa), the t-test from
scipy.stats.ttest_ind_from_stats, and the split and merge steps. Run with
Debian's python3 (numpy 1.24, scipy 1.10):

    /usr/bin/python3 src/analyze/change_point_reference.py

It prints every value that change_point_test.cpp hard-codes. The Otava
results that the test asserts are Otava's own published expectations (see the
test); this script shows that the method as written here reproduces them.
"""
import numpy as np
from scipy.stats import ttest_ind_from_stats


def energy_divergence(z, tau, kappa):
    x, y = z[:tau], z[tau:kappa]
    n, m = len(x), len(y)
    between = np.abs(x[:, None] - y[None, :]).sum()
    within_x = np.triu(np.abs(x[:, None] - x[None, :]), 1).sum()
    within_y = np.triu(np.abs(y[:, None] - y[None, :]), 1).sum()
    q = 2.0 * between
    if n >= 2:
        q -= 2.0 * m / (n - 1) * within_x
    if m >= 2:
        q -= 2.0 * n / (m - 1) * within_y
    return q / (n + m)


def best_split(z):
    """First (tau, kappa) in lexicographic order with the largest divergence."""
    best = None
    for tau in range(1, len(z)):
        for kappa in range(tau + 1, len(z) + 1):
            q = energy_divergence(z, tau, kappa)
            if best is None or q > best[0]:
                best = (q, tau, kappa)
    return best


def compare(left, right, otava):
    """Means, t and two-sided p; population (otava) or sample deviations."""
    ddof = 0 if otava else 1
    ml, mr = np.mean(left), np.mean(right)
    sl = np.std(left, ddof=ddof) if len(left) >= 2 else 0.0
    sr = np.std(right, ddof=ddof) if len(right) >= 2 else 0.0
    t, p = 0.0, 1.0
    if len(left) + len(right) - 2 > 0:
        t, p = ttest_ind_from_stats(ml, sl, len(left), mr, sr, len(right))
        if np.isnan(p):
            t, p = 0.0, 1.0
    fwd = 0.0 if ml == 0 else mr / ml - 1
    bwd = 0.0 if mr == 0 else ml / mr - 1
    return dict(mean_before=ml, mean_after=mr, t=t, p=p, rel=fwd, mag=max(abs(fwd), abs(bwd)))


def stats_at(z, cps, k, otava):
    b = 0 if k == 0 else cps[k - 1]
    e = len(z) if k + 1 == len(cps) else cps[k + 1]
    return compare(z[b:cps[k]], z[cps[k]:e], otava)


def divide_window(z, begin, end, pvalue, otava):
    cps = []
    while True:
        bounds = [begin] + cps + [end]
        cands = []
        for a, c in zip(bounds[:-1], bounds[1:]):
            if c - a >= 2:
                q, tau, _ = best_split(z[a:c])
                cands.append((q, a + tau, a, c))
        if not cands:
            return cps
        q, i, a, c = max(cands, key=lambda t: t[0])
        if not compare(z[a:i], z[i:c], otava)["p"] <= pvalue:
            return cps
        cps = sorted(cps + [i])


def first_pass(p):
    return p * 10 if p < 0.05 else (p * 2 if p < 0.5 else p)


def weak(z, window_len, max_pvalue, otava=True):
    start, step, found = 0, window_len // 2, set()
    while start < len(z):
        end = min(start + window_len, len(z))
        new = divide_window(z, start, end, first_pass(max_pvalue), otava)
        start = max(new[-1] if new else 0, start + step)
        found.update(new)
    return sorted(found)


def change_points(z, window_len=50, max_pvalue=0.001, min_magnitude=0.0, otava=True):
    z = np.asarray(z, dtype=float)
    cps = weak(z, window_len, max_pvalue, otava)
    st = [stats_at(z, cps, k, otava) for k in range(len(cps))]
    while cps:
        k = max(range(len(cps)), key=lambda i: st[i]["p"])
        if st[k]["p"] < max_pvalue:
            k = min(range(len(cps)), key=lambda i: st[i]["mag"])
            if st[k]["mag"] > min_magnitude:
                break
        del cps[k], st[k]
        for r in ([k, k + 1] if otava else [k - 1, k]):
            if 0 <= r < len(cps):
                st[r] = stats_at(z, cps, r, otava)
    return cps, [stats_at(z, cps, k, otava) for k in range(len(cps))]


# Apache Otava tests/analysis_test.py, test_single_series.
SINGLE = [1.02, 0.95, 0.99, 1.00, 1.12, 1.00, 1.01, 0.98, 1.01, 0.96,
          0.50, 0.51, 0.48, 0.48, 0.55, 0.50, 0.49, 0.51, 0.50, 0.49]
# Apache Otava tests/change_point_divisive_test.py, SEQUENCE.
SEQUENCE = [0.3, 2.4, 1.5, -0.9, -0.5, 99.7, 98.3, 99.1, 149.0, 149.7, 149.5, 149.1, 148.8, 150.0]
# Apache Otava tests/tigerbeetle_test.py (the TigerBeetle demo data of Nyrkiö).
TIGERBEETLE = [26705, 26475, 26641, 26806, 26835, 26911, 26564, 26812, 26874, 26682, 15672, 26745, 26460, 26977, 26851, 23412, 23547, 23674, 23519, 23670, 23662, 23462, 23750, 23717, 23524, 23588, 23687, 23793, 23937, 23715, 23570, 23730, 23690, 23699, 23670, 23860, 23988, 23652, 23681, 23798, 23728, 23604, 23523, 23412, 23685, 23773, 23771, 23718, 23409, 23739, 23674, 23597, 23682, 23680, 23711, 23660, 23990, 23938, 23742, 23703, 23536, 24363, 24414, 24483, 24509, 24944, 24235, 24560, 24236, 24667, 24730, 28346, 28437, 28436, 28057, 28217, 28456, 28427, 28398, 28250, 28331, 28222, 28726, 28578, 28345, 28274, 28514, 28590, 28449, 28305, 28411, 28788, 28404, 28821, 28580, 27483, 26805, 27487, 27124, 26898, 27295, 26951, 27312, 27660, 27154, 27050, 26989, 27193, 27503, 27326, 27375, 27513, 27057, 27421, 27574, 27609, 27123, 27824, 27644, 27394, 27836, 27949, 27702, 27457, 27272, 28207, 27802, 27516, 27586, 28005, 27768, 28543, 28237, 27915, 28437, 28342, 27733, 28296, 28524, 28687, 28258, 28611, 29360, 28590, 29641, 28965, 29474, 29256, 28611, 28205, 28539, 27962, 28398, 28509, 28240, 28592, 28102, 28461, 28578, 28669, 28507, 28535, 28226, 28536, 28561, 28087, 27953, 28398, 28007, 28518, 28337, 28242, 28607, 28545, 28514, 28377, 28010, 28412, 28633, 28576, 28195, 28637, 28724, 28466, 28287, 28719, 28425, 28860, 28842, 28604, 28327, 28216, 28946, 28918, 29287, 28725, 29148, 29541, 29137, 29628, 29087, 28612, 29154, 29108, 28884, 29234, 28695, 28969, 28809, 28695, 28634, 28916, 29852, 29389, 29757, 29531, 29363, 29251, 29552, 29561, 29046, 29795, 29022, 29395, 28921, 29739, 29257, 29455, 29376, 29528, 28909, 29492, 28984, 29621, 29026, 29457, 29102, 29114, 28924, 29162, 29259, 29554, 29616, 29211, 29367, 29460, 28836, 29645, 29586, 28848, 29324, 28969, 29150, 29243, 29081, 29312, 28923, 29272, 29117, 29072, 29529, 29737, 29652, 29612, 29856, 29012, 30402, 29969, 29309, 29439, 29285, 29421, 29023, 28772, 29692, 29416, 29267, 29542, 29904, 30045, 29739, 29945, 29141, 29163, 29765, 29197, 29441, 28910, 29504, 29614, 29643, 29506, 29420, 29672, 29432, 29784, 29888, 29309, 29247, 29816, 29254, 29813, 29451, 29382, 29618, 28558, 29845, 29499, 29283, 29184, 29246, 28790, 29952, 29145, 29415, 30437, 29227, 29605, 29859, 29156, 29807, 29406, 29734, 29861, 29140, 29983, 29832, 29919, 29896, 29991, 29266, 29001, 29459, 29548, 29310, 29042, 29303, 29894, 29091, 29018, 29537, 29614, 29180, 29736, 29500, 29218, 29581, 28906, 28542, 29306, 28987, 29878, 28865, 30272, 29707, 29662, 29815, 30492, 29347, 30096, 29054, 30238, 28813, 31895, 28915]

if __name__ == "__main__":
    np.set_printoptions(precision=17)
    print("energy_divergence([1,2,4], 1, 3) =", energy_divergence(np.array([1.0, 2, 4]), 1, 3))
    print("energy_divergence(SEQUENCE, 5, 8) =", repr(energy_divergence(np.array(SEQUENCE), 5, 8)))
    print("best_split(SEQUENCE) =", best_split(np.array(SEQUENCE)))
    print("best_split(SINGLE) =", best_split(np.array(SINGLE)))
    # scipy.stats.ttest_ind_from_stats(equal_var=True)
    for args in [(1.0, 0.5, 10, 1.3, 0.7, 12), (5.0, 2.0, 3, 1.0, 1.0, 2), (0.0, 1.0, 100, 0.1, 1.2, 80)]:
        t, p = ttest_ind_from_stats(*args)
        print("ttest_ind_from_stats", args, "=", repr(t), repr(p))
    print("weak(SEQUENCE, 14, 0.001) =", weak(np.array(SEQUENCE), 14, 0.001))
    cps, st = change_points(SINGLE, window_len=10, max_pvalue=0.0001)
    print("change_points(SINGLE, 10, 0.0001) =", cps)
    for k, s in zip(cps, st):
        print("  index", k, {key: repr(v) for key, v in s.items()})
    for otava in (True, False):
        cps, st = change_points(SEQUENCE, window_len=14, max_pvalue=0.001, otava=otava)
        print("change_points(SEQUENCE, 14, 0.001, otava=%s) =" % otava, cps)
        for k, s in zip(cps, st):
            print("  index", k, {key: repr(v) for key, v in s.items()})
    if TIGERBEETLE:
        for p, mag in [(0.01, 0.05), (0.001, 0.0), (0.1, 0.0)]:
            for otava in (True, False):
                print("tigerbeetle window 30 p", p, "min_magnitude", mag, "otava", otava, "=",
                      change_points(TIGERBEETLE, 30, p, mag, otava)[0])
