#include "bench/server_prompts.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "core/json_depth.h"
#include "net/http_fetch.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::bench {

namespace {

// Round trips the count-only search may take (each a small /tokenize).
constexpr std::size_t kMaxRoundTrips = 4096;
// Words checked one by one at the start of a text, at most.
constexpr std::size_t kMaxFirstWordChecks = 256;
// A count beyond this is no answer (a hostile or broken server).
constexpr std::int64_t kMaxCount = std::int64_t{1} << 24;
// Tokens a server may add to a prompt, at most: more is not a BOS or a template.
constexpr std::int64_t kMaxAdded = 4096;

std::string join_words(const std::vector<std::string>& words, std::size_t a, std::size_t b) {
  std::string text;
  for (std::size_t i = a; i < b; ++i) {
    if (i > a) text += ' ';
    text += words[i];
  }
  return text;
}

// A vocabulary string as text: byte-level BPE's "Ġ" and SentencePiece's "▁"
// stand for a space.
std::string piece_as_text(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "\xC4\xA0") == 0) {
      out += ' ';
      ++i;
    } else if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

TokenizeClient::TokenizeClient(const net::Endpoint& ep, const net::ClientOptions& copt, std::string api_key,
                               std::string model)
    : ep_(ep), copt_(copt), api_key_(std::move(api_key)), model_(std::move(model)) {}

std::optional<nlohmann::json> TokenizeClient::post(const std::string& path, const nlohmann::json& body) {
  net::FetchRequest fr;
  fr.method = "POST";
  fr.path = path;
  fr.body = body.dump();
  fr.timeout_s = 10;
  fr.max_body_bytes = 1u << 20;  // the pieces of every prompt word: about 50 KB
  fr.abandon_over_cap = true;    // a server streaming without end: given up at 1 MiB
  if (!api_key_.empty()) fr.headers.emplace_back("Authorization", "Bearer " + api_key_);
  ++round_trips_;
  const net::FetchResult r = net::fetch(ep_, copt_, fr);
  if (!r.ok()) {
    error_ = fmt::format("{}: {}", path, r.error.empty() ? fmt::format("HTTP {}", r.status) : r.error);
    return std::nullopt;
  }
  if (json_too_deep_at(r.body) != std::string_view::npos) {
    error_ = fmt::format("{}: the answer is nested deeper than {} levels", path, kMaxJsonDepth);
    return std::nullopt;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object()) {
    error_ = path + ": the answer is not a JSON object";
    return std::nullopt;
  }
  return j;
}

std::optional<std::int64_t> TokenizeClient::count(const std::string& text, bool add_special) {
  const auto j = post("/tokenize", {{"model", model_},
                                    {"prompt", text},
                                    {"content", text},
                                    {"add_special", add_special},
                                    {"add_special_tokens", add_special}});
  if (!j) return std::nullopt;
  std::int64_t n = -1;
  if (j->contains("count") && (*j)["count"].is_number_integer())
    n = (*j)["count"].get<std::int64_t>();
  else if (j->contains("tokens") && (*j)["tokens"].is_array())
    n = static_cast<std::int64_t>((*j)["tokens"].size());
  if (n < 0 || n > kMaxCount) {
    error_ = n < 0 ? "/tokenize: the answer holds no token count"
                   : fmt::format("/tokenize: a count of {} tokens is not an answer", n);
    return std::nullopt;
  }
  return n;
}

std::optional<std::vector<std::string>> TokenizeClient::pieces(const std::string& text) {
  const auto j = post("/tokenize", {{"model", model_},
                                    {"prompt", text},
                                    {"content", text},
                                    {"add_special", false},
                                    {"add_special_tokens", false},
                                    {"with_pieces", true},
                                    {"return_token_strs", true}});
  if (!j) return std::nullopt;
  std::vector<std::string> out;
  if (j->contains("tokens") && (*j)["tokens"].is_array() && !(*j)["tokens"].empty() &&
      (*j)["tokens"][0].is_object()) {  // llama.cpp: [{"id", "piece"}], the piece as text
    for (const auto& t : (*j)["tokens"]) {
      if (!t.is_object() || !t.contains("piece")) return std::nullopt;
      // A piece that is not valid UTF-8 comes as its bytes: never a word's.
      out.push_back(t["piece"].is_string() ? t["piece"].get<std::string>() : std::string("\x01"));
    }
    return out;
  }
  if (j->contains("token_strs") && (*j)["token_strs"].is_array()) {  // vLLM: the vocabulary's strings
    for (const auto& t : (*j)["token_strs"]) {
      if (!t.is_string()) return std::nullopt;
      out.push_back(piece_as_text(t.get<std::string>()));
    }
    return out;
  }
  return std::nullopt;
}

