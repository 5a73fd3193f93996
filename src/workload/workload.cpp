#include "workload/workload.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::workload {

namespace {
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
}  // namespace

tokenizers::TokenId hash_block_token(std::uint64_t hash_id, std::uint32_t offset) {
  return tokenizers::spaced_token_from_key(mix64(hash_id ^ 0x6861736869647321ULL) + offset * kGolden);
}

void append_prompt_tokens(const Workload& w, const Request& r, std::vector<tokenizers::TokenId>& out) {
  const std::size_t start = out.size();
  out.reserve(start + r.input_tokens);
  auto unique_fill = [&](std::uint32_t from) {
    const std::uint64_t key = hash_combine64(w.token_seed, r.id);
    for (std::uint32_t i = from; i < r.input_tokens; ++i)
      out.push_back(tokenizers::spaced_token_from_key(key + i * kGolden));
  };
  switch (r.source) {
    case PromptSource::kUnique:
      unique_fill(0);
      break;
    case PromptSource::kPrefixGroup: {
      const std::uint32_t shared = std::min(r.source_count, r.input_tokens);
      const std::uint64_t key = hash_combine64(w.token_seed ^ 0x5052454649584752ULL, r.source_begin);
      for (std::uint32_t i = 0; i < shared; ++i)
        out.push_back(tokenizers::spaced_token_from_key(key + i * kGolden));
      unique_fill(shared);
      break;
    }
    case PromptSource::kHashIds: {
      const std::uint32_t block = w.hash_block_tokens;
      for (std::uint32_t b = 0; b < r.source_count && out.size() - start < r.input_tokens; ++b) {
        const std::uint64_t key = mix64(w.hash_pool[r.source_begin + b] ^ 0x6861736869647321ULL);
        const std::size_t take = std::min<std::size_t>(block, r.input_tokens - (out.size() - start));
        for (std::uint32_t i = 0; i < take; ++i)
          out.push_back(tokenizers::spaced_token_from_key(key + i * kGolden));
      }
      // Fewer ids than tokens: the tail is unique to the request.
      if (out.size() - start < r.input_tokens) unique_fill(static_cast<std::uint32_t>(out.size() - start));
      break;
    }
    case PromptSource::kText:
      tokenizers::tokenize(w.prompts[r.source_begin], out);
      out.resize(start + r.input_tokens, tokenizers::kInvertibleIds);
      return;
  }
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
