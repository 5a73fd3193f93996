#!/usr/bin/env python3
"""Writes a vLLM-sized /metrics page to stdout, for the exposition benchmarks.

   benchmarks/vllm_exposition.py [--engines 6] [--openmetrics] [--seed 1]

The families are those a vLLM V1 OpenAI server exposes (vLLM's "Production
Metrics" documentation and its PrometheusStatLogger: gauge, counter and
histogram names, the model_name / engine labels, the bucket boundaries),
one label set per engine (data-parallel ranks), beside what the Python
process and its HTTP middleware add to the same page (prometheus_client's
process_* / python_* collectors, prometheus-fastapi-instrumentator's http_*
series). The text is laid out as prometheus_client writes it: in 0.0.4, a
counter family is named with _total and its _created series are gauges of
their own; in OpenMetrics (--openmetrics), families are named without
_total, _created samples sit in their family and the page ends with # EOF.
Help texts are short paraphrases. Values are random but consistent
(cumulative buckets, count = +Inf bucket), from a fixed seed. The series
count goes to stderr (the default, 6 engines, gives about 2,100 series and
300 KB).
"""
import argparse
import random
import sys

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CREATED = 1733036800.123456

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKENS_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def buckets_1_2_5(limit):
    """1, 2, 5, 10, 20, 50, ... up to limit (vLLM's token-count buckets)."""
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return out
            out.append(m * scale)
        scale *= 10


TOKEN_BUCKETS = buckets_1_2_5(131072)  # max_model_len of Llama 3.1


def number(v):
    """A value as prometheus_client writes it (Python's repr of a float)."""
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def labels(pairs):
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


class Page:
    def __init__(self, openmetrics, rng):
        self.om = openmetrics
        self.rng = rng
        self.lines = []
        self.series = 0

    def sample(self, name, pairs, value):
        self.lines.append(f"{name}{labels(pairs)} {number(value)}")
        self.series += 1

    def header(self, name, kind, help_text):
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def gauge(self, name, help_text, label_sets, value):
        self.header(name, "gauge", help_text)
        for pairs in label_sets:
            self.sample(name, pairs, value())

    def counter(self, name, help_text, label_sets, value, created=True):
        """name without _total; created: with _created series (not for the process and GC collectors)."""
        self.header(name if self.om else name + "_total", "counter", help_text)
        for pairs in label_sets:
            self.sample(name + "_total", pairs, value())
        if not created:
            return
        if self.om:
            for pairs in label_sets:
                self.sample(name + "_created", pairs, CREATED)
        else:
            self.header(name + "_created", "gauge", help_text)
            for pairs in label_sets:
                self.sample(name + "_created", pairs, CREATED)

    def histogram(self, name, help_text, label_sets, bounds, scale):
        self.header(name, "histogram", help_text)
        for pairs in label_sets:
            count, total = 0, 0.0
            for b in bounds + [float("inf")]:
                step = self.rng.randint(0, 40)
                count += step
                total += step * (b if b != float("inf") else bounds[-1] * 2) * scale
                self.sample(name + "_bucket", pairs + [("le", number(b))], count)
            self.sample(name + "_count", pairs, count)
            self.sample(name + "_sum", pairs, round(total, 6))
        self.created(name, help_text, label_sets)

    def summary(self, name, help_text, label_sets):
        self.header(name, "summary", help_text)
        for pairs in label_sets:
            n = self.rng.randint(1, 5000)
            self.sample(name + "_count", pairs, n)
            self.sample(name + "_sum", pairs, n * self.rng.randint(100, 4000))
        self.created(name, help_text, label_sets)

    def created(self, name, help_text, label_sets):
        if not self.om:
            self.header(name + "_created", "gauge", help_text)
        for pairs in label_sets:
            self.sample(name + "_created", pairs, CREATED)


