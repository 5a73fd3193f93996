// Written from the format documentation, not from another parser:
//  * Prometheus "Exposition formats", text-based format 0.0.4
//    (prometheus.io/docs/instrumenting/exposition_formats/);
//  * OpenMetrics 1.0 (github.com/OpenObservability/OpenMetrics,
//    specification/OpenMetrics.md, its ABNF and "Metric types" sections);
//  * Go's strconv.ParseFloat / ParseInt, which Prometheus reads values and
//    0.0.4 timestamps with (pkg.go.dev/strconv).
// docs/observe.md "Exposition parser" lists what is accepted and rejected.
#include "observe/exposition.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace tokenscope::observe {
namespace {

// Character classes of names: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label
// names [a-zA-Z_][a-zA-Z0-9_]* (both formats).
constexpr std::uint8_t kMetricStart = 1, kMetricChar = 2, kLabelStart = 4, kLabelChar = 8;
constexpr std::array<std::uint8_t, 256> kCharClass = [] {
  std::array<std::uint8_t, 256> c{};
  for (int i = 0; i < 256; ++i) {
    const bool letter = (i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z') || i == '_';
    const bool digit = i >= '0' && i <= '9';
    if (letter || i == ':') c[i] |= kMetricStart | kMetricChar;
    if (letter) c[i] |= kLabelStart | kLabelChar;
    if (digit) c[i] |= kMetricChar | kLabelChar;
  }
  return c;
}();

// At most this much of the offending text is quoted in a reason (quote_input's default).
constexpr std::size_t kQuotedBytes = 80;

bool has_class(char c, std::uint8_t cls) {
  return (kCharClass[static_cast<unsigned char>(c)] & cls) != 0;
}
bool is_blank(char c) {
  return c == ' ' || c == '\t';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool equals_ignoring_case(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (c != lower[i]) return false;
  }
  return true;
}

// RFC 3629 UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), with
// ASCII checked eight bytes at a time: label values and help texts are
// nearly always ASCII.
bool is_valid_utf8(std::string_view s) {
  const auto* const begin = reinterpret_cast<const unsigned char*>(s.data());
  const auto* p = begin;
  const auto* const end = p + s.size();
  while (p < end) {
    while (end - p >= 8) {
      std::uint64_t word;
      std::memcpy(&word, p, 8);
      if (word & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p == end) break;
    const std::size_t n = utf8_sequence_length(s, static_cast<std::size_t>(p - begin));
    if (n == 0) return false;
    p += n;
  }
  return true;
}

// Whether a decimal number that std::from_chars found out of range is tiny
// (Go's ParseFloat reads it as 0) rather than huge (Go: an error): the
// decimal exponent of its first non-zero digit is negative.
bool is_tiny(std::string_view s) {
  std::int64_t int_digits = 0, first_nonzero = -1, digits = 0;
  std::size_t i = 0;
  bool point = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      point = true;
    } else if (is_digit(c)) {
      if (c != '0' && first_nonzero < 0) first_nonzero = digits;
      ++digits;
      if (!point) ++int_digits;
    } else {
      break;
    }
  }
  std::int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
    for (; i < s.size() && is_digit(s[i]); ++i)
      exponent = std::min<std::int64_t>(exponent * 10 + (s[i] - '0'), 1 << 30);
    if (negative) exponent = -exponent;
  }
  return first_nonzero < 0 || int_digits - 1 - first_nonzero + exponent < 0;
}

