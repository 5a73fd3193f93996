#include "tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizers/unicode_text.h"

namespace tokenscope::tokenizers {
namespace {
// Backtracking bounds per match: far above what tokenizer patterns need on
// any text, low enough that a pathological pattern fails in well under a
// second instead of hanging.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kDepthLimit = 100'000;
constexpr std::size_t kHeapLimitKib = 64 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return fmt::format("PCRE2 error {}", code);
  return std::string(reinterpret_cast<const char*>(buffer));
}
}  // namespace

struct Regex::Impl {
  std::string pattern;
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;

  ~Impl() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern) {
  auto impl = std::make_shared<Impl>();
  impl->pattern = std::string(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (impl->code == nullptr)
    throw UsageError(
        fmt::format("invalid regular expression at offset {}: {}", offset, pcre2_message(error)));
  pcre2_jit_compile(impl->code,
                    PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
  impl->context = pcre2_match_context_create(nullptr);
  if (impl->context == nullptr) throw std::bad_alloc();
  pcre2_set_match_limit(impl->context, kMatchLimit);
  pcre2_set_depth_limit(impl->context, kDepthLimit);
  pcre2_set_heap_limit(impl->context, kHeapLimitKib);
  impl_ = std::move(impl);
}

const std::string& Regex::pattern() const {
  return impl_->pattern;
}

std::vector<Regex::Match> Regex::find_all(std::string_view text) const {
  std::vector<Match> matches;
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  if (data == nullptr) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const auto char_end = [&](std::size_t at) {
    return at + unicode::sequence_length(static_cast<unsigned char>(text[at]));
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    int rc =
        pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), impl_->context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.get(), impl_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw UsageError(
          fmt::format("regular expression /{}/ failed on the text: {}", impl_->pattern, pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    Match m{ovector[0], ovector[1]};
    if (m.end < m.start) m.end = m.start;  // \K games: report as empty
    matches.push_back(m);
    std::size_t next = m.end;
    if (next <= start || m.end == m.start) {
      const std::size_t from = std::max(start, m.start);
      if (from >= text.size()) break;
      next = char_end(from);
    }
    start = next;
  }
  return matches;
}

}  // namespace tokenscope::tokenizers
