-- wrk script: streaming completions of a fixed length (benchmarks/serve_bench.sh).
-- TOKENS comes from the environment (default 50).
local tokens = os.getenv("TOKENS") or "50"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"prompt": "Hello", "max_tokens": ' .. tokens .. ', "ignore_eos": true, "stream": true}'