// A sample value as Prometheus reads it (Go's ParseFloat, which Prometheus
// calls after refusing hexadecimal floats and digit underscores) and as
// OpenMetrics writes it: a decimal number ("1", "-0.5", ".5", "1e-3"),
// "NaN", or an optionally signed "Inf" / "Infinity", case-insensitively.
bool parse_value(std::string_view s, double& out) {
  std::size_t i = 0;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    i = 1;
  }
  const std::string_view rest = s.substr(i);
  if (rest.empty()) return false;
  if (!is_digit(rest[0]) && rest[0] != '.') {
    if (equals_ignoring_case(rest, "inf") || equals_ignoring_case(rest, "infinity")) {
      out = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return true;
    }
    if (i == 0 && equals_ignoring_case(rest, "nan")) {  // no signed NaN in either format
      out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    return false;
  }
  double v = 0.0;
  const auto r = std::from_chars(rest.data(), rest.data() + rest.size(), v, std::chars_format::general);
  if (r.ptr != rest.data() + rest.size()) return false;
  if (r.ec == std::errc::result_out_of_range) {
    if (!is_tiny(rest)) return false;
    v = 0.0;
  } else if (r.ec != std::errc{}) {
    return false;
  }
  out = negative ? -v : v;
  return true;
}

// A 0.0.4 timestamp: integer milliseconds since the epoch (Go's ParseInt:
// an optional sign, decimal digits), returned in nanoseconds.
bool parse_timestamp_ms(std::string_view s, std::int64_t& ns) {
  const bool plus = !s.empty() && s[0] == '+';
  if (plus) s.remove_prefix(1);
  if (s.empty() || !(is_digit(s[0]) || (s[0] == '-' && !plus))) return false;
  std::int64_t ms = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), ms);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size()) return false;
  return !__builtin_mul_overflow(ms, std::int64_t{1'000'000}, &ns);
}

// An OpenMetrics timestamp: seconds since the epoch as a decimal number
// ("1520879607.789", "1.5e9"), returned in nanoseconds, read digit by digit
// so that no precision is lost to a double (digits past the nanosecond are
// dropped, toward zero).
bool parse_timestamp_seconds(std::string_view s, std::int64_t& ns) {
  std::size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const std::size_t int_begin = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  const std::string_view int_digits = s.substr(int_begin, i - int_begin);
  std::string_view frac_digits;
  if (i < s.size() && s[i] == '.') {
    const std::size_t frac_begin = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    frac_digits = s.substr(frac_begin, i - frac_begin);
  }
  if (int_digits.empty() && frac_digits.empty()) return false;
  std::int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) exp_negative = s[i++] == '-';
    const std::size_t exp_begin = i;
    for (; i < s.size() && is_digit(s[i]); ++i)
      exponent = std::min<std::int64_t>(exponent * 10 + (s[i] - '0'), 1 << 30);
    if (i == exp_begin) return false;
    if (exp_negative) exponent = -exponent;
  }
  if (i != s.size()) return false;
  // The value is digits × 10^(exponent − frac size); in nanoseconds, the
  // first (int size + exponent + 9) digits are the integer part.
  const std::int64_t keep = static_cast<std::int64_t>(int_digits.size()) + exponent + 9;
  std::int64_t value = 0;
  std::int64_t taken = 0;
  const auto add_digit = [&](int d) {
    return !__builtin_mul_overflow(value, 10, &value) && !__builtin_add_overflow(value, d, &value);
  };
  for (const std::string_view part : {int_digits, frac_digits})
    for (const char c : part) {
      if (taken >= keep) break;
      if (!add_digit(c - '0')) return false;
      ++taken;
    }
  for (; taken < keep && value != 0; ++taken)  // zeros past the last digit
    if (!add_digit(0)) return false;
  ns = negative ? -value : value;
  return true;
}

// The type keywords of each format.
bool parse_type(std::string_view s, bool openmetrics, MetricType& t) {
  if (s == "counter")
    t = MetricType::kCounter;
  else if (s == "gauge")
    t = MetricType::kGauge;
  else if (s == "histogram")
    t = MetricType::kHistogram;
  else if (s == "summary")
    t = MetricType::kSummary;
  else if (!openmetrics && s == "untyped")
    t = MetricType::kUntyped;
  else if (openmetrics && s == "unknown")
    t = MetricType::kUntyped;
  else if (openmetrics && s == "gaugehistogram")
    t = MetricType::kGaugeHistogram;
  else if (openmetrics && s == "info")
    t = MetricType::kInfo;
  else if (openmetrics && s == "stateset")
    t = MetricType::kStateSet;
  else
    return false;
  return true;
}

