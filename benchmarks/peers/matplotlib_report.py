#!/usr/bin/env python3
"""Reference peer for benchmarks/report_speed.sh: the charts of a run the way
genai-perf's --generate-plots makes them from its profile export, here with
matplotlib (Agg backend, Debian's python3-matplotlib) instead of plotly, from
tokenscope's requests.jsonl: json.loads per line; per request TTFT, its mean
inter-token latency, E2E latency, TPOT and output tokens/s (numpy); then PNG
files: CDFs and histograms of the latencies, box plots of TTFT and E2E (as
genai-perf's "Time to First Token" and "Request Latency" plots), TTFT against
the prompt length, the prompt-to-output length heat map, TTFT against time
(every request a point), and requests and output tokens per second over time.
samples.jsonl (server series) is not read: genai-perf has none.
    matplotlib_report.py RUN_DIR OUT_DIR
Prints how many requests it read and PNG files it wrote.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_requests(path):
    t_send, ttft, itl, e2e, tpot, tokens, prompt, t_done = [], [], [], [], [], [], [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if r.get("warmup") or r.get("outcome") != "ok":
                continue
            send = r.get("t_send_ns", -1)
            offsets = r.get("event_offsets_ns") or []
            first = r.get("t_first_token_ns", -1)
            last = r.get("t_last_token_ns", -1)
            if first < 0 and offsets:
                first = send + offsets[0]
            if last < 0 and offsets:
                last = send + offsets[-1]
            if send < 0 or first < 0 or last < 0:
                continue
            n = r.get("output_tokens", -1)
            gaps = [b - a for a, b in zip(offsets, offsets[1:])]
            t_send.append(send)
            ttft.append((first - send) / 1e6)
            itl.append(sum(gaps) / len(gaps) / 1e6 if gaps else float("nan"))
            e2e.append((last - send) / 1e6)
            tpot.append((last - first) / 1e6 / (n - 1) if n >= 2 else float("nan"))
            tokens.append(max(n, 0))
            prompt.append(r.get("prompt_tokens", -1))
            t_done.append(last)
    a = {k: np.asarray(v, dtype=float) for k, v in
         dict(t_send=t_send, ttft=ttft, itl=itl, e2e=e2e, tpot=tpot, tokens=tokens, prompt=prompt,
              t_done=t_done).items()}
    with np.errstate(divide="ignore", invalid="ignore"):
        a["tokens_per_s"] = np.where(a["e2e"] > 0, a["tokens"] / (a["e2e"] / 1e3), np.nan)
    return a


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)


def main():
    run, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    a = read_requests(os.path.join(run, "requests.jsonl"))
    n = len(a["ttft"])
    written = []
    metrics = [("ttft", "TTFT (ms)"), ("itl", "mean inter-token latency per request (ms)"),
               ("e2e", "E2E latency (ms)"), ("tpot", "TPOT (ms)"),
               ("tokens_per_s", "output tokens/s per request")]
    for key, label in metrics:
        v = a[key][np.isfinite(a[key])]
        if v.size == 0:
            continue
        fig, (cdf, hist) = plt.subplots(1, 2, figsize=(12, 4))
        s = np.sort(v)
        cdf.plot(s, np.arange(1, s.size + 1) / s.size)
        cdf.set_xscale("log" if s[0] > 0 else "linear")
        cdf.set_xlabel(label)
        cdf.set_ylabel("fraction of requests")
        cdf.set_title(f"CDF of {label}")
        hist.hist(v, bins=100)
        hist.set_xlabel(label)
        hist.set_ylabel("requests")
        hist.set_title(f"Distribution of {label}")
        save(fig, out, f"{key}_distribution.png", written)
    # genai-perf's box plots: "Time to First Token" and "Request Latency".
    for key, label in (("ttft", "Time to First Token (ms)"), ("e2e", "Request Latency (ms)")):
        fig, ax = plt.subplots(figsize=(6, 5))
        ax.boxplot(a[key][np.isfinite(a[key])], vert=True)
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
        save(fig, out, f"{key}_box.png", written)
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.scatter(a["prompt"], a["ttft"], s=1, alpha=0.3)
    ax.set_xlabel("input sequence length (tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("Time to First Token vs Input Sequence Length")
    save(fig, out, "ttft_vs_input_length.png", written)
    fig, ax = plt.subplots(figsize=(8, 6))
    h = ax.hist2d(a["prompt"], a["tokens"], bins=50, cmap="viridis")
    fig.colorbar(h[3], ax=ax, label="requests")
    ax.set_xlabel("input sequence length (tokens)")
    ax.set_ylabel("output sequence length (tokens)")
    ax.set_title("Distribution of Input Sequence Lengths to Output Sequence Lengths")
    save(fig, out, "input_to_output_length.png", written)
    origin = a["t_send"].min() if n else 0
    t_s = (a["t_send"] - origin) / 1e9
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.scatter(t_s, a["ttft"], s=1, alpha=0.3)
    ax.set_yscale("log")
    ax.set_xlabel("time from the run's start (s)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT over time, every request")
    save(fig, out, "ttft_over_time.png", written)
    done_s = (a["t_done"] - origin) / 1e9
    span = max(done_s.max() if n else 1.0, 1e-9)
    window = max(span / 300, 0.1)
    edges = np.arange(0, span + window, window)
    completed, _ = np.histogram(done_s, bins=edges)
    out_tokens, _ = np.histogram(done_s, bins=edges, weights=a["tokens"])
    fig, (rate, tput) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    rate.plot(edges[:-1], completed / window)
    rate.set_ylabel("completed requests/s")
    rate.set_title(f"Throughput over time ({window:.1f} s windows)")
    tput.plot(edges[:-1], out_tokens / window)
    tput.set_ylabel("output tokens/s")
    tput.set_xlabel("time from the run's start (s)")
    save(fig, out, "throughput_over_time.png", written)
    print(f"{n} requests read, {len(written)} PNG files written")


if __name__ == "__main__":
    main()
