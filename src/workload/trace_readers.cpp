#include "workload/trace_readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/strings.h"
#include "core/text_reader.h"

namespace tokenscope::workload {

namespace {

constexpr std::uint64_t kMaxTokens = 1u << 30;
constexpr std::size_t kMaxSkippedExamples = 5;
// Format detection reads no more than this of the file.
constexpr std::size_t kDetectBytes = 64 << 10;

using json = nlohmann::json;

std::uint32_t line32(std::size_t line) {
  return static_cast<std::uint32_t>(std::min<std::size_t>(line, std::numeric_limits<std::uint32_t>::max()));
}

std::string nul_problem(std::size_t column, std::string_view line) {
  return fmt::format("expected text, found a NUL byte at byte {} of the line: {} (a binary or sparse file?)",
                     column, quote_input(line, 40));
}

// Throws InputError when the line the reader just returned is not text or is
// longer than any row can be.
void check_line(const TextReader& in, std::string_view line, const std::string& file) {
  switch (in.flaw()) {
    case TextReader::Flaw::kNone:
      return;
    case TextReader::Flaw::kNulByte:
      throw InputError(file, in.line_number(), "", nul_problem(in.nul_column(), line));
    case TextReader::Flaw::kTooLong:
      throw InputError(file, in.line_number(), "",
                       fmt::format("expected a row of at most {} MiB, got a longer line starting {}",
                                   TextReader::kDefaultMaxLineBytes >> 20, quote_input(line, 40)));
  }
}

// Calls fn(line_number, line) for each line until it returns false; CRLF and
// a missing final newline are handled by the reader. Lines that are not text
// reach fn too: it checks them with check_line (inside its row, so that
// --skip-bad-rows can skip them).
template <typename Fn>
void for_each_line(TextReader& in, Fn&& fn) {
  std::string_view line;
  while (in.next_line(line))
    if (!fn(static_cast<std::size_t>(in.line_number()), line)) return;
}

// Shared row bookkeeping: skip-or-throw, max_rows.
class RowSink {
 public:
  RowSink(Workload& w, const TraceReadOptions& o) : w_(w), o_(o) {}
  // Runs parse(); returns false when max_rows is reached.
  template <typename Fn>
  bool row(Fn&& parse) {
    try {
      parse();
      ++w_.read_report.rows_read;
    } catch (const InputError& e) {
      if (!o_.skip_bad_rows) throw;
      ++w_.read_report.rows_skipped;
      if (w_.read_report.skipped_examples.size() < kMaxSkippedExamples)
        w_.read_report.skipped_examples.emplace_back(e.what());
    }
    return o_.max_rows == 0 || w_.requests.size() < o_.max_rows;
  }

 private:
  Workload& w_;
  const TraceReadOptions& o_;
};

std::uint32_t parse_token_count(std::string_view raw, const std::string& file, std::size_t line,
                                const char* field, bool allow_zero) {
  const std::string_view s = trim(raw);
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size())
    throw InputError(file, line, field,
                     fmt::format("expected a {} integer, got {}", allow_zero ? "non-negative" : "positive",
                                 quote_input(s)));
  if ((!allow_zero && v == 0) || v > kMaxTokens)
    throw InputError(
        file, line, field,
        fmt::format("expected a token count in [{}, {}], got {}", allow_zero ? 0 : 1, kMaxTokens, v));
  return static_cast<std::uint32_t>(v);
}

std::uint32_t json_token_count(const json& obj, const char* key, const std::string& file, std::size_t line,
                               bool required, std::uint32_t fallback = 0) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw InputError(file, line, key, "missing (expected a positive integer)");
    return fallback;
  }
  if (!it->is_number_integer() && !it->is_number_unsigned())
    throw InputError(file, line, key,
                     fmt::format("expected a positive integer, got {}", quote_input(it->dump())));
  const auto v = it->get<std::int64_t>();
  if (v < 1 || static_cast<std::uint64_t>(v) > kMaxTokens)
    throw InputError(file, line, key,
                     fmt::format("expected a token count in [1, {}], got {}", kMaxTokens, v));
  return static_cast<std::uint32_t>(v);
}

