#include "workload/trace_readers.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace tokenscope::workload {

namespace {

constexpr std::uint64_t kMaxTokens = 1u << 30;
constexpr std::size_t kMaxSkippedExamples = 5;

using json = nlohmann::json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string show(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string out(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return "'" + out + "'";
}

// Calls fn(line_number, line) for each line; handles CRLF and a missing final newline.
template <typename Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    if (!fn(line_no, line)) return;
    pos = end + 1;
  }
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
    throw InputError(
        file, line, field,
        fmt::format("expected a {} integer, got {}", allow_zero ? "non-negative" : "positive", show(s)));
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
    throw InputError(file, line, key, fmt::format("expected a positive integer, got {}", show(it->dump())));
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
                     fmt::format("expected a number of milliseconds, got {}", show(it->dump())));
  const double v = it->get<double>();
  if (!(v >= 0.0) || v > 1e15)
    throw InputError(file, line, key, fmt::format("expected milliseconds in [0, 1e15], got {}", v));
  return v;
}

json parse_json_line(std::string_view line, const std::string& file, std::size_t line_no) {
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

void parse_azure(std::string_view text, const std::string& file, Workload& w, const TraceReadOptions& o) {
  RowSink sink(w, o);
  std::int64_t first_ns = 0;
  bool have_first = false;
  bool header_seen = false;
  for_each_line(text, [&](std::size_t line_no, std::string_view line) {
    if (trim(line).empty()) return true;
    if (!header_seen) {
      header_seen = true;
      if (trim(line) != "TIMESTAMP,ContextTokens,GeneratedTokens")
        throw InputError(
            file, line_no, "header",
            fmt::format("expected 'TIMESTAMP,ContextTokens,GeneratedTokens', got {}", show(line)));
      return true;
    }
    return sink.row([&] {
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
        throw InputError(file, line_no, "TIMESTAMP",
                         fmt::format("expected 'YYYY-MM-DD HH:MM:SS[.fraction]', got {}", show(cols[0])));
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
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
  });
  if (!header_seen) throw InputError(file, 0, "", "empty file (expected a CSV header)");
  w.has_timestamps = true;
}

// ---- Mooncake JSONL --------------------------------------------------------

void parse_mooncake(std::string_view text, const std::string& file, Workload& w, const TraceReadOptions& o) {
  RowSink sink(w, o);
  w.hash_block_tokens = 512;
  for_each_line(text, [&](std::size_t line_no, std::string_view line) {
    if (trim(line).empty()) return true;
    return sink.row([&] {
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
                           fmt::format("expected non-negative integers, got {}", show(id.dump())));
        }
        w.hash_pool.push_back(id.get<std::uint64_t>());
      }
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
  });
  w.has_timestamps = true;
}

// ---- ShareGPT JSON ---------------------------------------------------------

std::size_t line_of_offset(std::string_view text, std::size_t offset) {
  std::size_t line = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

void parse_sharegpt(std::string_view text, const std::string& file, Workload& w, const TraceReadOptions& o) {
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw InputError(file, line_of_offset(text, e.byte), "",
                     "malformed JSON (expected an array of conversations)");
  } catch (const json::exception& e) {
    // e.g. a number too large for a double: not tied to a byte offset.
    throw InputError(file, 0, "", std::string("invalid JSON: ") + e.what());
  }
  if (!doc.is_array()) throw InputError(file, 1, "", "expected a JSON array of conversations");
  RowSink sink(w, o);
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const bool more = sink.row([&] {
      const json& e = doc[i];
      const std::string field = fmt::format("[{}].conversations", i);
      if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array())
        throw InputError(file, 0, field, "expected an array of turns");
      const json* prompt = nullptr;
      for (const auto& turn : e["conversations"]) {
        if (!turn.is_object())
          throw InputError(file, 0, field, "expected turn objects with 'from' and 'value'");
        const auto from = turn.find("from");
        const auto value = turn.find("value");
        if (from == turn.end() || !from->is_string() || value == turn.end() || !value->is_string())
          throw InputError(file, 0, field, "expected string fields 'from' and 'value' in every turn");
        if (*from == "human" || *from == "user") {
          prompt = &*value;
          break;
        }
      }
      if (prompt == nullptr) throw InputError(file, 0, field, "expected at least one human turn");
      const std::string& text_prompt = prompt->get_ref<const std::string&>();
      const std::size_t n = count_tokens(text_prompt);
      if (n == 0) throw InputError(file, 0, field, "expected a non-empty prompt");
      Request r;
      r.input_tokens = static_cast<std::uint32_t>(std::min<std::size_t>(n, kMaxTokens));
      r.output_tokens = 0;  // no ground truth: the caller draws output lengths
      r.source = PromptSource::kText;
      r.source_begin = static_cast<std::uint32_t>(w.prompts.size());
      w.prompts.push_back(text_prompt);
      r.id = w.requests.size();
      w.requests.push_back(r);
    });
    if (!more) break;
  }
  w.has_timestamps = false;
}

