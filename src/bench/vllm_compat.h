// vllm_result.json (bench --compat vllm): the keys and the definitions of
// vLLM's serving benchmark (benchmarks/benchmark_serving.py, --save-result),
// so that dashboards and scripts built on that file read tokenscope's runs.
// These are vLLM's definitions, not tokenscope's (docs/bench.md lists both):
//  * percentiles are numpy's default (linear interpolation between order
//    statistics), means and standard deviations over the successful requests
//    (std with ddof = 0); an empty list gives 0.0, as `np.mean(x or 0)` does;
//  * ttft, tpot, itl and e2el are measured from the actual send; tpot is
//    (e2el − ttft) / (output_len − 1) for requests with output_len > 1;
//  * itl is the list of gaps between successive output events of every
//    successful request (tokenscope's ICL), flattened; the per-request lists
//    `ttfts` and `itls` keep what a failed request measured before it failed
//    (ttft 0 when no output arrived), as vLLM's do;
//  * output_lens come from the server's usage block (0 for failed requests),
//    input_lens are the planned prompt lengths of every request (a later turn
//    of a session, which has none planned: the server's prompt count), and
//    total_input_tokens sums them over the successful requests;
//  * request_goodput counts requests meeting every SLO (from the send,
//    compared in seconds as vLLM does: slo_ms / 1000 >= value), null without
//    an SLO.
// Warm-up requests are left out, as vLLM's warm-up request is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record.h"
#include "core/summary.h"

namespace tokenscope::bench {

struct VllmCompatInfo {
  std::string backend;  // "vllm" (completions) or "openai-chat"
  std::string model_id;
  std::string tokenizer_id;            // the --tokenizer file, else the model
  std::optional<double> request_rate;  // nullopt: "inf" (closed loop or every request at t = 0)
  double burstiness = 1.0;
  std::optional<std::uint32_t> max_concurrency;
  double duration_s = 0.0;
  std::optional<Slo> goodput_slo;
  std::string date;  // YYYYMMDD-HHMMSS, local time
};

class VllmCompat {
 public:
  void add(const RequestRecord& r, std::int64_t planned_prompt_tokens);
  nlohmann::json build(const VllmCompatInfo& info) const;

 private:
  std::vector<std::int64_t> input_lens_, output_lens_;
  std::vector<double> ttfts_s_;              // every request (0 when no output arrived)
  std::vector<std::vector<double>> itls_s_;  // every request, failed ones up to their failure
  std::vector<std::string> errors_;
  std::vector<double> ok_ttft_s_, ok_tpot_s_, ok_e2el_s_, ok_itl_s_;
  std::int64_t total_input_ = 0, total_output_ = 0;
  std::uint64_t completed_ = 0;
  struct GoodCheck {
    double ttft_s, tpot_s, e2el_s;
  };
  std::vector<GoodCheck> ok_checks_;
};

}  // namespace tokenscope::bench
