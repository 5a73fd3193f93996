// The simulated model's log-probabilities (docs/serve.md
// "Log-probabilities"): what `serve` answers to `logprobs`, so that bench
// --logprobs and check item 11 (quantisation drift) can be exercised
// without a GPU, and a "quantised" server simulated with --logprob-shift.
//
// The sampled token's logprob is -(mean_nats + shift_nats) * E with
// E = -ln U and U uniform on (0, 1], drawn from a hash of the key (the
// server's --seed and the request's seed, or its engine id when it sent
// none), the token's position in the output and its id: -logprob is
// exponential with mean mean_nats + shift_nats, deterministic per token.
// A positive shift makes the model less sure of every token, as a
// lossy quantisation does.
//
// top_logprobs (N asked for): the N most likely of the sampled token and N
// alternatives; alternative k (1..N) is token (sampled + 7919 k) mod the
// vocabulary with probability (1 - p) / 2^k, p the sampled token's, so that
// the probabilities never add up beyond 1 (log 0 is written -9999.0, as vLLM
// does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serve/openai.h"
#include "tokenizers/builtin.h"

namespace tokenscope::serve {

struct LogprobModel {
  double mean_nats = 0.5;   // mean of -logprob of a sampled token (the model's cross-entropy)
  double shift_nats = 0.0;  // --logprob-shift: added to the mean (> -mean_nats)
};

struct TokenLogprob {
  tokenizers::TokenId token = 0;
  double logprob = 0.0;
};

// The key of one choice's logprobs: the server's seed with the request's
// own seed (and the choice's index), else with its engine id.
std::uint64_t logprob_key(std::uint64_t server_seed, std::optional<std::uint64_t> request_seed,
                          std::uint32_t choice, std::uint64_t engine_id);

// The sampled token's logprob (above), in (-inf, 0].
double simulated_logprob(const LogprobModel& model, std::uint64_t key, std::uint32_t position,
                         tokenizers::TokenId token);

// The n most likely of the sampled token and its n alternatives (above), most
// likely first (the sampled token first on a tie).
std::vector<TokenLogprob> simulated_top_logprobs(const TokenLogprob& sampled, std::uint32_t n);

// The `logprobs` object of a choice (or of a stream chunk) for these
// tokens, each with its top_n alternatives:
//   completions: {"tokens", "token_logprobs", "top_logprobs" (one object of
//                text -> logprob per token), "text_offset"} (OpenAI's legacy
//                form, as vLLM sends it), offsets from text_offset on;
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs":
//                [{"token", "logprob", "bytes"}]}]}.
std::string logprobs_json(Api api, const std::vector<TokenLogprob>& tokens, std::uint32_t top_n,
                          std::size_t text_offset);

}  // namespace tokenscope::serve
