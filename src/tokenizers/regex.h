// Regular expressions as Hugging Face tokenizer.json files use them, on PCRE2.
//
// tokenizers compiles these patterns with Oniguruma; PCRE2 with UTF and UCP
// reads the same syntax for what tokenizer files contain: Unicode properties
// (\p{L}, \p{N}), scoped flags ((?i:'s|'t)), lookahead (\s+(?!\S)), and \s
// \w \d by Unicode rules. Patterns are compiled once (JIT where available)
// and a Regex is safe to share between threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tokenscope::tokenizers {

class Regex {
 public:
  struct Match {
    std::size_t start = 0;
    std::size_t end = 0;
  };

  // Throws UsageError naming PCRE2's reason and the offset in the pattern.
  explicit Regex(std::string_view pattern);

  // Every non-overlapping match in `text` (valid UTF-8), left to right. An
  // empty match is reported and the search goes on one character later.
  // Throws UsageError when a match exceeds PCRE2's backtracking limits (a
  // pathological pattern), never hangs.
  std::vector<Match> find_all(std::string_view text) const;

  const std::string& pattern() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tokenscope::tokenizers