std::optional<std::int64_t> TokenizeClient::chat_count(const std::string& content) {
  const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", content}}});
  // vLLM and tokenscope serve: the messages themselves (a server that reads
  // only "content" answers with no tokens, which no template gives).
  if (!messages_refused_ && chat_method_ != "/apply-template") {
    const auto j =
        post("/tokenize", {{"model", model_}, {"messages", messages}, {"add_generation_prompt", true}});
    std::int64_t n = -1;
    if (j && j->contains("count") && (*j)["count"].is_number_integer())
      n = (*j)["count"].get<std::int64_t>();
    else if (j && j->contains("tokens") && (*j)["tokens"].is_array())
      n = static_cast<std::int64_t>((*j)["tokens"].size());
    if (n > 0 && n <= kMaxCount) {
      chat_method_ = "/tokenize messages";
      return n;
    }
    messages_refused_ = true;
  }
  // llama.cpp: the template applied by the server, then its prompt counted as
  // a chat request's is (special tokens added and parsed).
  const auto t = post("/apply-template", {{"model", model_}, {"messages", messages}});
  if (!t || !t->contains("prompt") || !(*t)["prompt"].is_string()) {
    if (t) error_ = "/apply-template: the answer holds no prompt";
    return std::nullopt;
  }
  const auto n = count((*t)["prompt"].get<std::string>(), true);
  if (n) chat_method_ = "/apply-template";
  return n;
}

std::optional<std::vector<bool>> words_from_pieces(const std::vector<std::string>& words,
                                                   const std::vector<std::string>& pieces) {
  std::string joined = join_words(words, 0, words.size()), rebuilt;
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // each piece's [start, end) in rebuilt
  for (const auto& p : pieces) {
    spans.emplace_back(rebuilt.size(), rebuilt.size() + p.size());
    rebuilt += p;
  }
  std::size_t offset = 0;  // a SentencePiece vocabulary spells the first word with a space
  if (rebuilt != joined) {
    if (rebuilt.size() == joined.size() + 1 && rebuilt[0] == ' ' &&
        rebuilt.compare(1, joined.size(), joined) == 0)
      offset = 1;
    else
      return std::nullopt;
  }
  std::vector<bool> one(words.size(), false);
  std::size_t k = 0, at = 0;  // the piece index, and where word i starts in joined
  for (std::size_t i = 0; i < words.size(); ++i) {
    // The word with its space (the first: from the start of the text).
    const std::size_t start = i == 0 ? 0 : at - 1 + offset, end = at + words[i].size() + offset;
    while (k < spans.size() && spans[k].first < start) ++k;
    one[i] = k < spans.size() && spans[k].first == start && spans[k].second == end;
    at += words[i].size() + 1;
  }
  return one;
}

nlohmann::json ServerPromptFacts::to_json() const {
  nlohmann::json j = {{"available", available}, {"round_trips", round_trips}};
  if (!available) {
    j["reason"] = reason;
    return j;
  }
  if (!one_token.empty()) {
    j["prompt_words"] = one_token.size();
    j["prompt_words_one_token"] = words_one_token;
    j["prompt_words_method"] = words_method;
    j["first_words_checked"] = first_words.size();
  }
  if (completion_added >= 0) j["completion_added_tokens"] = completion_added;
  j["chat_template_tokens"] = chat_added >= 0 ? nlohmann::json(chat_added) : nlohmann::json(nullptr);
  if (!chat_method.empty()) j["chat_template_method"] = chat_method;
  if (!chat_note.empty()) j["chat_template_note"] = chat_note;
  return j;
}

