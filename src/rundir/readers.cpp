#include "rundir/readers.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <simdjson.h>
#include <string.h>
#include <array>
#include <bit>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "core/json_depth.h"

namespace tokenscope::rundir {

using namespace observe;  // observations and their parser

namespace dom = simdjson::dom;

std::int64_t ClockAnchor::to_unix(Nanos t) const {
  const __int128 v = static_cast<__int128>(unix_ns) + (static_cast<__int128>(t) - monotonic_ns);
  if (v < 0) return 0;
  if (v > std::numeric_limits<std::int64_t>::max()) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(v);
}

namespace {

// A string at keys: "" when absent or null; InputError when another type.
std::string string_at(const nlohmann::json& j, std::initializer_list<const char*> keys,
                      const std::string& file, const std::string& field) {
  const auto* v = json_path(j, keys);
  if (!v || v->is_null()) return "";
  if (!v->is_string()) throw InputError(file, 0, field, "should be a string");
  return v->get<std::string>();
}

}  // namespace

const nlohmann::json* json_path(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const nlohmann::json* at = &j;
  for (const char* k : keys) {
    if (!at->is_object()) return nullptr;
    const auto it = at->find(k);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

RunInfo parse_run_info(std::string_view text, const std::string& file) {
  require_json_depth(text, file);
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw InputError(file, 0, "", "not a JSON object");
  RunInfo info;
  if (const auto* c = json_path(j, {"clock"}); c && !c->is_null()) {
    const auto* mono = json_path(*c, {"monotonic_ns"});
    const auto* unix_ns = json_path(*c, {"unix_ns"});
    if (!c->is_object() || !mono || !unix_ns || !mono->is_number_integer() || !unix_ns->is_number_integer())
      throw InputError(
          file, 0, "clock",
          "should be {\"monotonic_ns\": INTEGER, \"unix_ns\": INTEGER}, read at the same instant");
    info.clock = ClockAnchor{mono->get<Nanos>(), unix_ns->get<std::int64_t>()};
  }
  info.command = string_at(j, {"tool", "command"}, file, "tool.command");
  info.version = string_at(j, {"tool", "version"}, file, "tool.version");
  info.api = string_at(j, {"settings", "requested", "target", "api"}, file, "settings.requested.target.api");
  info.target_url =
      string_at(j, {"settings", "effective", "target", "url"}, file, "settings.effective.target.url");
  // The model served: bench's effective target (what /v1/models named),
  // else the one asked for, else the simulator's engine model.
  info.model =
      string_at(j, {"settings", "effective", "target", "model"}, file, "settings.effective.target.model");
  if (info.model.empty())
    info.model =
        string_at(j, {"settings", "requested", "target", "model"}, file, "settings.requested.target.model");
  if (info.model.empty()) {
    const auto* m = json_path(j, {"settings", "effective", "engine", "model"});
    if (m && m->is_string()) info.model = m->get<std::string>();
    if (m && m->is_object() && m->contains("name") && (*m)["name"].is_string())
      info.model = (*m)["name"].get<std::string>();
  }
  return info;
}

RunInfo read_run_info(const std::filesystem::path& dir) {
  const auto path = dir / "run.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  auto reader = TextReader::open_regular(path.string(), "run.json");
  if (reader.size() && *reader.size() > kMaxRunJsonBytes)
    throw InputError(path.string(), 0, "",
                     fmt::format("larger than {} MiB: not a run.json", kMaxRunJsonBytes >> 20));
  std::string text;
  for (std::string_view chunk; !(chunk = reader.take(TextReader::kChunkBytes)).empty();) {
    text.append(chunk);
    if (text.size() > kMaxRunJsonBytes)
      throw InputError(path.string(), 0, "",
                       fmt::format("larger than {} MiB: not a run.json", kMaxRunJsonBytes >> 20));
  }
  return parse_run_info(text, path.string());
}

// ---------------------------------------------------------------- requests

struct RequestLineParser::Impl {
  dom::parser parser;
  std::string buffer;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> fast_offsets;  // event_offsets_ns read ahead of the DOM (take_offsets)
  bool fast = false;
};

RequestLineParser::RequestLineParser() : impl_(std::make_unique<Impl>()) {}
RequestLineParser::~RequestLineParser() = default;

namespace {

const char* json_type_name(dom::element_type t) {
  switch (t) {
    case dom::element_type::ARRAY:
      return "an array";
    case dom::element_type::OBJECT:
      return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
      return "an integer";
    case dom::element_type::DOUBLE:
      return "a fractional number";
    case dom::element_type::STRING:
      return "a string";
    case dom::element_type::BOOL:
      return "a boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
  }
  return "something else";
}

[[noreturn]] void wrong_type(std::string_view key, dom::element v, const char* expected) {
  throw LineError(std::string(key), fmt::format("should be {}, not {}", expected, json_type_name(v.type())));
}

std::int64_t get_int(std::string_view key, dom::element v) {
  std::int64_t out = 0;
  if (v.get_int64().get(out) != simdjson::SUCCESS) wrong_type(key, v, "an integer");
  return out;
}

// A time: -1 (absent) or >= 0.
Nanos get_time(std::string_view key, dom::element v) {
  const std::int64_t t = get_int(key, v);
  if (t < -1)
    throw LineError(std::string(key), fmt::format("should be -1 (did not happen) or >= 0, not {}", t));
  return t;
}

std::uint64_t get_uint(std::string_view key, dom::element v) {
  std::uint64_t out = 0;
  if (v.get_uint64().get(out) != simdjson::SUCCESS) wrong_type(key, v, "a non-negative integer");
  return out;
}

// The per-event arrays, hundreds of numbers a line: flatten inlines
// simdjson's element accessors, which the compiler otherwise calls.
[[gnu::flatten]] bool read_offsets(dom::array a, std::vector<std::int64_t>& out) {
  for (const dom::element e : a) {
    std::int64_t off = 0;
    if (e.get_int64().get(off) != simdjson::SUCCESS || off < 0) return false;
    out.push_back(off);
  }
  return true;
}

[[gnu::flatten]] bool read_tokens(dom::array a, std::vector<std::uint32_t>& out) {
  for (const dom::element e : a) {
    std::uint64_t n = 0;
    if (e.get_uint64().get(n) != simdjson::SUCCESS || n > std::numeric_limits<std::uint32_t>::max())
      return false;
    out.push_back(static_cast<std::uint32_t>(n));
  }
  return true;
}

// The `logprobs` object of a record: {"n", "sum", "bins"} (core/logprob.h),
// its bins adding up to n.
void read_logprobs(dom::element v, LogprobHistogram& h) {
  dom::object o;
  if (v.get_object().get(o) != simdjson::SUCCESS) wrong_type("logprobs", v, "an object {n, sum, bins}");
  h = LogprobHistogram{};
  bool has_n = false, has_sum = false, has_bins = false;
  for (dom::key_value_pair kv : o) {
    const std::string_view k = kv.key;
    if (k == "n") {
      h.count = get_uint("logprobs.n", kv.value);
      has_n = true;
    } else if (k == "sum") {
      if (kv.value.get_double().get(h.sum) != simdjson::SUCCESS)
        wrong_type("logprobs.sum", kv.value, "a number");
      if (!(h.sum <= 0))
        throw LineError("logprobs.sum", fmt::format("should be <= 0 (a sum of logprobs), not {}", h.sum));
      has_sum = true;
    } else if (k == "bins") {
      dom::array a;
      if (kv.value.get_array().get(a) != simdjson::SUCCESS)
        wrong_type("logprobs.bins", kv.value, "an array of counts");
      std::size_t i = 0;
      for (const dom::element e : a) {
        if (i >= LogprobHistogram::kBins)
          throw LineError("logprobs.bins",
                          fmt::format("should hold at most {} counts", LogprobHistogram::kBins));
        h.bins[i++] = get_uint("logprobs.bins", e);
      }
      has_bins = true;
    }
  }
  if (!has_n || !has_sum || !has_bins)
    throw LineError(!has_n     ? "logprobs.n"
                    : !has_sum ? "logprobs.sum"
                               : "logprobs.bins",
                    "missing (logprobs is {\"n\", \"sum\", \"bins\"})");
  std::uint64_t total = 0;
  for (const std::uint64_t c : h.bins) {
    if (c > UINT64_MAX - total) throw LineError("logprobs.bins", "counts overflow");
    total += c;
  }
  if (total != h.count)
    throw LineError("logprobs.bins", fmt::format("counts add up to {}, not n = {}", total, h.count));
}

// `dropped_gaps_ns`: the gaps of the events past bench --max-events, a
// LogLinearHistogram's JSON (core/histogram.h).
LogLinearHistogram read_gap_histogram(dom::element v) {
  if (!v.is_object()) wrong_type("dropped_gaps_ns", v, "an object (a histogram)");
  try {
    const nlohmann::json j = nlohmann::json::parse(simdjson::minify(v));
    // Whole numbers where the histogram keeps whole numbers: from_json
    // converts what it is given, and a fraction or a 1e300 is no count.
    const auto whole = [&j](const char* key) { return j.contains(key) && j[key].is_number_unsigned(); };
    if (!whole("count") || !whole("min") || !whole("max") || !whole("sub_bucket_bits") ||
        !j.contains("buckets") || !j["buckets"].is_array())
      throw std::invalid_argument(
          "expected {sub_bucket_bits, count, min, max, sum, sum_sq, buckets} with whole numbers");
    for (const auto& b : j["buckets"])
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() || !b[1].is_number_unsigned())
        throw std::invalid_argument("each bucket should be [index, count] in whole numbers");
    return LogLinearHistogram::from_json(j);
  } catch (const std::exception& e) {
    throw LineError("dropped_gaps_ns", fmt::format("not a histogram of gaps ({})", e.what()));
  }
}

void get_string(std::string_view key, dom::element v, std::string& out) {
  std::string_view s;
  if (v.get_string().get(s) != simdjson::SUCCESS) wrong_type(key, v, "a string");
  out.assign(s);
}

// The top-level "event_offsets_ns" array of a request line, read before the
// DOM parse: most of a line's bytes are these integers, which a plain loop
// reads several times faster than simdjson's tape builds them. On success
// the array's contents in `buf` are overwritten with spaces (the DOM then
// sees an empty array there, and still checks the whole line) and `out`
// holds the values. Anything unexpected — the key not at the top level, a
// value that is not a non-negative integer below 2^63, another character —
// leaves `buf` as it was, for the DOM to read (or to reject) as before.
// Whether the 8 bytes of `chunk` (little-endian) are all ASCII digits.
inline bool eight_digits(std::uint64_t chunk) {
  return ((chunk & 0xF0F0F0F0F0F0F0F0) | (((chunk + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) >> 4)) ==
         0x3333333333333333;
}
// Their value: pairs, then quadruples, then the eight combined by multiplies
// (the usual SWAR conversion; the first digit is the lowest byte).
inline std::uint64_t parse_eight_digits(std::uint64_t chunk) {
  constexpr std::uint64_t kMask = 0x000000FF000000FF;
  constexpr std::uint64_t kMul1 = 100 + (1'000'000ULL << 32);
  constexpr std::uint64_t kMul2 = 1 + (10'000ULL << 32);
  chunk -= 0x3030303030303030;
  chunk = chunk * 10 + (chunk >> 8);
  return (((chunk & kMask) * kMul1) + (((chunk >> 16) & kMask) * kMul2)) >> 32;
}

template <class T>
bool fast_uint_array(const char*& p, std::uint64_t max, std::vector<T>& out);

bool take_offsets(std::string& buf, std::size_t size, std::vector<std::int64_t>& out) {
  // buf holds the line and simdjson's padding of NULs after it: every loop
  // below stops at a NUL without a bound check.
  static constexpr std::string_view kKey = "\"event_offsets_ns\":[";
  char* const begin = buf.data();
  const auto* found = static_cast<const char*>(::memmem(begin, size, kKey.data(), kKey.size()));
  if (!found) return false;
  // The key must sit at depth 1, outside any string: only quotes, braces,
  // brackets and backslashes matter, the rest is skipped by a table.
  static constexpr auto kSpecial = [] {
    std::array<bool, 256> t{};
    for (unsigned char c : std::string_view("\"\\{}[]")) t[c] = true;
    return t;
  }();
  int depth = 0;
  bool in_string = false;
  for (const char* p = begin; p < found; ++p) {
    while (p < found && !kSpecial[static_cast<unsigned char>(*p)]) ++p;
    if (p >= found) break;
    const char c = *p;
    if (in_string) {
      if (c == '\\')
        ++p;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  if (in_string || depth != 1) return false;
  out.clear();
  char* const open = begin + (found - begin) + kKey.size() - 1;  // at the '['
  const char* p = open;
  if (!fast_uint_array(p, static_cast<std::uint64_t>(INT64_MAX), out) || p > begin + size) return false;
  std::memset(open + 1, ' ', static_cast<std::size_t>(p - 1 - (open + 1)));  // between '[' and ']'
  return true;
}

}  // namespace

namespace {

// A record before its line is read: every field absent.
void reset_record(RequestRecord& r) {
  r.tenant.clear();
  r.task_class.clear();
  r.model.clear();
  r.response_id.clear();
  r.detail.clear();
  r.event_times.clear();
  r.event_tokens.clear();
  r.id = 0;
  r.session = -1;
  r.replica = -1;
  r.task = -1;
  r.step.clear();
  r.prompt_tokens_planned = r.output_tokens_client = -1;
  r.output_tokens_counted_by_client = false;
  r.server_decode_ms = -1;
  r.dropped_event_tokens = 0;
  r.dropped_gaps_ns.reset();
  r.turn = 0;
  r.warmup = false;
  r.t_sched = r.t_dispatch = r.t_send = r.t_headers = r.t_first_scheduled = r.t_first_token = r.t_last_token =
      r.t_close = r.t_first_answer = -1;
  r.reasoning_tokens = -1;
  r.inputs = -1;
  r.audio_ms = -1;
  r.preemptions = 0;
  r.prompt_tokens = r.output_tokens = r.output_tokens_planned = r.cached_tokens = r.http_status = -1;
  r.server_prompt_ms = -1;
  r.server_prompt_evaluated = -1;
  r.events_dropped = 0;
  r.outcome = Outcome::kOk;
  r.cancel_planned = false;
  r.logprobs.reset();
}

// What every record must have, and its event times from the offsets.
void finish_record(RequestRecord& r, const std::vector<std::int64_t>& offsets, bool has_id, bool has_outcome,
                   bool has_tokens) {
  if (!has_id) throw LineError("id", "missing (every request record has one)");
  if (!has_outcome) throw LineError("outcome", "missing (every request record has one)");
  if (!offsets.empty() && r.t_send < 0)
    throw LineError("event_offsets_ns", "holds events but t_send_ns is -1 (offsets count from t_send_ns)");
  if (has_tokens && r.event_tokens.size() != offsets.size())
    throw LineError("event_tokens", fmt::format("has {} entries for {} events in event_offsets_ns",
                                                r.event_tokens.size(), offsets.size()));
  r.event_times.reserve(offsets.size());
  for (const std::int64_t off : offsets) {
    if (off > std::numeric_limits<Nanos>::max() - r.t_send)
      throw LineError("event_offsets_ns",
                      fmt::format("offset {} from t_send_ns {} overflows", off, r.t_send));
    r.event_times.push_back(r.t_send + off);
  }
  if (!has_tokens) r.event_tokens.assign(r.event_times.size(), 1);
}

// ---- the fast path: the plain form tokenscope itself writes
//
// One flat object; keys without escapes; strings of printable ASCII without
// escapes; integers without fraction or exponent; the two event arrays of
// integers. Anything else — another key, a float, null, an escape, a byte
// above 0x7F, a value out of its range — returns false and the line is read
// by simdjson's DOM as before, which checks it whole and names what is
// wrong. `p` runs over a buffer with NUL padding after the line, so no loop
// needs a bound check: a NUL stops every one of them.

inline void skip_space(const char*& p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
}

// A JSON integer -?(0|[1-9][0-9]*) within int64, not followed by a fraction or exponent.
inline bool fast_int(const char*& p, std::int64_t& out) {
  const bool negative = *p == '-';
  if (negative) ++p;
  if (static_cast<unsigned>(*p - '0') > 9) return false;
  if (*p == '0' && static_cast<unsigned>(p[1] - '0') <= 9) return false;
  const char* const first = p;
  std::uint64_t v = 0;
  while (static_cast<unsigned>(*p - '0') <= 9) {
    v = v * 10 + static_cast<unsigned>(*p - '0');
    ++p;
  }
  if (p - first > 19 || (p - first == 19 && v > static_cast<std::uint64_t>(INT64_MAX))) return false;
  if (*p == '.' || *p == 'e' || *p == 'E') return false;
  out = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
  return true;
}

inline bool fast_uint(const char*& p, std::uint64_t max, std::uint64_t& out) {
  std::int64_t v = 0;
  if (*p == '-' || !fast_int(p, v) || static_cast<std::uint64_t>(v) > max) return false;
  out = static_cast<std::uint64_t>(v);
  return true;
}

inline bool fast_string(const char*& p, std::string_view& out) {
  if (*p != '"') return false;
  const char* const first = ++p;
  while (true) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"') break;
    if (c < 0x20 || c == '\\' || c >= 0x80) return false;
    ++p;
  }
  out = std::string_view(first, static_cast<std::size_t>(p - first));
  ++p;
  return true;
}

inline bool fast_bool(const char*& p, bool& out) {
  if (std::memcmp(p, "true", 4) == 0) {
    out = true;
    p += 4;
    return true;
  }
  if (std::memcmp(p, "false", 5) == 0) {
    out = false;
    p += 5;
    return true;
  }
  return false;
}

// [n, n, ...] of integers from 0 to max, eight digits at a time where there are eight.
template <class T>
bool fast_uint_array(const char*& p, std::uint64_t max, std::vector<T>& out) {
  if (*p != '[') return false;
  ++p;
  skip_space(p);
  if (*p == ']') {
    ++p;
    return true;
  }
  while (true) {
    if (static_cast<unsigned>(*p - '0') > 9) return false;
    if (*p == '0' && static_cast<unsigned>(p[1] - '0') <= 9) return false;  // a leading 0
    std::uint64_t v = 0;
    const char* const first = p;
    if constexpr (std::endian::native == std::endian::little) {
      for (int k = 0; k < 2; ++k) {
        std::uint64_t chunk;
        std::memcpy(&chunk, p, 8);
        if (!eight_digits(chunk)) break;
        v = v * 100'000'000 + parse_eight_digits(chunk);
        p += 8;
      }
    }
    while (static_cast<unsigned>(*p - '0') <= 9) {
      v = v * 10 + static_cast<unsigned>(*p - '0');
      ++p;
    }
    if (p - first > 19 || v > max || *p == '.' || *p == 'e' || *p == 'E') return false;
    out.push_back(static_cast<T>(v));
    if (*p == ',') {
      ++p;
      continue;
    }
    skip_space(p);
    if (*p == ']') {
      ++p;
      return true;
    }
    if (*p != ',') return false;
    ++p;
    skip_space(p);
  }
}

// Long by nature: one branch per field of the plain form (the DOM's loop below, without the errors).
bool fast_parse(const char* p, std::size_t size, RequestRecord& r, std::vector<std::int64_t>& offsets,
                bool& has_id, bool& has_outcome, bool& has_tokens) {
  const char* const end = p + size;
  skip_space(p);
  if (*p != '{') return false;
  ++p;
  skip_space(p);
  if (*p == '}') {
    ++p;
  } else {
    while (true) {
      std::string_view k;
      if (!fast_string(p, k)) return false;
      skip_space(p);
      if (*p != ':') return false;
      ++p;
      skip_space(p);
      std::int64_t i = 0;
      std::uint64_t u = 0;
      std::string_view text;
      if (k.size() > 3 && k.starts_with("t_") && k.ends_with("_ns")) {
        if (!fast_int(p, i) || i < -1) return false;
        const std::string_view name = k.substr(2, k.size() - 5);
        Nanos* slot = name == "sched"             ? &r.t_sched
                      : name == "dispatch"        ? &r.t_dispatch
                      : name == "send"            ? &r.t_send
                      : name == "headers"         ? &r.t_headers
                      : name == "first_scheduled" ? &r.t_first_scheduled
                      : name == "first_token"     ? &r.t_first_token
                      : name == "first_answer"    ? &r.t_first_answer
                      : name == "last_token"      ? &r.t_last_token
                      : name == "close"           ? &r.t_close
                                                  : nullptr;
        if (slot) *slot = i;
      } else if (k == "event_offsets_ns") {
        // Appended, as the DOM's read appends a repeated key's values.
        if (!fast_uint_array(p, static_cast<std::uint64_t>(INT64_MAX), offsets)) return false;
      } else if (k == "event_tokens") {
        if (!fast_uint_array(p, std::numeric_limits<std::uint32_t>::max(), r.event_tokens)) return false;
        has_tokens = true;
      } else if (k == "id") {
        if (!fast_uint(p, static_cast<std::uint64_t>(INT64_MAX), u)) return false;
        r.id = u;
        has_id = true;
      } else if (k == "outcome") {
        if (!fast_string(p, text) || !parse_outcome(text, r.outcome)) return false;
        has_outcome = true;
      } else if (k == "tenant" || k == "class" || k == "model" || k == "step" || k == "response_id" ||
                 k == "detail" || k == "output_tokens_from") {
        if (!fast_string(p, text)) return false;
        if (k == "tenant")
          r.tenant.assign(text);
        else if (k == "class")
          r.task_class.assign(text);
        else if (k == "model")
          r.model.assign(text);
        else if (k == "step")
          r.step.assign(text);
        else if (k == "response_id")
          r.response_id.assign(text);
        else if (k == "detail")
          r.detail.assign(text);
        else
          r.output_tokens_counted_by_client = text == "client";
      } else if (k == "warmup" || k == "cancel_planned") {
        if (!fast_bool(p, k == "warmup" ? r.warmup : r.cancel_planned)) return false;
      } else if (k == "turn" || k == "preemptions") {
        if (!fast_uint(p, std::numeric_limits<std::uint32_t>::max(), u)) return false;
        (k == "turn" ? r.turn : r.preemptions) = static_cast<std::uint32_t>(u);
      } else if (k == "http_status") {
        if (!fast_int(p, i)) return false;
        r.http_status = static_cast<int>(i);  // as the DOM's read converts it
      } else if (k == "dropped_event_tokens" || k == "events_dropped") {
        if (!fast_uint(p, static_cast<std::uint64_t>(INT64_MAX), u)) return false;
        (k == "events_dropped" ? r.events_dropped : r.dropped_event_tokens) = u;
      } else {
        std::int64_t* slot = k == "prompt_tokens"             ? &r.prompt_tokens
                             : k == "output_tokens"           ? &r.output_tokens
                             : k == "output_tokens_client"    ? &r.output_tokens_client
                             : k == "cached_tokens"           ? &r.cached_tokens
                             : k == "output_tokens_planned"   ? &r.output_tokens_planned
                             : k == "prompt_tokens_planned"   ? &r.prompt_tokens_planned
                             : k == "reasoning_tokens"        ? &r.reasoning_tokens
                             : k == "session"                 ? &r.session
                             : k == "replica"                 ? &r.replica
                             : k == "task"                    ? &r.task
                             : k == "inputs"                  ? &r.inputs
                             : k == "audio_ms"                ? &r.audio_ms
                             : k == "server_prompt_evaluated" ? &r.server_prompt_evaluated
                                                              : nullptr;
        if (!slot || !fast_int(p, i)) return false;  // another key (or value): the DOM reads it
        *slot = i;
      }
      skip_space(p);
      if (*p == ',') {
        ++p;
        skip_space(p);
        continue;
      }
      if (*p != '}') return false;
      ++p;
      break;
    }
  }
  skip_space(p);
  return p == end;
}

}  // namespace

// Long by nature: one branch per field of requests.jsonl.
void RequestLineParser::parse(std::string_view line, RequestRecord& r) {
  auto& im = *impl_;
  im.buffer.assign(line);
  im.buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  bool has_id = false, has_outcome = false, has_tokens = false;
  reset_record(r);
  im.offsets.clear();
  if (fast_parse(im.buffer.data(), line.size(), r, im.offsets, has_id, has_outcome, has_tokens)) {
    finish_record(r, im.offsets, has_id, has_outcome, has_tokens);
    return;
  }
  // Not the plain form tokenscope writes (or not valid): simdjson's DOM reads
  // it, and says what is wrong.
  im.fast = take_offsets(im.buffer, line.size(), im.fast_offsets);
  dom::element doc;
  if (const auto err = im.parser.parse(im.buffer.data(), line.size(), false).get(doc);
      err != simdjson::SUCCESS)
    throw LineError("", fmt::format("not JSON ({})", simdjson::error_message(err)));
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS)
    throw LineError("", "should be a JSON object (one request)");

  reset_record(r);
  im.offsets.clear();
  has_id = has_outcome = has_tokens = false;

  // One pass over the keys (a lookup by key is a linear scan). Keys the
  // exporters do not use are passed over, so that a newer record still reads.
  for (dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    const dom::element v = kv.value;
    if (k.size() > 3 && k.starts_with("t_") && k.ends_with("_ns")) {
      const std::string_view name = k.substr(2, k.size() - 5);
      Nanos* slot = name == "sched"             ? &r.t_sched
                    : name == "dispatch"        ? &r.t_dispatch
                    : name == "send"            ? &r.t_send
                    : name == "headers"         ? &r.t_headers
                    : name == "first_scheduled" ? &r.t_first_scheduled
                    : name == "first_token"     ? &r.t_first_token
                    : name == "first_answer"    ? &r.t_first_answer
                    : name == "last_token"      ? &r.t_last_token
                    : name == "close"           ? &r.t_close
                                                : nullptr;
      if (slot) *slot = get_time(k, v);
    } else if (k == "id") {
      r.id = get_uint(k, v);
      has_id = true;
    } else if (k == "tenant") {
      get_string(k, v, r.tenant);
    } else if (k == "class") {
      get_string(k, v, r.task_class);
    } else if (k == "model") {
      get_string(k, v, r.model);
    } else if (k == "session") {
      r.session = get_int(k, v);
    } else if (k == "replica") {
      r.replica = get_int(k, v);
    } else if (k == "task") {
      r.task = get_int(k, v);
    } else if (k == "step") {
      get_string(k, v, r.step);
    } else if (k == "turn") {
      const auto t = get_uint(k, v);
      if (t > std::numeric_limits<std::uint32_t>::max()) throw LineError("turn", "should be below 2^32");
      r.turn = static_cast<std::uint32_t>(t);
    } else if (k == "warmup") {
      if (v.get_bool().get(r.warmup) != simdjson::SUCCESS) wrong_type(k, v, "true or false");
    } else if (k == "cancel_planned") {
      if (v.get_bool().get(r.cancel_planned) != simdjson::SUCCESS) wrong_type(k, v, "true or false");
    } else if (k == "prompt_tokens") {
      r.prompt_tokens = get_int(k, v);
    } else if (k == "output_tokens") {
      r.output_tokens = get_int(k, v);
    } else if (k == "output_tokens_planned") {
      r.output_tokens_planned = get_int(k, v);
    } else if (k == "prompt_tokens_planned") {
      r.prompt_tokens_planned = get_int(k, v);
    } else if (k == "output_tokens_client") {
      r.output_tokens_client = get_int(k, v);
    } else if (k == "output_tokens_from") {
      std::string_view s;
      if (v.get_string().get(s) != simdjson::SUCCESS) wrong_type(k, v, "a string");
      r.output_tokens_counted_by_client = s == "client";
    } else if (k == "server_decode_ms") {
      if (v.get_double().get(r.server_decode_ms) != simdjson::SUCCESS) wrong_type(k, v, "a number");
    } else if (k == "dropped_event_tokens") {
      r.dropped_event_tokens = get_uint(k, v);
    } else if (k == "dropped_gaps_ns") {
      r.dropped_gaps_ns = std::make_shared<const LogLinearHistogram>(read_gap_histogram(v));
    } else if (k == "cached_tokens") {
      r.cached_tokens = get_int(k, v);
    } else if (k == "reasoning_tokens") {
      r.reasoning_tokens = get_int(k, v);
    } else if (k == "inputs") {
      r.inputs = get_int(k, v);
    } else if (k == "audio_ms") {
      r.audio_ms = get_int(k, v);
    } else if (k == "http_status") {
      r.http_status = get_int(k, v);
    } else if (k == "server_prompt_ms") {
      if (v.get_double().get(r.server_prompt_ms) != simdjson::SUCCESS) wrong_type(k, v, "a number");
    } else if (k == "server_prompt_evaluated") {
      r.server_prompt_evaluated = get_int(k, v);
    } else if (k == "preemptions") {
      const auto n = get_uint(k, v);
      if (n > std::numeric_limits<std::uint32_t>::max())
        throw LineError("preemptions", "should be below 2^32");
      r.preemptions = static_cast<std::uint32_t>(n);
    } else if (k == "events_dropped") {
      r.events_dropped = get_uint(k, v);
    } else if (k == "response_id") {
      get_string(k, v, r.response_id);
    } else if (k == "logprobs") {
      read_logprobs(v, r.logprobs.emplace());
    } else if (k == "detail") {
      get_string(k, v, r.detail);
    } else if (k == "outcome") {
      std::string_view s;
      if (v.get_string().get(s) != simdjson::SUCCESS) wrong_type(k, v, "a string");
      if (!parse_outcome(s, r.outcome))
        throw LineError("outcome",
                        fmt::format("{} is not an outcome (ok, http_error, timeout, connect_error, "
                                    "protocol_error, validation_error, cancelled, rejected)",
                                    quote_input(s)));
      has_outcome = true;
    } else if (k == "event_offsets_ns") {
      dom::array a;
      if (v.get_array().get(a) != simdjson::SUCCESS) wrong_type(k, v, "an array of integers");
      if (im.fast && a.size() == 0) {  // read ahead (take_offsets); a later duplicate key is read by the DOM
        im.offsets.insert(im.offsets.end(), im.fast_offsets.begin(), im.fast_offsets.end());
        im.fast = false;
      } else if (!read_offsets(a, im.offsets))
        throw LineError("event_offsets_ns", "should hold integers >= 0 (ns after t_send_ns)");
    } else if (k == "event_tokens") {
      dom::array a;
      if (v.get_array().get(a) != simdjson::SUCCESS) wrong_type(k, v, "an array of integers");
      if (!read_tokens(a, r.event_tokens))
        throw LineError("event_tokens", "should hold integers from 0 to 2^32-1");
      has_tokens = true;
    }
  }
  finish_record(r, im.offsets, has_id, has_outcome, has_tokens);
}

namespace {

// Either throws the InputError or counts the line as skipped.
void bad_line(BadLines policy, ReadStats& stats, const std::string& file, std::uint64_t line,
              const std::string& field, const std::string& problem) {
  InputError e(file, line, field, problem);
  if (policy == BadLines::kFail) throw e;
  if (stats.skipped++ == 0) {
    stats.first_skipped = e.what();
    stats.first_skipped_line = line;
    stats.first_skipped_field = field;
    stats.first_skipped_problem = problem;
  }
}

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

// ---------------------------------------------------------------- tasks

struct TaskLineParser::Impl {
  dom::parser parser;
  std::string buffer;
  std::vector<std::pair<std::string_view, std::size_t>> ids;  // (id, index), sorted to find an id used twice
};

TaskLineParser::TaskLineParser() : impl_(std::make_unique<Impl>()) {}
TaskLineParser::~TaskLineParser() = default;
TaskLineParser::TaskLineParser(TaskLineParser&&) noexcept = default;
TaskLineParser& TaskLineParser::operator=(TaskLineParser&&) noexcept = default;

namespace {

// A string that must be one of `values` (the words tasks.jsonl uses).
void get_task_word(std::string_view key, dom::element v, std::initializer_list<std::string_view> values,
                   std::string& out) {
  get_string(key, v, out);
  std::string list;
  for (const std::string_view w : values) {
    if (out == w) return;
    list += list.empty() ? "" : ", ";
    list += w;
  }
  throw LineError(std::string(key), fmt::format("{} is not one of {}", quote_input(out), list));
}

void get_task_strings(std::string_view key, dom::element v, std::vector<std::string>& out) {
  dom::array a;
  if (v.get_array().get(a) != simdjson::SUCCESS) wrong_type(key, v, "an array of strings");
  out.clear();
  for (const dom::element e : a) {
    std::string_view s;
    if (e.get_string().get(s) != simdjson::SUCCESS)
      throw LineError(std::string(key), fmt::format("should hold strings, not {}", json_type_name(e.type())));
    out.emplace_back(s);
  }
}

double get_task_ms(std::string_view key, dom::element v) {
  double d = 0;
  if (v.get_double().get(d) != simdjson::SUCCESS) wrong_type(key, v, "a number (ms)");
  return d;
}

// A LineError of a part of the record, its field named from the record's
// root: "steps[2].kind", "critical_path.model_ms".
[[noreturn]] void rethrow_within(const std::string& prefix, const LineError& e) {
  throw LineError(e.field().empty() ? prefix : prefix + "." + e.field(), e.what());
}

void parse_task_step(dom::element v, TaskStepRecord& s) {
  dom::object o;
  if (v.get_object().get(o) != simdjson::SUCCESS) wrong_type("", v, "an object (one step)");
  s.id.clear();
  s.kind.clear();
  s.name.clear();
  s.outcome.clear();
  s.failure.clear();
  s.detail.clear();
  s.attempts = 0;
  s.t_ready = s.t_start = s.t_end = -1;
  s.retried.clear();
  s.requests.clear();
  s.prompt_tokens = s.cached_tokens = s.output_tokens = -1;
  s.documents.clear();
  s.after.clear();
  s.has_after = false;
  s.t_sent = s.t_returned = -1;
  bool has_id = false, has_kind = false;
  for (dom::key_value_pair kv : o) {
    const std::string_view k = kv.key;
    const dom::element e = kv.value;
    if (k == "id") {
      get_string(k, e, s.id);
      has_id = true;
    } else if (k == "kind") {
      get_task_word(k, e, {"model", "tool", "retrieval"}, s.kind);
      has_kind = true;
    } else if (k == "name") {
      get_string(k, e, s.name);
    } else if (k == "outcome") {
      get_task_word(k, e, {"ok", "failed", "skipped", "running", "waiting"}, s.outcome);
    } else if (k == "failure") {
      get_string(k, e, s.failure);
    } else if (k == "detail") {
      get_string(k, e, s.detail);
    } else if (k == "attempts") {
      const auto n = get_uint(k, e);
      if (n > std::numeric_limits<std::uint32_t>::max()) throw LineError("attempts", "should be below 2^32");
      s.attempts = static_cast<std::uint32_t>(n);
    } else if (k == "t_ready_ns") {
      s.t_ready = get_time(k, e);
    } else if (k == "t_start_ns") {
      s.t_start = get_time(k, e);
    } else if (k == "t_end_ns") {
      s.t_end = get_time(k, e);
    } else if (k == "retried") {
      get_task_strings(k, e, s.retried);
    } else if (k == "documents") {
      get_task_strings(k, e, s.documents);
    } else if (k == "after") {
      get_task_strings(k, e, s.after);
      s.has_after = true;
    } else if (k == "t_sent_ns") {
      s.t_sent = get_time(k, e);
    } else if (k == "t_returned_ns") {
      s.t_returned = get_time(k, e);
    } else if (k == "requests") {
      dom::array a;
      if (e.get_array().get(a) != simdjson::SUCCESS) wrong_type(k, e, "an array of request ids");
      for (const dom::element id : a) s.requests.push_back(get_uint(k, id));
    } else if (k == "prompt_tokens") {
      s.prompt_tokens = get_int(k, e);
    } else if (k == "cached_tokens") {
      s.cached_tokens = get_int(k, e);
    } else if (k == "output_tokens") {
      s.output_tokens = get_int(k, e);
    }
  }
  if (!has_id) throw LineError("id", "missing (every step has one)");
  if (!has_kind) throw LineError("kind", "missing (model, tool or retrieval)");
  // Token counts a server could send, so that sums over a task's steps cannot overflow.
  constexpr std::int64_t kMaxTokens = std::int64_t{1} << 40;
  for (const auto& [name, v] :
       {std::pair{"prompt_tokens", s.prompt_tokens}, std::pair{"cached_tokens", s.cached_tokens},
        std::pair{"output_tokens", s.output_tokens}})
    if (v < -1 || v > kMaxTokens)
      throw LineError(name, fmt::format("{} is not a token count (-1 to 2^40)", v));
  if (s.t_start >= 0 && s.t_end < 0)
    throw LineError("t_end_ns", "is -1 for a step that started (a task ends after its steps do)");
  if (s.t_end >= 0 && s.t_end < s.t_start)
    throw LineError("t_end_ns", fmt::format("{} is before t_start_ns {}", s.t_end, s.t_start));
}

void parse_critical_path(dom::element v, TaskCriticalPath& c) {
  dom::object o;
  if (v.get_object().get(o) != simdjson::SUCCESS) wrong_type("", v, "an object");
  for (dom::key_value_pair kv : o) {
    const std::string_view k = kv.key;
    double* slot = k == "total_ms"    ? &c.total_ms
                   : k == "model_ms"  ? &c.model_ms
                   : k == "tool_ms"   ? &c.tool_ms
                   : k == "client_ms" ? &c.client_ms
                   : k == "queue_ms"  ? &c.queue_ms
                                      : nullptr;
    if (slot) {
      *slot = get_task_ms(k, kv.value);
    } else if (k == "steps") {
      get_task_strings(k, kv.value, c.steps);
    }
  }
}

}  // namespace

// Long by nature: one branch per field of tasks.jsonl.
void TaskLineParser::parse(std::string_view line, TaskRecord& t) {
  auto& im = *impl_;
  im.buffer.assign(line);
  im.buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  if (const auto err = im.parser.parse(im.buffer.data(), line.size(), false).get(doc);
      err != simdjson::SUCCESS)
    throw LineError("", fmt::format("not JSON ({})", simdjson::error_message(err)));
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS)
    throw LineError("", "should be a JSON object (one task)");

  t.id = 0;
  t.task_class.clear();
  t.tenant.clear();
  t.mode.clear();
  t.outcome.clear();
  t.failure.clear();
  t.failed_step.clear();
  t.t_sched = t.t_start = t.t_end = -1;
  t.warmup = false;
  t.critical_path.reset();
  std::size_t steps = 0;  // t.steps keeps its elements (and their strings' capacity) from line to line
  bool has_id = false, has_outcome = false, has_steps = false;
  for (dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    const dom::element v = kv.value;
    if (k == "id") {
      t.id = get_uint(k, v);
      has_id = true;
    } else if (k == "class") {
      get_string(k, v, t.task_class);
    } else if (k == "tenant") {
      get_string(k, v, t.tenant);
    } else if (k == "mode") {
      get_string(k, v, t.mode);
    } else if (k == "outcome") {
      get_task_word(k, v, {"ok", "failed", "cancelled"}, t.outcome);
      has_outcome = true;
    } else if (k == "failure") {
      get_string(k, v, t.failure);
    } else if (k == "failed_step") {
      get_string(k, v, t.failed_step);
    } else if (k == "t_sched_ns") {
      t.t_sched = get_time(k, v);
    } else if (k == "t_start_ns") {
      t.t_start = get_time(k, v);
    } else if (k == "t_end_ns") {
      t.t_end = get_time(k, v);
    } else if (k == "warmup") {
      if (v.get_bool().get(t.warmup) != simdjson::SUCCESS) wrong_type(k, v, "true or false");
    } else if (k == "steps") {
      dom::array a;
      if (v.get_array().get(a) != simdjson::SUCCESS) wrong_type(k, v, "an array of steps");
      steps = 0;
      for (const dom::element e : a) {
        if (steps == kMaxTaskRecordSteps)
          throw LineError("steps", fmt::format("more than {} steps in one task", kMaxTaskRecordSteps));
        if (steps == t.steps.size()) t.steps.emplace_back();
        try {
          parse_task_step(e, t.steps[steps]);
        } catch (const LineError& err) {
          rethrow_within(fmt::format("steps[{}]", steps), err);
        }
        ++steps;
      }
      has_steps = true;
    } else if (k == "critical_path") {
      try {
        parse_critical_path(v, t.critical_path.emplace());
      } catch (const LineError& err) {
        rethrow_within("critical_path", err);
      }
    }
  }
  t.steps.resize(steps);
  if (!has_id) throw LineError("id", "missing (every task record has one)");
  if (!has_outcome) throw LineError("outcome", "missing (every task record has one)");
  if (!has_steps) throw LineError("steps", "missing (every task record has its steps)");
  if (t.t_end >= 0 && t.t_end < t.t_start)
    throw LineError("t_end_ns", fmt::format("{} is before t_start_ns {}", t.t_end, t.t_start));
  im.ids.clear();
  for (std::size_t i = 0; i < t.steps.size(); ++i) {
    const TaskStepRecord& s = t.steps[i];
    im.ids.emplace_back(s.id, i);
    if (s.t_start < 0 || t.t_start < 0 || t.t_end < 0) continue;
    if (s.t_start < t.t_start)
      throw LineError(fmt::format("steps[{}].t_start_ns", i),
                      fmt::format("{} is before the task's t_start_ns {} (a step runs inside its task)",
                                  s.t_start, t.t_start));
    if (s.t_end > t.t_end)
      throw LineError(
          fmt::format("steps[{}].t_end_ns", i),
          fmt::format("{} is after the task's t_end_ns {} (a step runs inside its task)", s.t_end, t.t_end));
  }
  std::sort(im.ids.begin(), im.ids.end());
  for (std::size_t i = 1; i < im.ids.size(); ++i)
    if (im.ids[i].first == im.ids[i - 1].first)  // the later of the two (sorted by index within an id)
      throw LineError(
          fmt::format("steps[{}].id", im.ids[i].second),
          fmt::format("{} is the id of an earlier step of the task", quote_input(im.ids[i].first)));
}

RequestsReader::RequestsReader(const std::filesystem::path& file, BadLines bad_lines)
    : reader_(TextReader::open_regular(file.string(), "requests file")),
      file_(file.string()),
      bad_lines_(bad_lines) {}

RequestsReader::RequestsReader(std::string_view text, std::string file, BadLines bad_lines)
    : reader_(text), file_(std::move(file)), bad_lines_(bad_lines) {}

RequestsReader::RequestsReader(const std::filesystem::path& file, std::uint64_t begin, std::uint64_t end)
    : reader_(TextReader::open_regular(file.string(), "requests file", TextReader::kDefaultMaxLineBytes,
                                       begin > 0 ? begin - 1 : 0)),
      file_(file.string()),
      bad_lines_(BadLines::kSkip),
      end_(end) {
  if (begin > 0) {
    // The end of the line that started before: the range before reads it.
    std::string_view rest;
    reader_.next_line(rest);
    lines_before_ = reader_.line_number();
  }
}

ReadStats join_range_stats(const std::vector<ReadStats>& ranges, const std::string& file) {
  ReadStats all;
  for (const auto& r : ranges) {
    if (r.skipped > 0 && all.skipped == 0) {
      all.first_skipped_line = all.lines + r.first_skipped_line;
      all.first_skipped_field = r.first_skipped_field;
      all.first_skipped_problem = r.first_skipped_problem;
      all.first_skipped =
          InputError(file, all.first_skipped_line, all.first_skipped_field, all.first_skipped_problem).what();
    }
    all.lines += r.lines;
    all.records += r.records;
    all.skipped += r.skipped;
  }
  return all;
}

bool RequestsReader::next(RequestRecord& out) {
  std::string_view line;
  while (!ended_ && reader_.next_line(line)) {
    if (reader_.line_offset() >= end_) {
      ended_ = true;  // the next range's first line
      break;
    }
    ++stats_.lines;
    if (const auto flaw = reader_.flaw_message()) {
      bad_line(bad_lines_, stats_, file_, line_number(), "", *flaw);
      continue;
    }
    if (blank(line)) continue;
    try {
      parser_.parse(line, out);
    } catch (const LineError& e) {
      bad_line(bad_lines_, stats_, file_, line_number(), e.field(), e.what());
      continue;
    }
    ++stats_.records;
    return true;
  }
  return false;
}

SamplesReader::SamplesReader(const std::filesystem::path& file, BadLines bad_lines)
    : reader_(TextReader::open_regular(file.string(), "samples file")),
      file_(file.string()),
      bad_lines_(bad_lines) {}

SamplesReader::SamplesReader(std::string_view text, std::string file, BadLines bad_lines)
    : reader_(text), file_(std::move(file)), bad_lines_(bad_lines) {}

bool SamplesReader::next(Observation& out) {
  std::string_view line;
  while (reader_.next_line(line)) {
    ++stats_.lines;
    if (const auto flaw = reader_.flaw_message()) {
      bad_line(bad_lines_, stats_, file_, reader_.line_number(), "", *flaw);
      continue;
    }
    if (blank(line)) continue;
    try {
      parse_observation_json(line, out);
    } catch (const std::exception& e) {
      if (take_) {
        try {
          if (take_(line)) continue;
        } catch (const LineError& taken) {
          bad_line(bad_lines_, stats_, file_, reader_.line_number(), taken.field(), taken.what());
          continue;
        }
      }
      // parse_observation_json names the field in its message.
      bad_line(bad_lines_, stats_, file_, reader_.line_number(), "", e.what());
      continue;
    }
    if (out.t_ns < 0) {
      bad_line(bad_lines_, stats_, file_, reader_.line_number(), "t_ns",
               fmt::format("should be >= 0 (monotonic ns), not {}", out.t_ns));
      continue;
    }
    if (!out.error.empty() || !out.unavailable.empty()) {
      ++without_series_;
      continue;
    }
    ++stats_.records;
    return true;
  }
  return false;
}

TasksReader::TasksReader(const std::filesystem::path& file, BadLines bad_lines)
    : reader_(TextReader::open_regular(file.string(), "tasks file")),
      file_(file.string()),
      bad_lines_(bad_lines) {}

TasksReader::TasksReader(std::string_view text, std::string file, BadLines bad_lines)
    : reader_(text), file_(std::move(file)), bad_lines_(bad_lines) {}

bool TasksReader::next(TaskRecord& out) {
  std::string_view line;
  while (reader_.next_line(line)) {
    ++stats_.lines;
    if (const auto flaw = reader_.flaw_message()) {
      bad_line(bad_lines_, stats_, file_, reader_.line_number(), "", *flaw);
      continue;
    }
    if (blank(line)) continue;
    try {
      parser_.parse(line, out);
    } catch (const LineError& e) {
      bad_line(bad_lines_, stats_, file_, reader_.line_number(), e.field(), e.what());
      continue;
    }
    ++stats_.records;
    return true;
  }
  return false;
}

RequestsReader RunSource::open_requests(BadLines bad_lines) const {
  if (requests_text) return RequestsReader(*requests_text, requests_name(), bad_lines);
  return RequestsReader(dir / "requests.jsonl", bad_lines);
}

std::optional<SamplesReader> RunSource::open_samples(BadLines bad_lines) const {
  if (samples_text) return SamplesReader(*samples_text, samples_name(), bad_lines);
  if (no_samples || requests_text) return std::nullopt;
  const auto path = dir / "samples.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return SamplesReader(path, bad_lines);
}

std::string RunSource::requests_name() const {
  return requests_text ? std::string("requests.jsonl") : (dir / "requests.jsonl").string();
}

std::string RunSource::samples_name() const {
  return samples_text ? std::string("samples.jsonl") : (dir / "samples.jsonl").string();
}

std::optional<TasksReader> RunSource::open_tasks(BadLines bad_lines) const {
  if (tasks_text) return TasksReader(*tasks_text, tasks_name(), bad_lines);
  if (requests_text) return std::nullopt;
  const auto path = dir / "tasks.jsonl";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  return TasksReader(path, bad_lines);
}

std::string RunSource::tasks_name() const {
  return tasks_text ? std::string("tasks.jsonl") : (dir / "tasks.jsonl").string();
}

}  // namespace tokenscope::rundir
