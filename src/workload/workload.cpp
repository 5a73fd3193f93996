#include "workload/workload.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::workload {

tokenizers::TokenId hash_block_token(std::uint64_t hash_id, std::uint32_t offset) {
  return tokenizers::spaced_token_from_key(mix64(hash_id ^ 0x6861736869647321ULL) + offset * kTokenKeyStep);
}

void append_prompt_tokens(const Workload& w, const Request& r, std::vector<tokenizers::TokenId>& out) {
  const std::size_t start = out.size();
  if (r.source == PromptSource::kText) {
    tokenizers::tokenize(w.prompts[r.source_begin], out);
    out.resize(start + r.input_tokens, tokenizers::kInvertibleIds);
    return;
  }
  out.reserve(start + r.input_tokens);
  for_each_token_run(w, r, [&](std::uint64_t key, std::uint32_t from, std::uint32_t to) {
    for (std::uint32_t i = from; i < to; ++i)
      out.push_back(tokenizers::spaced_token_from_key(key + i * kTokenKeyStep));
  });
  // A generated prompt starts with a word, not a space: real tokenizers
  // would count a leading space as a token of its own (SentencePiece adds one).
  if (out.size() > start && out[start] >= tokenizers::kLetterPieces &&
      out[start] < tokenizers::kInvertibleIds)
    out[start] -= tokenizers::kLetterPieces;
}

std::string prompt_origin(const Workload& w, const Request& r) {
  if (w.trace_file.empty()) return "";
  const std::string& field = r.source == PromptSource::kText ? w.text_field : w.length_field;
  // InputError writes "FILE:LINE: field 'NAME': PROBLEM"; keep all but ": PROBLEM".
  const std::string message = InputError(w.trace_file, r.trace_line, field, "").what();
  return message.substr(0, message.size() - 2);
}

void sort_by_arrival(Workload& w) {
  std::stable_sort(w.requests.begin(), w.requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_ns < b.arrival_ns; });
}

}  // namespace tokenscope::workload
