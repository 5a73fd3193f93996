#!/usr/bin/env python3
"""The peer of `tokenscope history` (benchmarks/history_speed.sh): the naive
way to list past runs today. Walks the run directories, reads each run.json
with json.load, builds a pandas DataFrame with the columns the history table
shows (finished time from run.json's modification time, command, target,
workload, TTFT p99, TPOT p99, requests/s, path), sorts it newest first and
prints it.
  py_history.py RUNS_DIR
"""
import json
import os
import sys
import zlib

import pandas as pd


def workload_key(requested):
    workload = {k: v for k, v in (requested.get("workload") or {}).items()
                if k != "seed" and not k.startswith("seed_")}
    return "%08x" % zlib.crc32(json.dumps(workload, sort_keys=True).encode())


def main():
    rows = []
    for entry in os.scandir(sys.argv[1]):
        path = os.path.join(entry.path, "run.json")
        try:
            finished = os.stat(path).st_mtime
        except FileNotFoundError:
            continue
        with open(path) as f:
            run = json.load(f)
        command = run.get("tool", {}).get("command")
        requested = run.get("settings", {}).get("requested", {})
        summary = run.get("summary") or {}
        target = (requested.get("target") or {}).get("url")
        rows.append({
            "finished": finished,
            "command": command,
            "target": "sim" if command == "sim" else (target or "in-process"),
            "workload": workload_key(requested),
            "ttft_p99": (summary.get("ttft_ms") or {}).get("p99"),
            "tpot_p99": (summary.get("tpot_ms") or {}).get("p99"),
            "req_s": summary.get("request_throughput_rps"),
            "path": entry.path,
        })
    df = pd.DataFrame(rows)
    df["finished"] = pd.to_datetime(df["finished"], unit="s")
    df = df.sort_values("finished", ascending=False)
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
