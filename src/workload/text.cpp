#include "workload/text.h"

#include <array>
#include <vector>

#include "core/random.h"

namespace tokenscope::workload {

namespace {
// Common English words of at most four letters.
constexpr std::string_view kCommonWords[] = {
    "the",  "of",   "and",  "to",   "in",   "is",   "you",  "that", "it",   "he",   "was",  "for",  "on",
    "are",  "as",   "with", "his",  "they", "at",   "be",   "this", "have", "from", "or",   "one",  "had",
    "by",   "word", "but",  "not",  "what", "all",  "were", "we",   "when", "your", "can",  "said", "use",
    "an",   "each", "she",  "do",   "how",  "if",   "will", "up",   "out",  "many", "then", "them", "so",
    "some", "her",  "make", "like", "him",  "into", "time", "has",  "look", "two",  "more", "go",   "see",
    "no",   "way",  "my",   "than", "been", "call", "who",  "its",  "now",  "find", "long", "down", "day",
    "did",  "get",  "come", "made", "may",  "part", "over", "new",  "take", "only", "work", "know", "year",
    "live", "me",   "back", "give", "most", "very", "good", "man",  "our",  "just", "name", "form", "much",
    "help", "line", "turn", "mean", "old",  "same", "tell", "boy",  "move", "too",  "set",  "want", "air",
    "well", "also", "play", "end",  "put",  "home", "read", "hand", "port", "add",  "even", "land", "here",
    "must", "big",  "high", "such", "act",  "why",  "ask",  "men",  "went", "kind", "off",  "need", "try",
    "us",   "ago",  "food", "four", "keep", "eye",  "last", "let",  "few",  "tree", "city", "idea", "run",
    "fast", "real", "life", "open", "seem", "next", "hard", "walk", "both", "mark", "book", "took", "left",
    "car",  "feet", "side", "mile", "once", "hear", "stop", "far",  "sea",  "draw", "near", "grow", "rock",
    "own",  "page", "road", "map",  "rain", "rule", "pull", "cold", "bird", "soon", "body", "dog",  "song",
    "done", "fire", "half", "test", "ship", "area", "fish", "step", "king", "town", "hold", "true", "fact",
    "best", "hour", "five", "miss", "wind", "box",  "yet",  "note", "rest", "sure", "room", "free", "rose",
    "door", "data", "code", "plan", "fine", "less", "team", "ever", "list", "seen", "ring", "kept", "wish",
};

const std::vector<tokenizers::TokenId>& word_tokens() {
  static const std::vector<tokenizers::TokenId> tokens = [] {
    std::vector<tokenizers::TokenId> t;
    for (auto w : kCommonWords) t.push_back(tokenizers::spaced_word_id(w));
    return t;
  }();
  return tokens;
}
}  // namespace

std::span<const std::string_view> generated_words() {
  return kCommonWords;
}

tokenizers::TokenId generated_token(std::uint64_t key, std::uint32_t index) {
  const auto& tokens = word_tokens();
  const std::uint64_t r = mix64(mix64(key ^ 0x67656e6572617465ULL) + index * 0x9e3779b97f4a7c15ULL);
  return tokens[((r >> 32) * tokens.size()) >> 32];
}

}  // namespace tokenscope::workload
