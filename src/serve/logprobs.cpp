#include "serve/logprobs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/json_out.h"
#include "core/random.h"

namespace tokenscope::serve {

namespace {

constexpr double kLogZero = -9999.0;  // log 0 as vLLM writes it (JSON has no -inf)
constexpr std::uint64_t kAlternativeStride = 7919;

std::string token_text(tokenizers::TokenId t) {
  return tokenizers::piece_text(t).value_or("");
}

// A logprob as JSON: the shortest text that reads back to the same double.
void append_logprob(std::string& out, double lp) {
  out += fmt::format("{}", std::isfinite(lp) ? lp : kLogZero);
}

void append_bytes(std::string& out, const std::string& text) {
  out += '[';
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (i) out += ',';
    jsonout::append_uint(out, static_cast<unsigned char>(text[i]));
  }
  out += ']';
}

}  // namespace

std::uint64_t logprob_key(std::uint64_t server_seed, std::optional<std::uint64_t> request_seed,
                          std::uint32_t choice, std::uint64_t engine_id) {
  const std::uint64_t stream = derive_seed(server_seed, "logprobs");
  return request_seed ? hash_combine64(stream, hash_combine64(*request_seed, choice))
                      : hash_combine64(stream, ~engine_id);
}

double simulated_logprob(const LogprobModel& model, std::uint64_t key, std::uint32_t position,
                         tokenizers::TokenId token) {
  const std::uint64_t h = hash_combine64(hash_combine64(key, position), token);
  const double u = static_cast<double>((h >> 11) + 1) * 0x1p-53;  // (0, 1]
  return (model.mean_nats + model.shift_nats) * std::log(u);      // -(mean + shift) * E, E = -ln u
}

std::vector<TokenLogprob> simulated_top_logprobs(const TokenLogprob& sampled, std::uint32_t n) {
  std::vector<TokenLogprob> all;
  all.reserve(n + 1);
  all.push_back(sampled);
  // log((1 - p) / 2^k) with p = exp(logprob); log 0 when p rounds to 1.
  const double rest = std::log1p(-std::exp(sampled.logprob));
  for (std::uint32_t k = 1; k <= n; ++k) {
    const auto id =
        static_cast<tokenizers::TokenId>((sampled.token + kAlternativeStride * k) % tokenizers::kVocabSize);
    const double lp = std::isfinite(rest) ? rest - static_cast<double>(k) * std::log(2.0) : kLogZero;
    all.push_back({id, lp});
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
  all.resize(n);
  return all;
}

std::string logprobs_json(Api api, const std::vector<TokenLogprob>& tokens, std::uint32_t top_n,
                          std::size_t text_offset) {
  std::string out;
  if (api == Api::kChat) {
    out += "{\"content\":[";
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ',';
      const auto entry = [&](const TokenLogprob& t) {
        const std::string text = token_text(t.token);
        out += "{\"token\":";
        jsonout::append_string(out, text);
        out += ",\"logprob\":";
        append_logprob(out, t.logprob);
        out += ",\"bytes\":";
        append_bytes(out, text);
      };
      entry(tokens[i]);
      out += ",\"top_logprobs\":[";
      const auto top = simulated_top_logprobs(tokens[i], top_n);
      for (std::size_t k = 0; k < top.size(); ++k) {
        if (k) out += ',';
        entry(top[k]);
        out += '}';
      }
      out += "]}";
    }
    out += "]}";
    return out;
  }
  std::string texts = "[", lps = "[", tops = "[", offsets = "[";
  std::size_t offset = text_offset;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const char* sep = i ? "," : "";
    const std::string text = token_text(tokens[i].token);
    texts += sep;
    jsonout::append_string(texts, text);
    lps += sep;
    append_logprob(lps, tokens[i].logprob);
    tops += sep;
    tops += '{';
    const auto top = simulated_top_logprobs(tokens[i], top_n);
    for (std::size_t k = 0; k < top.size(); ++k) {
      if (k) tops += ',';
      jsonout::append_string(tops, token_text(top[k].token));
      tops += ':';
      append_logprob(tops, top[k].logprob);
    }
    tops += '}';
    offsets += sep;
    jsonout::append_uint(offsets, offset);
    offset += text.size();
  }
  out += "{\"tokens\":" + texts + "],\"token_logprobs\":" + lps + "],\"top_logprobs\":" + tops +
         "],\"text_offset\":" + offsets + "]}";
  return out;
}

}  // namespace tokenscope::serve
