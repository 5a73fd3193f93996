-- wrk script: one non-streaming completion per request (benchmarks/serve_bench.sh).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt": "Hello", "max_tokens": 1, "ignore_eos": true}'