ServerPromptFacts learn_server_prompts(TokenizeClient& client, bool learn_words, bool chat) {
  ServerPromptFacts f;
  const auto fail = [&](std::string reason) {
    f.available = false;
    f.reason = std::move(reason);
    f.round_trips = client.round_trips();
    return f;
  };
  const auto list = tokenizers::prompt_words();
  const std::vector<std::string> words(list.begin(), list.end());
  // One word, with and without what the server adds.
  const auto plain = client.count(words[0], false);
  if (!plain) return fail(client.error());
  const auto with = client.count(words[0], true);
  if (!with) return fail(client.error());
  if (*with - *plain > kMaxAdded)
    return fail(fmt::format("/tokenize: {} tokens added to one word is not a BOS", *with - *plain));
  f.completion_added = std::max<std::int64_t>(0, *with - *plain);
  if (learn_words) {
    if (const auto pieces = client.pieces(join_words(words, 0, words.size()))) {
      if (auto one = words_from_pieces(words, *pieces)) {
        f.one_token = std::move(*one);
        f.words_method = "pieces";
        // The first word stood at the start: its spaced form, counted.
        if (f.one_token[0]) {
          const auto n = client.count(words[0] + " " + words[0], false);
          if (!n) return fail(client.error());
          f.one_token[0] = *n == 2;
        }
      }
    }
    if (f.one_token.empty()) {  // counts only: halve where a count exceeds its words
      f.one_token.assign(words.size(), true);
      std::vector<std::pair<std::size_t, std::size_t>> todo = {{0, words.size()}};
      while (!todo.empty()) {
        const auto [a, b] = todo.back();
        todo.pop_back();
        if (client.round_trips() > kMaxRoundTrips)
          return fail(
              fmt::format("more than {} /tokenize round trips to find the one-token words", kMaxRoundTrips));
        if (b - a == 1) {  // the word at the start and after a space
          const auto n = client.count(words[a] + " " + words[a], false);
          if (!n) return fail(client.error());
          f.one_token[a] = *n == 2;
          continue;
        }
        const auto n = client.count(join_words(words, a, b), false);
        if (!n) return fail(client.error());
        if (*n == static_cast<std::int64_t>(b - a)) {
          // The range's first word stood at the start: its spaced form, counted.
          const auto two = client.count(words[a] + " " + words[a], false);
          if (!two) return fail(client.error());
          f.one_token[a] = *two == 2;
          continue;
        }
        const std::size_t mid = a + (b - a) / 2;
        todo.emplace_back(mid, b);
        todo.emplace_back(a, mid);
      }
      f.words_method = "counts";
    }
    for (const bool b : f.one_token) f.words_one_token += b ? 1 : 0;
    if (f.words_one_token < 64)
      return fail(
          fmt::format("only {} of the {} prompt words are one token there (by {}): too few to build "
                      "prompts of exact length",
                      f.words_one_token, words.size(), f.words_method));
    // A prompt's first word stands at the start of the text.
    std::size_t checked = 0;
    for (std::size_t i = 0; i < words.size() && f.first_words.size() < ServerPromptFacts::kFirstWords &&
                            checked < kMaxFirstWordChecks;
         ++i) {
      if (!f.one_token[i]) continue;
      ++checked;
      const auto n = client.count(words[i], false);
      if (!n) return fail(client.error());
      if (*n == 1) f.first_words.push_back(static_cast<std::uint32_t>(i));
    }
  }
  if (chat) {
    // The template's tokens at two content lengths: they must agree.
    std::int64_t added[2] = {-1, -1};
    const std::size_t lengths[2] = {8, 64};
    for (int k = 0; k < 2; ++k) {
      const std::string content = join_words(words, 0, lengths[k]);
      const auto whole = client.chat_count(content);
      const auto own = client.count(content, false);
      if (!whole || !own) {
        f.chat_note =
            "the server offers no way to count a chat prompt (/tokenize with messages, "
            "/apply-template): " +
            client.error();
        break;
      }
      added[k] = *whole - *own;
      if (added[k] < 0 || added[k] > kMaxAdded) {
        f.chat_note = fmt::format(
            "the chat prompt of {} words counts {} tokens against {} for its content: not a template's",
            lengths[k], *whole, *own);
        added[0] = added[1] = -1;
        break;
      }
    }
    if (added[0] >= 0 && added[0] == added[1]) {
      f.chat_added = added[0];
      f.chat_method = client.chat_method();
    } else if (added[0] >= 0 && added[1] >= 0) {
      f.chat_note = fmt::format("the chat template adds {} tokens to 8 words and {} to 64: not a constant",
                                added[0], added[1]);
    }
  }
  f.available = true;
  f.round_trips = client.round_trips();
  return f;
}

}  // namespace tokenscope::bench