double json_time_ms(const json& obj, const char* key, const std::string& file, std::size_t line,
                    bool required) {
  const auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) throw InputError(file, line, key, "missing (expected milliseconds >= 0)");
    return -1.0;
  }
  if (!it->is_number())
    throw InputError(file, line, key,
                     fmt::format("expected a number of milliseconds, got {}", quote_input(it->dump())));
  const double v = it->get<double>();
  if (!(v >= 0.0) || v > 1e15)
    throw InputError(file, line, key, fmt::format("expected milliseconds in [0, 1e15], got {}", v));
  return v;
}

json parse_json_line(std::string_view line, const std::string& file, std::size_t line_no) {
  require_json_depth(line, file, line_no);
  json j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded())
    throw InputError(file, line_no, "", "expected one JSON object per line (malformed JSON)");
  if (!j.is_object()) throw InputError(file, line_no, "", "expected a JSON object");
  return j;
}

std::int64_t ms_to_ns(double ms) {
  return static_cast<std::int64_t>(std::llround(ms * 1e6));
}

// ---- Azure CSV -------------------------------------------------------------

void parse_azure(TextReader& in, const std::string& file, Workload& w, const TraceReadOptions& o) {
  RowSink sink(w, o);
  std::int64_t first_ns = 0;
  bool have_first = false;
  bool header_seen = false;
  for_each_line(in, [&](std::size_t line_no, std::string_view line) {
    if (in.flaw() == TextReader::Flaw::kNone && trim(line).empty()) return true;
    if (!header_seen) {
      header_seen = true;
      check_line(in, line, file);
      if (trim(line) != "TIMESTAMP,ContextTokens,GeneratedTokens")
        throw InputError(
            file, line_no, "header",
            fmt::format("expected 'TIMESTAMP,ContextTokens,GeneratedTokens', got {}", quote_input(line)));
      return true;
    }
    return sink.row([&] {
      check_line(in, line, file);
      std::string_view cols[3];
      std::size_t n = 0, pos = 0;
      while (n < 3) {
        const std::size_t comma = line.find(',', pos);
        cols[n++] = line.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
        if (n == 3) throw InputError(file, line_no, "", "expected 3 columns, got more");
      }
      if (n != 3) throw InputError(file, line_no, "", fmt::format("expected 3 columns, got {}", n));
      std::int64_t ns = 0;
      if (!parse_civil_timestamp(trim(cols[0]), ns))
        throw InputError(
            file, line_no, "TIMESTAMP",
            fmt::format("expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got {}", quote_input(cols[0])));
      Request r;
      r.input_tokens = parse_token_count(cols[1], file, line_no, "ContextTokens", false);
      r.output_tokens = parse_token_count(cols[2], file, line_no, "GeneratedTokens", false);
      if (!have_first) {
        first_ns = ns;
        have_first = true;
      }
      r.arrival_ns = ns - first_ns;
      if (r.arrival_ns < 0)
        throw InputError(file, line_no, "TIMESTAMP", "expected times at or after the first row's");
      r.trace_line = line32(line_no);
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
  });
  if (!header_seen) throw InputError(file, 0, "", "empty file (expected a CSV header)");
  w.has_timestamps = true;
}

// ---- Mooncake JSONL --------------------------------------------------------

void parse_mooncake(TextReader& in, const std::string& file, Workload& w, const TraceReadOptions& o) {
  RowSink sink(w, o);
  w.hash_block_tokens = 512;
  for_each_line(in, [&](std::size_t line_no, std::string_view line) {
    if (in.flaw() == TextReader::Flaw::kNone && trim(line).empty()) return true;
    return sink.row([&] {
      check_line(in, line, file);
      const json j = parse_json_line(line, file, line_no);
      Request r;
      r.arrival_ns = ms_to_ns(json_time_ms(j, "timestamp", file, line_no, true));
      r.input_tokens = json_token_count(j, "input_length", file, line_no, true);
      r.output_tokens = json_token_count(j, "output_length", file, line_no, true);
      const auto it = j.find("hash_ids");
      if (it == j.end() || !it->is_array())
        throw InputError(file, line_no, "hash_ids", "expected an array of block ids");
      const std::size_t expected = (r.input_tokens + w.hash_block_tokens - 1) / w.hash_block_tokens;
      if (it->size() != expected)
        throw InputError(
            file, line_no, "hash_ids",
            fmt::format("expected ceil(input_length/512) = {} ids, got {}", expected, it->size()));
      r.source = PromptSource::kHashIds;
      r.source_begin = static_cast<std::uint32_t>(w.hash_pool.size());
      r.source_count = static_cast<std::uint32_t>(expected);
      for (const auto& id : *it) {
        if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<std::int64_t>() >= 0)) {
          w.hash_pool.resize(r.source_begin);
          throw InputError(file, line_no, "hash_ids",
                           fmt::format("expected non-negative integers, got {}", quote_input(id.dump())));
        }
        w.hash_pool.push_back(id.get<std::uint64_t>());
      }
      r.trace_line = line32(line_no);
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
  });
  w.has_timestamps = true;
}

// ---- ShareGPT JSON --------------------------------------------------------

// The reader's bytes as an input iterator, for nlohmann::json::parse: the
// document is parsed as it is read, never held whole. A NUL byte (binary
// data, a sparse file) ends the parse with a message that says so.
class JsonBytes {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;

  JsonBytes() = default;  // the end
  JsonBytes(TextReader& in, const std::string& file) : in_(&in), file_(&file) { advance(); }
  char operator*() const { return static_cast<char>(c_); }
  JsonBytes& operator++() {
    advance();
    return *this;
  }
  JsonBytes operator++(int) {
    JsonBytes before = *this;
    advance();
    return before;
  }
  bool operator==(const JsonBytes& o) const { return (c_ < 0) == (o.c_ < 0); }
  bool operator!=(const JsonBytes& o) const { return !(*this == o); }

 private:
  void advance() {
    c_ = in_->next_byte();
    if (c_ == 0)
      throw InputError(*file_, in_->line_number(), "",
                       "expected JSON text, found a NUL byte (a binary or sparse file?)");
  }
  TextReader* in_ = nullptr;
  const std::string* file_ = nullptr;
  int c_ = -1;
};

struct StopReading {};  // max_rows reached

// One array element: a conversation whose first human turn is the prompt.
void add_conversation(const json& e, std::size_t index, std::size_t line, const std::string& file,
                      Workload& w) {
  const std::string field = fmt::format("[{}].conversations", index);
  if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array())
    throw InputError(file, line, field, "expected an array of turns");
  const json* prompt = nullptr;
  for (const auto& turn : e["conversations"]) {
    if (!turn.is_object())
      throw InputError(file, line, field, "expected turn objects with 'from' and 'value'");
    const auto from = turn.find("from");
    const auto value = turn.find("value");
    if (from == turn.end() || !from->is_string() || value == turn.end() || !value->is_string())
      throw InputError(file, line, field, "expected string fields 'from' and 'value' in every turn");
    if (*from == "human" || *from == "user") {
      prompt = &*value;
      break;
    }
  }
  if (prompt == nullptr) throw InputError(file, line, field, "expected at least one human turn");
  const std::string& text_prompt = prompt->get_ref<const std::string&>();
  const std::size_t n = tokenizers::count_tokens(text_prompt);
  if (n == 0) throw InputError(file, line, field, "expected a non-empty prompt");
  Request r;
  r.input_tokens = static_cast<std::uint32_t>(std::min<std::size_t>(n, kMaxTokens));
  r.output_tokens = 0;  // no ground truth: the caller draws output lengths
  r.source = PromptSource::kText;
  r.source_begin = static_cast<std::uint32_t>(w.prompts.size());
  w.prompts.push_back(text_prompt);
  r.trace_line = line32(line);
  r.id = w.requests.size();
  w.requests.push_back(r);
}

// The array is parsed element by element: each conversation is turned into a
// request and dropped, so memory holds the prompts kept and one conversation.
void parse_sharegpt(TextReader& in, const std::string& file, Workload& w, const TraceReadOptions& o) {
  RowSink sink(w, o);
  std::size_t index = 0;
  std::size_t element_line = 0;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) &&
        static_cast<std::size_t>(depth) >= kMaxJsonDepth)
      throw InputError(file, in.line_number(), "",
                       fmt::format("JSON nested deeper than {} levels: refused; no trace is nested that deep",
                                   kMaxJsonDepth));
    if (depth == 0) {
      if (event == E::object_start || event == E::value)
        throw InputError(file, in.line_number(), "", "expected a JSON array of conversations");
      return true;
    }
    if (depth != 1) return true;
    if (event == E::object_start || event == E::array_start) {
      element_line = in.line_number();
      return true;
    }
    if (event == E::object_end || event == E::array_end || event == E::value) {
      if (event == E::value) element_line = in.line_number();
      const bool more = sink.row([&] { add_conversation(parsed, index, element_line, file, w); });
      ++index;
      if (!more) throw StopReading{};
      return false;  // drop it from the document
    }
    return true;
  };
  try {
    const json rest = json::parse(JsonBytes(in, file), JsonBytes(), on_event);  // an empty array
  } catch (const StopReading&) {
  } catch (const json::parse_error&) {
    throw InputError(file, in.line_number(), "", "malformed JSON (expected an array of conversations)");
  } catch (const json::out_of_range&) {
    throw InputError(file, in.line_number(), "",
                     "invalid JSON: number overflow (expected numbers a double can hold)");
  } catch (const json::exception& e) {
    throw InputError(file, in.line_number(), "", "invalid JSON: " + quote_input(e.what()));
  }
  w.has_timestamps = false;
}