// Whether a sample named exactly as its declared family belongs to it.
// 0.0.4 counters are named as their samples ("x_total"); OpenMetrics
// counters, histograms and info families never have a bare sample.
bool takes_bare_name(MetricType t, bool openmetrics) {
  switch (t) {
    case MetricType::kCounter:
      return !openmetrics;
    case MetricType::kHistogram:
    case MetricType::kGaugeHistogram:
    case MetricType::kInfo:
      return false;
    default:
      return true;
  }
}

// The suffixed sample names of each type (OpenMetrics "Metric types";
// 0.0.4 histograms and summaries use _bucket / _sum / _count too).
struct Suffix {
  std::string_view text;
  std::uint8_t types;  // bit per MetricType
};
constexpr std::uint8_t bit(MetricType t) {
  return static_cast<std::uint8_t>(1u << static_cast<unsigned>(t));
}
constexpr Suffix kSuffixes[] = {
    {"_total", bit(MetricType::kCounter)},
    {"_created", bit(MetricType::kCounter) | bit(MetricType::kHistogram) | bit(MetricType::kSummary)},
    {"_bucket", bit(MetricType::kHistogram) | bit(MetricType::kGaugeHistogram)},
    {"_count", bit(MetricType::kHistogram) | bit(MetricType::kSummary)},
    {"_sum", bit(MetricType::kHistogram) | bit(MetricType::kSummary)},
    {"_gcount", bit(MetricType::kGaugeHistogram)},
    {"_gsum", bit(MetricType::kGaugeHistogram)},
    {"_info", bit(MetricType::kInfo)},
};

const std::string* find_label(const Labels& labels, std::string_view name) {
  for (const auto& l : labels)
    if (l.name == name) return &l.value;
  return nullptr;
}

bool ends_with_eof_line(std::string_view text) {
  if (text.ends_with('\n')) text.remove_suffix(1);
  if (text.ends_with('\r')) text.remove_suffix(1);
  return text == "# EOF" || text.ends_with("\n# EOF");
}

class Parser {
 public:
  Parser(std::string_view text, ExpositionFormat format, std::size_t max_series)
      : text_(text), openmetrics_(format == ExpositionFormat::kOpenMetrics), max_series_(max_series) {
    out_.format = format;
  }

