#!/usr/bin/env python3
"""The Azure 2023 conversation trace N times over at its own times, as a
native JSONL trace (t_ms, input_tokens, output_tokens): every row N times,
so that N replicas behind round-robin each get one engine's work
(benchmarks/fleet_speed.sh, benchmarks/fleet_profile.sh).
    azure_times_n.py TRACE.csv N > many.jsonl"""
import csv
import datetime
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
n = int(sys.argv[2])
t0 = None
for row in rows:
    t = datetime.datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
    t0 = t0 or t
    ms = (t - t0).total_seconds() * 1e3
    line = '{"t_ms":%.3f,"input_tokens":%s,"output_tokens":%s}' % (ms, row["ContextTokens"], row["GeneratedTokens"])
    for _ in range(n):
        print(line)