// ---- native JSONL ----------------------------------------------------------

void parse_native(TextReader& in, const std::string& file, Workload& w, const TraceReadOptions& o) {
  static const char* const kKnown[] = {"t_ms",     "input_tokens", "output_tokens", "tenant",
                                       "priority", "prompt",       "hash_ids",      "hash_block_tokens"};
  RowSink sink(w, o);
  std::size_t with_time = 0;
  bool block_size_set = false;
  std::unordered_map<std::string, std::uint32_t> tenant_index;
  for_each_line(in, [&](std::size_t line_no, std::string_view line) {
    if (in.flaw() == TextReader::Flaw::kNone && (trim(line).empty() || trim(line).front() == '#'))
      return true;
    return sink.row([&] {
      check_line(in, line, file);
      const json j = parse_json_line(line, file, line_no);
      for (const auto& [key, _] : j.items()) {
        bool known = false;
        for (const char* k : kKnown) known |= key == k;
        if (!known)
          throw InputError(file, line_no, key,
                           "unknown field (expected t_ms, input_tokens, output_tokens, tenant, priority, "
                           "prompt, hash_ids, hash_block_tokens)");
      }
      Request r;
      const double t = json_time_ms(j, "t_ms", file, line_no, false);
      if (t >= 0) {
        r.arrival_ns = ms_to_ns(t);
        ++with_time;
      }
      r.output_tokens = json_token_count(j, "output_tokens", file, line_no, true);
      if (auto it = j.find("priority"); it != j.end()) {
        if (!it->is_number_integer()) throw InputError(file, line_no, "priority", "expected an integer");
        const auto p = it->get<std::int64_t>();
        if (p < std::numeric_limits<std::int32_t>::min() || p > std::numeric_limits<std::int32_t>::max())
          throw InputError(file, line_no, "priority", "expected a 32-bit integer");
        r.priority = static_cast<std::int32_t>(p);
      }
      if (auto it = j.find("tenant"); it != j.end()) {
        if (!it->is_string() || it->get_ref<const std::string&>().empty())
          throw InputError(file, line_no, "tenant", "expected a non-empty string");
        const auto& name = it->get_ref<const std::string&>();
        if (tenant_index.empty())
          for (std::size_t i = 0; i < w.tenants.size(); ++i)
            tenant_index.emplace(w.tenants[i], static_cast<std::uint32_t>(i));
        const auto [at, added] = tenant_index.emplace(name, static_cast<std::uint32_t>(w.tenants.size()));
        if (added) w.tenants.push_back(name);
        r.tenant = at->second;
      }
      const bool has_prompt = j.contains("prompt");
      const bool has_hashes = j.contains("hash_ids");
      if (has_prompt && has_hashes)
        throw InputError(file, line_no, "prompt", "give either prompt or hash_ids, not both");
      if (has_prompt) {
        if (!j["prompt"].is_string()) throw InputError(file, line_no, "prompt", "expected a string");
        const std::size_t n = tokenizers::count_tokens(j["prompt"].get_ref<const std::string&>());
        if (n == 0 || n > kMaxTokens)
          throw InputError(file, line_no, "prompt", "expected a non-empty prompt");
        // The row's own count, when it gives one (the served model's, as a
        // production trace logs it), is the planned length; else the
        // built-in tokenizer's count of the text.
        r.input_tokens = j.contains("input_tokens") ? json_token_count(j, "input_tokens", file, line_no, true)
                                                    : static_cast<std::uint32_t>(n);
        r.source = PromptSource::kText;
        r.source_begin = static_cast<std::uint32_t>(w.prompts.size());
        w.prompts.push_back(j["prompt"].get<std::string>());
      } else {
        r.input_tokens = json_token_count(j, "input_tokens", file, line_no, true);
      }
      if (has_hashes) {
        const std::uint32_t block = json_token_count(j, "hash_block_tokens", file, line_no, false, 512);
        if (!block_size_set) {
          w.hash_block_tokens = block;
          block_size_set = true;
        }
        if (block != w.hash_block_tokens)
          throw InputError(
              file, line_no, "hash_block_tokens",
              fmt::format("expected the same block size on every row ({})", w.hash_block_tokens));
        const auto& ids = j["hash_ids"];
        if (!ids.is_array()) throw InputError(file, line_no, "hash_ids", "expected an array of block ids");
        r.source = PromptSource::kHashIds;
        r.source_begin = static_cast<std::uint32_t>(w.hash_pool.size());
        r.source_count = static_cast<std::uint32_t>(ids.size());
        for (const auto& id : ids) {
          if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<std::int64_t>() >= 0)) {
            w.hash_pool.resize(r.source_begin);
            throw InputError(file, line_no, "hash_ids", "expected non-negative integers");
          }
          w.hash_pool.push_back(id.get<std::uint64_t>());
        }
      }
      r.trace_line = line32(line_no);
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
  });
  if (with_time != 0 && with_time != w.requests.size())
    throw InputError(file, 0, "t_ms", "expected t_ms on every row or on none");
  w.has_timestamps = with_time != 0;
  if (w.has_timestamps && !w.requests.empty()) {
    Nanos first = w.requests.front().arrival_ns;
    for (const auto& r : w.requests) first = std::min(first, r.arrival_ns);
    for (auto& r : w.requests) r.arrival_ns -= first;
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

TraceFormat parse_trace_format(std::string_view name) {
  if (name == "auto") return TraceFormat::kAuto;
  if (name == "azure") return TraceFormat::kAzure;
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "sharegpt") return TraceFormat::kShareGpt;
  if (name == "native") return TraceFormat::kNative;
  throw UsageError(
      fmt::format("unknown trace format '{}' (expected auto, azure, mooncake, sharegpt or native)", name));
}

std::string_view trace_format_name(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kAzure:
      return "azure";
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kShareGpt:
      return "sharegpt";
    case TraceFormat::kNative:
      return "native";
  }
  return "auto";
}

