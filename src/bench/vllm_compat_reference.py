#!/usr/bin/python3
"""The reference for vllm_compat_test.cpp: vLLM's serving-benchmark result
(benchmarks/benchmark_serving.py --save-result, run with
--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,95,99),
computed by numpy from tokenscope request records, independently of
src/bench/vllm_compat.cpp.

    vllm_compat_reference.py IN.json OUT.json

IN.json: {"info": {...VllmCompatInfo...}, "slo": {"ttft": ms, ...} | null,
          "requests": [{"record": <a requests.jsonl object>, "planned": N}, ...]}

vLLM's definitions, restated (not its code):
  * a request's ttft is the time from its send to the first chunk with output,
    its latency the time to the last such chunk, its itl the gaps between
    successive output chunks; a request that failed keeps what it measured
    before it failed (ttft 0.0 when no output arrived);
  * output_len is the server's completion_tokens for a success (tokenscope
    sends no text to re-tokenize: a success without usage counts 0), 0 for a
    failure; input_len the dataset's prompt length (here the planned prompt
    length; a later turn of a session has none planned, and the server's
    prompt count stands in for it);
  * statistics are taken over the successes only: tpot over those with
    output_len > 1, itl over all their gaps flattened; an empty list gives 0,
    as np.mean([] or 0) does; std has ddof = 0; percentiles are np.percentile's
    default (linear);
  * goodput: a success is good when every SLO (ms, compared in seconds as
    slo / 1000 >= value) holds, its tpot counting 0 when output_len <= 1.
"""
import json
import sys

import numpy as np


def main():
    spec = json.load(open(sys.argv[1]))
    info = spec["info"]
    slo = spec["slo"] or {}
    dur = info["duration_s"]

    input_lens, output_lens, ttfts, itls, errors = [], [], [], [], []
    ok_ttft, ok_tpot, ok_all_tpot, ok_e2el, ok_itl = [], [], [], [], []
    total_input = 0
    for entry in spec["requests"]:
        r, planned = entry["record"], entry["planned"]
        if r.get("warmup", False):
            continue
        success = r["outcome"] == "ok"
        prompt_len = planned if planned >= 0 else max(0, r.get("prompt_tokens", -1))
        events = [r["t_send_ns"] + o for o in r.get("event_offsets_ns", [])]
        ttft = (events[0] - r["t_send_ns"]) / 1e9 if events else 0.0
        gaps = [(b - a) / 1e9 for a, b in zip(events, events[1:])]
        input_lens.append(prompt_len)
        ttfts.append(ttft)
        itls.append(gaps)
        if not success:
            output_lens.append(0)
            errors.append(r["outcome"] + ": " + r.get("detail", ""))
            continue
        errors.append("")
        out = max(0, r["output_tokens"])
        output_lens.append(out)
        total_input += prompt_len
        end = r["t_last_token_ns"] if r["t_last_token_ns"] >= 0 else r["t_close_ns"]
        latency = (end - r["t_send_ns"]) / 1e9
        tpot = 0.0
        if out > 1:
            tpot = (latency - ttft) / (out - 1)
            ok_tpot.append(tpot)
        ok_all_tpot.append(tpot)
        ok_ttft.append(ttft)
        ok_e2el.append(latency)
        ok_itl.extend(gaps)

    completed = len(ok_ttft)
    good = None
    if slo:
        good = 0
        for t, p, e in zip(ok_ttft, ok_all_tpot, ok_e2el):
            checks = [("ttft", t), ("tpot", p), ("e2el", e)]
            if all(slo[k] / 1000 >= v for k, v in checks if k in slo):
                good += 1

    total_output = sum(output_lens)
    result = {
        "date": info["date"],
        "backend": info["backend"],
        "model_id": info["model_id"],
        "tokenizer_id": info["tokenizer_id"],
        "num_prompts": len(input_lens),
        "request_rate": info["request_rate"],
        "burstiness": info["burstiness"],
        "max_concurrency": info["max_concurrency"],
        "duration": dur,
        "completed": completed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / dur,
        "request_goodput": None if good is None else good / dur,
        "output_throughput": total_output / dur,
        "total_token_throughput": (total_input + total_output) / dur,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "ttfts": ttfts,
        "itls": itls,
        "generated_texts": [""] * len(input_lens),
        "errors": errors,
    }
    for name, values in (("ttft", ok_ttft), ("tpot", ok_tpot), ("itl", ok_itl), ("e2el", ok_e2el)):
        result[f"mean_{name}_ms"] = float(np.mean(values or 0)) * 1000
        result[f"median_{name}_ms"] = float(np.median(values or 0)) * 1000
        result[f"std_{name}_ms"] = float(np.std(values or 0)) * 1000
        for p in (90, 95, 99):
            result[f"p{p}_{name}_ms"] = float(np.percentile(values or 0, p)) * 1000
    json.dump(result, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