  Exposition run() {
    std::size_t pos = 0;
    while (pos < text_.size()) {
      const void* nl = std::memchr(text_.data() + pos, '\n', text_.size() - pos);
      const std::size_t end =
          nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - text_.data()) : text_.size();
      std::string_view line = text_.substr(pos, end - pos);
      pos = end + 1;
      ++out_.lines;
      if (line.ends_with('\r')) line.remove_suffix(1);  // CRLF endings, as some exporters write
      if (out_.samples >= max_series_ || out_.families.size() >= max_series_) {
        // Past the bound: the rest is counted, not parsed or stored (the
        // memory and the CPU of a scrape follow the bound, not the page).
        if (line.starts_with("# EOF"))
          out_.eof_marker = true;
        else if (!line.empty() && line.front() != '#')
          ++out_.series_over_limit;
        continue;
      }
      if (!parse_line(line)) reject(out_.lines);
    }
    if (openmetrics_ && !out_.eof_marker) {
      fail("no '# EOF' line at the end (an OpenMetrics exposition ends with one; the body may be cut short)",
           {});
      reject(out_.lines + 1);
    }
    return std::move(out_);
  }

 private:
  // Records why the current line fails; the reason is formatted only for
  // the lines that are kept (a body of garbage costs a count per line).
  bool fail(std::string_view what, std::string_view offending) {
    what_ = what;
    offending_ = offending;
    return false;
  }

  void reject(std::size_t line) {
    ++out_.rejected_lines;
    if (out_.rejected.size() >= kMaxRejectedKept) return;
    std::string reason(what_);
    if (offending_.data() != nullptr) {
      reason += ": ";
      reason += quote_input(offending_, kQuotedBytes);
    }
    out_.rejected.push_back({line, std::move(reason)});
  }

  bool parse_line(std::string_view line) {
    if (out_.eof_marker) return fail("text after '# EOF'", line);
    std::size_t i = 0;
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i == line.size()) return !openmetrics_ || fail("blank line (OpenMetrics has none)", line);
    if (line[i] == '#') return comment_line(line, i + 1);
    return sample_line(line, i);
  }

  // ---- # lines

  static void skip_blanks(std::string_view line, std::size_t& i) {
    while (i < line.size() && is_blank(line[i])) ++i;
  }
  static std::string_view token(std::string_view line, std::size_t& i) {
    const std::size_t begin = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    return line.substr(begin, i - begin);
  }

  // i is just past the '#'.
  bool comment_line(std::string_view line, std::size_t i) {
    constexpr std::string_view kOpenMetricsHash =
        "a '#' line in OpenMetrics is '# HELP', '# TYPE', '# UNIT' or '# EOF' (it has no comments)";
    if (i == line.size() || !is_blank(line[i])) return !openmetrics_ || fail(kOpenMetricsHash, line);
    skip_blanks(line, i);
    const std::string_view keyword = token(line, i);
    if (keyword == "HELP") return help_line(line, i);
    if (keyword == "TYPE") return type_line(line, i);
    if (openmetrics_ && keyword == "UNIT") return unit_line(line, i);
    if (openmetrics_ && keyword == "EOF") {
      skip_blanks(line, i);
      if (i != line.size()) return fail("text after '# EOF' on its line", line.substr(i));
      out_.eof_marker = true;
      return true;
    }
    return !openmetrics_ || fail(kOpenMetricsHash, line);  // 0.0.4: a comment, ignored
  }

  // The metric name after "# HELP" / "# TYPE" / "# UNIT", then a blank or the end.
  bool descriptor_name(std::string_view line, std::size_t& i, std::string_view keyword,
                       std::string_view& name) {
    skip_blanks(line, i);
    const std::size_t begin = i;
    if (i < line.size() && has_class(line[i], kMetricStart))
      for (++i; i < line.size() && has_class(line[i], kMetricChar); ++i) {
      }
    name = line.substr(begin, i - begin);
    if (name.empty()) {
      what_owned_ = std::string("expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) after '# ") +
                    std::string(keyword) + "'";
      return fail(what_owned_, line.substr(begin));
    }
    if (i < line.size() && !is_blank(line[i]))
      return fail("expected a blank after the metric name", line.substr(begin));
    return true;
  }

  bool help_line(std::string_view line, std::size_t i) {
    std::string_view name;
    if (!descriptor_name(line, i, "HELP", name)) return false;
    skip_blanks(line, i);
    const std::string_view raw = line.substr(i);
    if (!is_valid_utf8(raw)) return fail("help text is not valid UTF-8", raw);
    // 0.0.4 escapes \\ and \n (any other backslash stays as written);
    // OpenMetrics also \" and nothing else.
    std::string help;
    help.reserve(raw.size());
    for (std::size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] != '\\') {
        help += raw[k];
        continue;
      }
      const char next = k + 1 < raw.size() ? raw[k + 1] : '\0';
      if (next == '\\' || next == 'n' || (openmetrics_ && next == '"')) {
        help += next == 'n' ? '\n' : next;
        ++k;
      } else if (openmetrics_) {
        return fail("bad escape in the help text (OpenMetrics has \\\\, \\\" and \\n)", raw.substr(k));
      } else {
        help += '\\';
      }
    }
    const std::size_t f = family_for_descriptor(name);
    if (states_[f].help) return fail("a second '# HELP' for the metric", name);
    states_[f].help = true;
    out_.families[f].help = std::move(help);
    return true;
  }

  bool type_line(std::string_view line, std::size_t i) {
    std::string_view name;
    if (!descriptor_name(line, i, "TYPE", name)) return false;
    skip_blanks(line, i);
    const std::string_view word = token(line, i);
    MetricType type{};
    if (!parse_type(word, openmetrics_, type))
      return fail(openmetrics_
                      ? "unknown metric type (OpenMetrics: counter, gauge, histogram, gaugehistogram, "
                        "stateset, info, summary, unknown)"
                      : "unknown metric type (0.0.4: counter, gauge, histogram, summary, untyped)",
                  word);
    skip_blanks(line, i);
    if (i != line.size()) return fail("text after the metric type", line.substr(i));
    const std::size_t f = family_for_descriptor(name);
    if (states_[f].typed) return fail("a second '# TYPE' for the metric", name);
    if (!out_.families[f].samples.empty()) return fail("'# TYPE' after samples of its metric", name);
    states_[f].typed = true;
    out_.families[f].type = type;
    memo_valid_ = false;  // names may now resolve to this family
    return true;
  }

  bool unit_line(std::string_view line, std::size_t i) {
    std::string_view name;
    if (!descriptor_name(line, i, "UNIT", name)) return false;
    skip_blanks(line, i);
    const std::string_view unit = token(line, i);
    for (const char c : unit)
      if (!has_class(c, kMetricChar)) return fail("a unit is made of [a-zA-Z0-9_:]", unit);
    skip_blanks(line, i);
    if (i != line.size()) return fail("text after the unit", line.substr(i));
    // OpenMetrics: "the unit MUST be a suffix of the MetricFamily name,
    // separated by an underscore".
    if (!unit.empty() && !(name.size() > unit.size() + 1 && name.ends_with(unit) &&
                           name[name.size() - unit.size() - 1] == '_'))
      return fail("the metric's name must end with '_' and its unit", line);
    const std::size_t f = family_for_descriptor(name);
    if (states_[f].unit) return fail("a second '# UNIT' for the metric", name);
    states_[f].unit = true;
    out_.families[f].unit = std::string(unit);
    return true;
  }

  std::size_t family_for_descriptor(std::string_view name) {
    if (const auto it = index_.find(name); it != index_.end()) return it->second;
    return add_family(name);
  }

  std::size_t add_family(std::string_view name) {
    const std::size_t f = out_.families.size();
    out_.families.push_back({});
    out_.families.back().name = std::string(name);
    states_.push_back({});
    index_.emplace(name, f);
    return f;
  }

  // ---- samples

  // i is at the first character of the metric name.
  bool sample_line(std::string_view line, std::size_t i) {
    const std::size_t name_begin = i;
    if (!has_class(line[i], kMetricStart))
      return fail("expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), '#' or a blank line", line.substr(i));
    for (++i; i < line.size() && has_class(line[i], kMetricChar); ++i) {
    }
    const std::string_view name = line.substr(name_begin, i - name_begin);
    ExpositionSample sample;
    const std::size_t name_end = i;
    skip_blanks(line, i);
    if (i < line.size() && line[i] == '{') {
      sample.labels.reserve(last_label_count_);
      if (!label_set(line, i, &sample.labels)) return false;
      last_label_count_ = sample.labels.size();
    } else if (i == name_end && i < line.size()) {
      return fail("expected '{' or a blank after the metric name", line.substr(name_begin));
    }
    skip_blanks(line, i);
    const std::string_view value = token(line, i);
    if (value.empty()) return fail("no value after the metric name and labels", line.substr(name_begin));
    if (!parse_value(value, sample.value))
      return fail("bad value (expected a decimal number, NaN, +Inf or -Inf)", value);
    skip_blanks(line, i);
    if (i < line.size() && line[i] != '#') {
      const std::string_view ts = token(line, i);
      std::int64_t ns = 0;
      if (openmetrics_ ? !parse_timestamp_seconds(ts, ns) : !parse_timestamp_ms(ts, ns))
        return fail(openmetrics_ ? "bad timestamp (expected seconds since the epoch, a decimal number)"
                                 : "bad timestamp (expected integer milliseconds since the epoch)",
                    ts);
      sample.timestamp_ns = ns;
      skip_blanks(line, i);
    }
    if (i < line.size()) {
      if (line[i] != '#') return fail("text after the timestamp", line.substr(i));
      if (!exemplar(line, i)) return false;
    }
    std::size_t f = 0;
    if (!family_for_sample(name, f)) return false;
    if (!check_sample(out_.families[f], name, sample)) return false;
    sample.name = std::string(name);
    out_.families[f].samples.push_back(std::move(sample));
    ++out_.samples;
    return true;
  }

  // An exemplar, " # {labels} value [timestamp]", read to check its form
  // and dropped. i is at the '#'.
  bool exemplar(std::string_view line, std::size_t i) {
    const std::size_t begin = i++;
    skip_blanks(line, i);
    if (i == line.size() || line[i] != '{')
      return fail("expected an exemplar ('# {labels} value [timestamp]') after the sample",
                  line.substr(begin));
    if (!label_set(line, i, nullptr)) return false;
    skip_blanks(line, i);
    const std::string_view value = token(line, i);
    double v = 0.0;
    if (!parse_value(value, v)) return fail("bad exemplar value", value.empty() ? line.substr(begin) : value);
    skip_blanks(line, i);
    if (i < line.size()) {
      const std::string_view ts = token(line, i);
      std::int64_t ns = 0;
      if (!parse_timestamp_seconds(ts, ns))  // exemplars are OpenMetrics syntax: seconds in either format
        return fail("bad exemplar timestamp (expected seconds since the epoch)", ts);
      skip_blanks(line, i);
      if (i < line.size()) return fail("text after the exemplar", line.substr(i));
    }
    return true;
  }

  // "{name="value",...}" from i (at the '{') to past the '}'; labels go to
  // out (nullptr: checked only). Blanks are allowed around the tokens and
  // a comma before the '}', as Prometheus allows.
  bool label_set(std::string_view line, std::size_t& i, Labels* out) {
    const std::size_t open = i++;
    names_.clear();
    while (true) {
      skip_blanks(line, i);
      if (i == line.size()) return fail("unterminated label set (no '}')", line.substr(open));
      if (line[i] == '}') break;
      const std::size_t name_begin = i;
      if (!has_class(line[i], kLabelStart))
        return fail("expected a label name ([a-zA-Z_][a-zA-Z0-9_]*) or '}'", line.substr(i));
      for (++i; i < line.size() && has_class(line[i], kLabelChar); ++i) {
      }
      const std::string_view name = line.substr(name_begin, i - name_begin);
      skip_blanks(line, i);
      if (i == line.size() || line[i] != '=')
        return fail("expected '=' after the label name", line.substr(name_begin));
      ++i;
      skip_blanks(line, i);
      if (i == line.size() || line[i] != '"')
        return fail("expected '\"' to open the label value", line.substr(name_begin));
      const std::size_t quote = i++;
      std::string value;
      if (!label_value(line, i, quote, out ? &value : nullptr)) return false;
      names_.push_back(name);
      if (out) out->push_back({std::string(name), std::move(value)});
      skip_blanks(line, i);
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') break;
      if (i == line.size()) return fail("unterminated label set (no '}')", line.substr(open));
      return fail("expected ',' or '}' after the label value", line.substr(name_begin));
    }
    ++i;  // the '}'
    return check_unique(line.substr(open, i - open));
  }

  // The text between the quotes, from i (past the opening quote) to past
  // the closing one, unescaped: \\, \" and \n (0.0.4 keeps any other
  // backslash as written, as Prometheus does; OpenMetrics has no other).
  bool label_value(std::string_view line, std::size_t& i, std::size_t quote, std::string* value) {
    const std::size_t begin = i;
    while (i < line.size() && line[i] != '"' && line[i] != '\\') ++i;
    if (i < line.size() && line[i] == '"') {  // the common case: nothing escaped
      const std::string_view raw = line.substr(begin, i - begin);
      if (!is_valid_utf8(raw)) return fail("label value is not valid UTF-8", raw);
      if (value) value->assign(raw);
      ++i;
      return true;
    }
    std::string unescaped(line.substr(begin, i - begin));
    while (i < line.size() && line[i] != '"') {
      if (line[i] != '\\') {
        unescaped += line[i++];
        continue;
      }
      if (i + 1 == line.size()) break;
      const char next = line[i + 1];
      if (next == '\\' || next == '"' || next == 'n') {
        unescaped += next == 'n' ? '\n' : next;
      } else if (openmetrics_) {
        return fail("bad escape in a label value (OpenMetrics has \\\\, \\\" and \\n)", line.substr(i));
      } else {
        unescaped += '\\';
        unescaped += next;
      }
      i += 2;
    }
    if (i >= line.size() || line[i] != '"')
      return fail("unterminated quoted label value", line.substr(quote));
    if (!is_valid_utf8(unescaped))
      return fail("label value is not valid UTF-8", line.substr(begin, i - begin));
    if (value) *value = std::move(unescaped);
    ++i;
    return true;
  }

  // No label name twice in one set: pairwise for the few labels a sample
  // has, sorted beyond that (a line of garbage may carry thousands).
  bool check_unique(std::string_view set) {
    const std::size_t n = names_.size();
    if (n <= 16) {
      for (std::size_t a = 1; a < n; ++a)
        for (std::size_t b = 0; b < a; ++b)
          if (names_[a] == names_[b]) return duplicate(names_[a], set);
      return true;
    }
    sorted_ = names_;
    std::sort(sorted_.begin(), sorted_.end());
    if (const auto it = std::adjacent_find(sorted_.begin(), sorted_.end()); it != sorted_.end())
      return duplicate(*it, set);
    return true;
  }

  bool duplicate(std::string_view name, std::string_view set) {
    what_owned_ = "label name " + quote_input(name) + " given twice in the label set";
    return fail(what_owned_, set);
  }

  // The family a sample belongs to: the family declared (# TYPE) under its
  // own name when that type has bare samples; else the declared family its
  // name is a suffixed sample of (x_bucket → histogram x); else the family
  // under its own name (created, untyped, on first sight).
  bool family_for_sample(std::string_view name, std::size_t& f) {
    if (memo_valid_ && name == memo_name_) {
      f = memo_family_;
      return true;
    }
    const auto it = index_.find(name);
    if (it != index_.end() && states_[it->second].typed) {
      const MetricFamily& family = out_.families[it->second];
      if (!takes_bare_name(family.type, openmetrics_)) {
        what_owned_ = "a sample named as its " + std::string(metric_type_name(family.type)) +
                      " family (expected a suffix such as " +
                      (family.type == MetricType::kCounter ? "_total"
                       : family.type == MetricType::kInfo  ? "_info"
                                                           : "_bucket, _count or _sum") +
                      ")";
        return fail(what_owned_, name);
      }
      return remember(name, it->second, f);
    }
    for (const Suffix& suffix : kSuffixes) {
      if (name.size() <= suffix.text.size() || !name.ends_with(suffix.text)) continue;
      const auto base = index_.find(name.substr(0, name.size() - suffix.text.size()));
      if (base != index_.end() && states_[base->second].typed &&
          (suffix.types & bit(out_.families[base->second].type)))
        return remember(name, base->second, f);
    }
    return remember(name, it != index_.end() ? it->second : add_family(name), f);
  }

  bool remember(std::string_view name, std::size_t family, std::size_t& f) {
    memo_name_ = name;
    memo_family_ = family;
    memo_valid_ = true;
    f = family;
    return true;
  }

  // What a family's type asks of its samples' labels: a bucket's upper
  // bound (le) and a summary quantile, each a number.
  bool check_sample(const MetricFamily& family, std::string_view name, const ExpositionSample& sample) {
    const bool bucket =
        (family.type == MetricType::kHistogram || family.type == MetricType::kGaugeHistogram) &&
        name.ends_with("_bucket");
    const bool quantile = family.type == MetricType::kSummary && name.size() == family.name.size();
    if (!bucket && !quantile) return true;
    const std::string_view label = bucket ? "le" : "quantile";
    const std::string* v = find_label(sample.labels, label);
    double d = 0.0;
    if (!v)
      return fail(
          bucket ? "a histogram bucket needs an 'le' label" : "a summary quantile needs a 'quantile' label",
          name);
    if (!parse_value(*v, d)) {
      // The value is the sample's (unescaped), gone when the line is rejected: quote a copy.
      offending_owned_.assign(*v, 0, std::min<std::size_t>(v->size(), 4 * kQuotedBytes));
      return fail(
          bucket ? "bad 'le' label (expected a number or +Inf)" : "bad 'quantile' label (expected a number)",
          offending_owned_);
    }
    return true;
  }

  struct FamilyState {
    bool typed = false;
    bool help = false;
    bool unit = false;
  };

  std::string_view text_;
  bool openmetrics_;
  std::size_t max_series_ = std::numeric_limits<std::size_t>::max();
  Exposition out_;
  std::vector<FamilyState> states_;                          // beside out_.families
  std::unordered_map<std::string_view, std::size_t> index_;  // family name (a view of text_) → index
  // The family of the last sample name (a histogram's buckets come in runs).
  std::string_view memo_name_;
  std::size_t memo_family_ = 0;
  bool memo_valid_ = false;
  std::size_t last_label_count_ = 0;
  std::vector<std::string_view> names_, sorted_;  // label names of the set being read
  std::string_view what_;
  std::string what_owned_;  // what_ when it is built from the input
  std::string_view offending_;
  std::string offending_owned_;  // offending_ when it is not a view of text_
};

}  // namespace