TraceFormat detect_trace_format(const std::string& path, std::string_view head) {
  head = head.substr(0, kDetectBytes);
  // NUL bytes where the format is told (the first line that is not blank),
  // or anywhere when it cannot be told, mean binary data: say so. Later rows
  // with one are bad rows for the reader (--skip-bad-rows skips them).
  const auto reject_nul = [&](std::size_t nul) {
    const std::size_t before = head.rfind('\n', nul);
    const std::size_t line_start = before == std::string_view::npos ? 0 : before + 1;
    const std::size_t line_no =
        1 + static_cast<std::size_t>(std::count(head.begin(), head.begin() + nul, '\n'));
    const std::string_view line = head.substr(line_start, head.find('\n', nul) - line_start);
    throw InputError(path, line_no, "", nul_problem(nul - line_start + 1, line));
  };
  const std::size_t first = head.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos) {
    const std::size_t nul = head.find('\0', first);
    if (nul != std::string_view::npos && nul < head.find('\n', first)) reject_nul(nul);
  }
  const std::string_view h = trim(head.substr(0, 4096));
  if (h.rfind("TIMESTAMP,", 0) == 0 || ends_with(path, ".csv")) return TraceFormat::kAzure;
  if (!h.empty() && h.front() == '[') return TraceFormat::kShareGpt;
  if (h.find("\"hash_ids\"") != std::string_view::npos &&
      h.find("\"input_length\"") != std::string_view::npos)
    return TraceFormat::kMooncake;
  if (!h.empty() && (h.front() == '{' || h.front() == '#')) return TraceFormat::kNative;
  if (const std::size_t nul = head.find('\0'); nul != std::string_view::npos) reject_nul(nul);
  throw UsageError(fmt::format("{}: cannot tell the trace format; pass --trace-format", path));
}

