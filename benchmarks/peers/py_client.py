#!/usr/bin/env python3
"""REFERENCE PEER, not part of tokenscope: a streaming benchmark client in
Python (asyncio + aiohttp, Debian's python3-aiohttp), written the way the
popular serving benchmarks are (vLLM's benchmark_serving, SGLang's
bench_serving): the schedule's gaps are slept between request launches, every
request is an asyncio task on an aiohttp session, and the SSE stream is read
line by line and each `data:` line parsed with json.loads. It exists only so
that docs/performance.md can show tokenscope's client beside a typical one, on
the same machine, against the same server, in the same run.

usage: py_client.py URL --rate R --num-requests N [--chat] [--max-tokens K]
       [--concurrency C (closed loop)] [--seed S] [--insecure]
Prints one JSON line: offered and achieved rate, send lag percentiles
(launch time - intended time), events parsed (every data: line but [DONE]),
output events (those that carry text), client CPU seconds.
"""
import argparse
import asyncio
import json
import random
import resource
import time

import aiohttp


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, -(-int(p * len(s) * 1000) // 1000) - 1))  # nearest rank
    return s[k]


async def one(session, url, payload, stats, lag):
    stats["lag_ms"].append(lag)
    try:
        async with session.post(url, json=payload) as resp:
            if resp.status != 200:
                await resp.read()
                stats["errors"] += 1
                return
            if not payload.get("stream"):
                json.loads(await resp.read())
                stats["events"] += 1
            else:
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    chunk = json.loads(data)
                    stats["events"] += 1
                    # An output event carries text, as tokenscope records them
                    # (event_offsets_ns): not the usage or finish-only chunks.
                    if any((c.get("delta") or {}).get("content") or c.get("text")
                           for c in chunk.get("choices") or ()):
                        stats["output_events"] += 1
            stats["done"] += 1
    except Exception:  # noqa: BLE001 - a reference client counts and goes on
        stats["errors"] += 1


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--num-requests", type=int, default=1000)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--no-stream", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--insecure", action="store_true", help="https: no certificate check (a self-signed server)")
    a = ap.parse_args()
    if a.chat:
        payload = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    else:
        payload = {"model": "llama-3-8b", "prompt": "hello"}
    payload.update({"max_tokens": a.max_tokens, "ignore_eos": True, "stream": not a.no_stream})
    if not a.no_stream:
        payload["stream_options"] = {"include_usage": True}
    stats = {"lag_ms": [], "events": 0, "output_events": 0, "done": 0, "errors": 0}
    rng = random.Random(a.seed)
    connector = aiohttp.TCPConnector(limit=0, ssl=False) if a.insecure else aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    cpu0 = cpu_seconds()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        if a.concurrency > 0:  # closed loop
            it = iter(range(a.num_requests))

            async def user():
                for _ in it:
                    await one(session, a.url, payload, stats, 0.0)

            await asyncio.gather(*(user() for _ in range(a.concurrency)))
        else:  # open loop, Poisson, as vLLM's benchmark: sleep the gap, then launch
            tasks = []
            intended = start
            for _ in range(a.num_requests):
                lag = (time.perf_counter() - intended) * 1e3
                tasks.append(asyncio.create_task(one(session, a.url, payload, stats, lag)))
                intended += rng.expovariate(a.rate)
                delay = intended - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    cpu = cpu_seconds() - cpu0
    lag = stats["lag_ms"]
    print(json.dumps({
        "client": "python-aiohttp",
        "offered_rps": a.rate if a.concurrency == 0 else None,
        "achieved_rps": stats["done"] / elapsed,
        "completed": stats["done"],
        "errors": stats["errors"],
        "send_lag_p50_ms": percentile(lag, 0.5),
        "send_lag_p99_ms": percentile(lag, 0.99),
        "events": stats["events"],
        "output_events": stats["output_events"],
        "cpu_s": cpu,
        "events_per_cpu_s": stats["events"] / cpu if cpu > 0 else None,
        "elapsed_s": elapsed,
    }))


if __name__ == "__main__":
    asyncio.run(main())
