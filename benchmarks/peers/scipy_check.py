#!/usr/bin/env python3
"""The naive way to compare two runs today, as the peer of `tokenscope check`
(benchmarks/check_speed.sh): pandas reads both runs' requests.jsonl, computes
TTFT, TPOT and E2E per request, their p50/p99/p99.9, and scipy tests each
metric (Mann-Whitney U and two-sample Kolmogorov-Smirnov). Prints one line
per metric. Debian's python3 with python3-pandas and python3-scipy.

  python3 scipy_check.py BASE_DIR CAND_DIR
"""
import json
import sys

import numpy as np
import pandas as pd
from scipy import stats


def metrics(run_dir):
    rows = []
    with open(f"{run_dir}/requests.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("outcome") != "ok" or r.get("warmup"):
                continue
            rows.append((r["t_send_ns"], r["t_first_token_ns"], r["t_last_token_ns"], r.get("output_tokens") or 0))
    df = pd.DataFrame(rows, columns=["send", "first", "last", "out"])
    df["ttft"] = (df["first"] - df["send"]) / 1e6
    df["e2e"] = (df["last"] - df["send"]) / 1e6
    df["tpot"] = np.where(df["out"] > 1, (df["last"] - df["first"]) / 1e6 / (df["out"] - 1), np.nan)
    return df


def main():
    base, cand = metrics(sys.argv[1]), metrics(sys.argv[2])
    for m in ("ttft", "tpot", "e2e"):
        b, c = base[m].dropna().to_numpy(), cand[m].dropna().to_numpy()
        qb = np.percentile(b, [50, 99, 99.9])
        qc = np.percentile(c, [50, 99, 99.9])
        mw = stats.mannwhitneyu(c, b)
        ks = stats.ks_2samp(b, c)
        print(f"{m}: p50 {qb[0]:.2f} -> {qc[0]:.2f}, p99 {qb[1]:.2f} -> {qc[1]:.2f}, p99.9 {qb[2]:.2f} -> {qc[2]:.2f}; "
              f"Mann-Whitney p {mw.pvalue:.3g}, KS p {ks.pvalue:.3g}")


if __name__ == "__main__":
    main()