def build(engines, openmetrics, seed):
    rng = random.Random(seed)
    p = Page(openmetrics, rng)
    # prometheus_client's default collectors.
    gens = [[("generation", str(g))] for g in range(3)]
    p.counter("python_gc_objects_collected", "Objects collected during gc", gens, lambda: rng.randint(0, 90000),
              created=False)
    p.counter("python_gc_objects_uncollectable", "Uncollectable objects found during GC", gens, lambda: 0,
              created=False)
    p.counter("python_gc_collections", "Number of times this generation was collected", gens,
              lambda: rng.randint(0, 5000), created=False)
    if openmetrics:
        p.lines.append("# HELP python Python platform information")
        p.lines.append("# TYPE python info")
        p.sample("python_info", [("implementation", "CPython"), ("major", "3"), ("minor", "12"),
                                 ("patchlevel", "8"), ("version", "3.12.8")], 1)
    else:
        p.gauge("python_info", "Python platform information",
                [[("implementation", "CPython"), ("major", "3"), ("minor", "12"), ("patchlevel", "8"),
                  ("version", "3.12.8")]], lambda: 1)
    p.gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", [[]], lambda: 58_412_261_376)
    p.gauge("process_resident_memory_bytes", "Resident memory size in bytes.", [[]], lambda: 6_120_431_616)
    p.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", [[]],
            lambda: 1733036790.27)
    p.counter("process_cpu_seconds", "Total user and system CPU time spent in seconds.", [[]], lambda: 1843.21,
              created=False)
    p.gauge("process_open_fds", "Number of open file descriptors.", [[]], lambda: 117)
    p.gauge("process_max_fds", "Maximum number of open file descriptors.", [[]], lambda: 1048576)

    # vLLM V1, one label set per engine.
    per_engine = [[("model_name", MODEL), ("engine", str(e))] for e in range(engines)]
    p.gauge("vllm:num_requests_running", "Requests in the model execution batches.", per_engine,
            lambda: rng.randint(0, 256))
    p.gauge("vllm:num_requests_waiting", "Requests waiting to be processed.", per_engine,
            lambda: rng.randint(0, 64))
    p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 means 100 percent.", per_engine,
            lambda: round(rng.random(), 6))
    p.counter("vllm:prefix_cache_queries", "Prefix cache queries, in queried tokens.", per_engine,
              lambda: rng.randint(10**5, 10**7))
    p.counter("vllm:prefix_cache_hits", "Prefix cache hits, in cached tokens.", per_engine,
              lambda: rng.randint(10**4, 10**6))
    p.counter("vllm:num_preemptions", "Cumulative number of preemptions.", per_engine, lambda: rng.randint(0, 50))
    p.counter("vllm:prompt_tokens", "Prefill tokens processed.", per_engine, lambda: rng.randint(10**5, 10**7))
    p.counter("vllm:generation_tokens", "Generation tokens processed.", per_engine,
              lambda: rng.randint(10**5, 10**7))
    reasons = [pairs + [("finished_reason", r)] for pairs in per_engine for r in ("stop", "length", "abort")]
    p.counter("vllm:request_success", "Successfully processed requests.", reasons, lambda: rng.randint(0, 5000))
    p.histogram("vllm:request_prompt_tokens", "Prefill tokens per request.", per_engine, TOKEN_BUCKETS, 1)
    p.histogram("vllm:request_generation_tokens", "Generation tokens per request.", per_engine, TOKEN_BUCKETS, 1)
    p.histogram("vllm:iteration_tokens_total", "Tokens per engine step.", per_engine, ITERATION_TOKENS_BUCKETS, 1)
    p.histogram("vllm:request_max_num_generation_tokens", "Maximum generation tokens per request.", per_engine,
                TOKEN_BUCKETS, 1)
    p.histogram("vllm:request_params_n", "The n request parameter.", per_engine, [1, 2, 5, 10, 20], 1)
    p.histogram("vllm:request_params_max_tokens", "The max_tokens request parameter.", per_engine,
                TOKEN_BUCKETS, 1)
    p.histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.", per_engine,
                TTFT_BUCKETS, 0.5)
    p.histogram("vllm:time_per_output_token_seconds", "Time per output token in seconds.", per_engine,
                ITL_BUCKETS, 0.5)
    p.histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.", per_engine,
                ITL_BUCKETS, 0.5)
    for name, what in (("e2e_request_latency", "End-to-end request latency"),
                       ("request_queue_time", "Time spent in the WAITING phase"),
                       ("request_inference_time", "Time spent in the RUNNING phase"),
                       ("request_prefill_time", "Time spent in the PREFILL phase"),
                       ("request_decode_time", "Time spent in the DECODE phase")):
        p.histogram(f"vllm:{name}_seconds", f"{what}, in seconds.", per_engine, REQUEST_LATENCY_BUCKETS, 0.5)
    p.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
            [[("block_size", "16"), ("cache_dtype", "auto"), ("enable_prefix_caching", "True"),
              ("gpu_memory_utilization", "0.9"), ("num_gpu_blocks", "27342"), ("engine", str(e))]
             for e in range(engines)], lambda: 1)

    # prometheus-fastapi-instrumentator.
    routes = [("/v1/completions", "POST"), ("/v1/chat/completions", "POST"), ("/v1/models", "GET"),
              ("/health", "GET"), ("/metrics", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
              ("/v1/embeddings", "POST")]
    statuses = [[("handler", h), ("method", m), ("status", s)] for h, m in routes for s in ("2xx", "4xx")[
        : 2 if m == "POST" else 1]]
    p.counter("http_requests", "Total number of requests by method, status and handler.", statuses,
              lambda: rng.randint(0, 100000))
    handlers = [[("handler", h)] for h, _ in routes]
    p.summary("http_request_size_bytes", "Content length of incoming requests by handler.", handlers)
    p.summary("http_response_size_bytes", "Content length of outgoing responses by handler.", handlers)
    p.histogram("http_request_duration_highr_seconds", "Latency with many buckets but no API specific labels.",
                [[]], [0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
                       5.0, 7.5, 10.0, 30.0, 60.0], 0.5)
    p.histogram("http_request_duration_seconds", "Latency with only few buckets by handler.",
                [[("handler", h), ("method", m)] for h, m in routes], [0.1, 0.5, 1.0], 0.5)
    if openmetrics:
        p.lines.append("# EOF")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", type=int, default=6, help="engine label sets (data-parallel ranks)")
    ap.add_argument("--openmetrics", action="store_true", help="OpenMetrics 1.0 text instead of 0.0.4")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    page = build(args.engines, args.openmetrics, args.seed)
    text = "\n".join(page.lines) + "\n"
    sys.stdout.write(text)
    print(f"{page.series} series, {len(text.encode())} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