std::string_view metric_type_name(MetricType t) {
  switch (t) {
    case MetricType::kUntyped:
      return "untyped";
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kGaugeHistogram:
      return "gaugehistogram";
    case MetricType::kInfo:
      return "info";
    case MetricType::kStateSet:
      return "stateset";
  }
  return "untyped";
}

ExpositionFormat format_from_content_type(std::string_view content_type) {
  while (!content_type.empty() && is_blank(content_type.front())) content_type.remove_prefix(1);
  constexpr std::string_view kOpenMetrics = "application/openmetrics-text";
  if (content_type.size() >= kOpenMetrics.size() &&
      equals_ignoring_case(content_type.substr(0, kOpenMetrics.size()), kOpenMetrics) &&
      (content_type.size() == kOpenMetrics.size() || content_type[kOpenMetrics.size()] == ';' ||
       is_blank(content_type[kOpenMetrics.size()])))
    return ExpositionFormat::kOpenMetrics;
  return ExpositionFormat::kPrometheusText;
}

Exposition parse_exposition(std::string_view text, ExpositionFormat format, std::size_t max_series) {
  if (format == ExpositionFormat::kAuto)
    format = ends_with_eof_line(text) ? ExpositionFormat::kOpenMetrics : ExpositionFormat::kPrometheusText;
  return Parser(text, format, max_series).run();
}

std::vector<Sample> flatten(const Exposition& e) {
  std::vector<Sample> out;
  out.reserve(e.samples);
  for (const auto& family : e.families)
    for (const auto& s : family.samples) out.push_back({s.name, s.labels, s.value});
  return out;
}

std::vector<Sample> flatten(Exposition&& e) {
  std::vector<Sample> out;
  out.reserve(e.samples);
  for (auto& family : e.families)
    for (auto& s : family.samples) out.push_back({std::move(s.name), std::move(s.labels), s.value});
  return out;
}

}  // namespace tokenscope::observe