namespace {

bool only_blanks(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

Workload read_trace_from(TextReader& in, const std::string& name, TraceFormat format,
                         const TraceReadOptions& options) {
  const std::string_view head = in.peek(kDetectBytes);
  if (head.empty()) throw InputError(name, 0, "", "empty file, no requests");
  if (format == TraceFormat::kAuto) {
    if (head.size() < kDetectBytes && only_blanks(head))
      throw InputError(name, 0, "", "no requests (the file holds only blank lines)");
    format = detect_trace_format(name, head);
  }
  Workload w;
  w.description = fmt::format("{} trace {}", trace_format_name(format), name);
  w.trace_file = name;
  switch (format) {
    case TraceFormat::kAzure:
      w.length_field = "ContextTokens";
      parse_azure(in, name, w, options);
      break;
    case TraceFormat::kMooncake:
      w.length_field = "input_length";
      parse_mooncake(in, name, w, options);
      break;
    case TraceFormat::kShareGpt:
      w.text_field = "conversations";
      parse_sharegpt(in, name, w, options);
      break;
    case TraceFormat::kNative:
      w.length_field = "input_tokens";
      w.text_field = "prompt";
      parse_native(in, name, w, options);
      break;
    case TraceFormat::kAuto:
      break;
  }
  if (w.requests.empty())
    throw InputError(name, 0, "",
                     w.read_report.rows_skipped > 0 ? "every row was bad (nothing left to run)"
                                                    : "no requests in the trace");
  if (w.has_timestamps) sort_by_arrival(w);
  return w;
}

}  // namespace

Workload parse_trace_text(std::string_view text, const std::string& name, TraceFormat format,
                          const TraceReadOptions& options) {
  TextReader in(text);
  return read_trace_from(in, name, format, options);
}

Workload read_trace(const std::string& path, const TraceReadOptions& options) {
  TextReader in = TextReader::open(path, "trace file");
  return read_trace_from(in, path, options.format, options);
}

bool parse_civil_timestamp(std::string_view s, std::int64_t& out) {
  // YYYY-MM-DD HH:MM:SS[.f{1,9}]
  auto num = [&](std::size_t pos, std::size_t len, int& v) {
    if (pos + len > s.size()) return false;
    v = 0;
    for (std::size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    return true;
  };
  int y, mo, d, h, mi, sec;
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' ||
      s[16] != ':')
    return false;
  if (!num(0, 4, y) || !num(5, 2, mo) || !num(8, 2, d) || !num(11, 2, h) || !num(14, 2, mi) ||
      !num(17, 2, sec))
    return false;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return false;
  std::int64_t frac_ns = 0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20 || s.size() > 29) return false;
    std::int64_t scale = 100'000'000;
    for (std::size_t i = 20; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      frac_ns += (s[i] - '0') * scale;
      scale /= 10;
    }
  }
  // Days from civil (proleptic Gregorian), H. Hinnant's algorithm.
  const int yy = y - (mo <= 2);
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(yy - era * 400);
  const unsigned doy =
      (153 * static_cast<unsigned>(mo + (mo > 2 ? -3 : 9)) + 2) / 5 + static_cast<unsigned>(d) - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const std::int64_t days = static_cast<std::int64_t>(era) * 146097 + static_cast<std::int64_t>(doe) - 719468;
  out = ((days * 24 + h) * 60 + mi) * 60 * 1'000'000'000LL + sec * 1'000'000'000LL + frac_ns;
  return true;
}

}  // namespace tokenscope::workload
