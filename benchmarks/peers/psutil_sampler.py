#!/usr/bin/python3
"""The peer of benchmarks/sampler_cost.cpp: psutil (Debian python3-psutil)
reading the same quantities, the way a Python monitoring agent would. Prints
the same line format, one per collector and round:
    collector ROUND cpu_ns_per_read wall_ns_per_read samples_per_read
CPU time is time.thread_time_ns() around the reads (the calling thread, as
CLOCK_THREAD_CPUTIME_ID in the C++ collectors).

  psutil_sampler.py [READS] [ROUNDS] [PID]

host:    cpu_times_percent-style deltas (cpu_times), virtual_memory,
         net_io_counters(pernic=True): /proc/stat, /proc/meminfo,
         /proc/net/dev (psutil reads no pressure files).
process: Process(PID).oneshot(): cpu_times, memory_info, num_threads,
         num_ctx_switches: /proc/PID/stat, statm, status.
"""
import os
import sys
import time

import psutil


def host_read():
    t = psutil.cpu_times()
    m = psutil.virtual_memory()
    n = psutil.net_io_counters(pernic=True)
    return len(t) + len(m) + sum(len(v) for v in n.values())


def process_read(p):
    with p.oneshot():
        c = p.cpu_times()
        m = p.memory_info()
        t = p.num_threads()
        s = p.num_ctx_switches()
    return len(c) + len(m) + 1 + len(s)


def measure(name, rnd, reads, fn):
    samples = 0
    c0, w0 = time.thread_time_ns(), time.monotonic_ns()
    for _ in range(reads):
        samples += fn()
    c1, w1 = time.thread_time_ns(), time.monotonic_ns()
    print(f"{name} {rnd} {(c1 - c0) / reads:.0f} {(w1 - w0) / reads:.0f} {samples / reads:.1f}", flush=True)


def main():
    reads = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    pid = int(sys.argv[3]) if len(sys.argv) > 3 else os.getpid()
    for rnd in range(1, rounds + 1):
        measure("psutil_host", rnd, reads, host_read)
        p = psutil.Process(pid)
        measure("psutil_process", rnd, reads, lambda: process_read(p))


if __name__ == "__main__":
    main()
