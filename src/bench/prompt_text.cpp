#include "bench/prompt_text.h"

namespace tokenscope::bench {

std::string prompt_text(const workload::Workload& w, const workload::Request& r) {
  if (r.source == workload::PromptSource::kText) return w.prompts[r.source_begin];
  std::vector<workload::TokenId> tokens;
  workload::append_prompt_tokens(w, r, tokens);
  std::string text;
  text.reserve(tokens.size() * 5);
  for (const auto t : tokens) {
    if (auto piece = workload::piece_text(t)) text += *piece;
  }
  return text;
}

}  // namespace tokenscope::bench
