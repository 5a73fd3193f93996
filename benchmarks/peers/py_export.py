#!/usr/bin/env python3
"""Reference peer for benchmarks/export_speed.sh: requests.jsonl to a Chrome
JSON trace the way a short Python script would do it (json.loads per line,
json.dumps per event), with the same tracks as tokenscope's exporter: lanes
assigned in order of start (heapq), a slice per request and its phases, an
instant per output event. Counter tracks from samples.jsonl are left out.
    py_export.py RUN_DIR OUT
"""
import heapq
import json
import sys


def times(r):
    keys = ("t_sched_ns", "t_dispatch_ns", "t_send_ns", "t_headers_ns", "t_first_token_ns", "t_last_token_ns",
            "t_close_ns")
    ts = [r[k] for k in keys if r.get(k, -1) >= 0]
    send = r.get("t_send_ns", -1)
    ts += [send + o for o in r.get("event_offsets_ns", [])]
    return (min(ts), max(ts)) if ts else (-1, -1)


def main():
    run, out = sys.argv[1], sys.argv[2]
    path = run + "/requests.jsonl"
    extents = []
    with open(path) as f:
        for line in f:
            if line.strip():
                extents.append(times(json.loads(line)))
    origin = min(s for s, _ in extents if s >= 0)
    order = sorted((s, i) for i, (s, _) in enumerate(extents) if s >= 0)
    lane, busy, free, lanes = [0] * len(extents), [], [], 0
    for s, i in order:
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            l = heapq.heappop(free)
        else:
            l, lanes = lanes, lanes + 1
        lane[i] = l
        heapq.heappush(busy, (extents[i][1], l))
    us = lambda t: (t - origin) / 1000.0
    with open(path) as f, open(out, "w") as o:
        o.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        first = True

        def emit(e):
            nonlocal first
            o.write(("" if first else ",") + json.dumps(e, separators=(",", ":")) + "\n")
            first = False

        emit({"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0, "args": {"name": "requests"}})
        for l in range(lanes):
            emit({"ph": "M", "name": "thread_name", "pid": 1, "tid": l + 1, "ts": 0, "args": {"name": f"lane {l + 1}"}})
        k = 0
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            s, e = extents[k]
            tid = lane[k] + 1
            k += 1
            if s < 0:
                continue
            emit({"ph": "X", "cat": "request", "name": f"request {r['id']}", "pid": 1, "tid": tid, "ts": us(s),
                  "dur": (e - s) / 1000.0, "args": {"id": r["id"], "outcome": r["outcome"]}})
            send = r.get("t_send_ns", -1)
            ev = [send + x for x in r.get("event_offsets_ns", [])]
            first_tok = ev[0] if ev else -1
            if r.get("t_sched_ns", -1) >= 0 and send >= r["t_sched_ns"]:
                emit({"ph": "X", "cat": "request", "name": "queued", "pid": 1, "tid": tid, "ts": us(r["t_sched_ns"]),
                      "dur": (send - r["t_sched_ns"]) / 1000.0})
            if send >= 0:
                end = first_tok if first_tok >= 0 else r.get("t_close_ns", e)
                emit({"ph": "X", "cat": "request", "name": "waiting", "pid": 1, "tid": tid, "ts": us(send),
                      "dur": (end - send) / 1000.0})
            if len(ev) > 1:
                emit({"ph": "X", "cat": "request", "name": "decoding", "pid": 1, "tid": tid, "ts": us(ev[0]),
                      "dur": (ev[-1] - ev[0]) / 1000.0})
            for t in ev:
                emit({"ph": "i", "s": "t", "cat": "request", "name": "token", "pid": 1, "tid": tid, "ts": us(t)})
        o.write("]}\n")


if __name__ == "__main__":
    main()