// ---- native JSONL ----------------------------------------------------------

void parse_native(std::string_view text, const std::string& file, Workload& w, const TraceReadOptions& o) {
  static const char* const kKnown[] = {"t_ms",     "input_tokens", "output_tokens", "tenant",
                                       "priority", "prompt",       "hash_ids",      "hash_block_tokens"};
  RowSink sink(w, o);
  std::size_t with_time = 0;
  bool block_size_set = false;
  for_each_line(text, [&](std::size_t line_no, std::string_view line) {
    if (trim(line).empty() || trim(line).front() == '#') return true;
    return sink.row([&] {
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
        std::size_t idx = 0;
        while (idx < w.tenants.size() && w.tenants[idx] != name) ++idx;
        if (idx == w.tenants.size()) w.tenants.push_back(name);
        r.tenant = static_cast<std::uint32_t>(idx);
      }
      const bool has_prompt = j.contains("prompt");
      const bool has_hashes = j.contains("hash_ids");
      if (has_prompt && has_hashes)
        throw InputError(file, line_no, "prompt", "give either prompt or hash_ids, not both");
      if (has_prompt) {
        if (!j["prompt"].is_string()) throw InputError(file, line_no, "prompt", "expected a string");
        const std::size_t n = count_tokens(j["prompt"].get_ref<const std::string&>());
        if (n == 0 || n > kMaxTokens)
          throw InputError(file, line_no, "prompt", "expected a non-empty prompt");
        r.input_tokens = static_cast<std::uint32_t>(n);
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

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("{}: cannot open trace file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw UsageError(fmt::format("{}: read error", path));
  return ss.str();
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
  const std::string_view h = trim(head.substr(0, 4096));
  if (h.rfind("TIMESTAMP,", 0) == 0 || ends_with(path, ".csv")) return TraceFormat::kAzure;
  if (!h.empty() && h.front() == '[') return TraceFormat::kShareGpt;
  if (h.find("\"hash_ids\"") != std::string_view::npos &&
      h.find("\"input_length\"") != std::string_view::npos)
    return TraceFormat::kMooncake;
  if (!h.empty() && (h.front() == '{' || h.front() == '#')) return TraceFormat::kNative;
  throw UsageError(fmt::format("{}: cannot tell the trace format; pass --trace-format", path));
}

Workload parse_trace_text(std::string_view text, const std::string& name, TraceFormat format,
                          const TraceReadOptions& options) {
  if (format == TraceFormat::kAuto) format = detect_trace_format(name, text);
  Workload w;
  w.description = fmt::format("{} trace {}", trace_format_name(format), name);
  switch (format) {
    case TraceFormat::kAzure:
      parse_azure(text, name, w, options);
      break;
    case TraceFormat::kMooncake:
      parse_mooncake(text, name, w, options);
      break;
    case TraceFormat::kShareGpt:
      parse_sharegpt(text, name, w, options);
      break;
    case TraceFormat::kNative:
      parse_native(text, name, w, options);
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

Workload read_trace(const std::string& path, const TraceReadOptions& options) {
  const std::string text = read_file(path);
  return parse_trace_text(text, path, options.format, options);
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
