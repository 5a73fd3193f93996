#include "observe/observation.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/json_depth.h"
#include "core/json_out.h"

namespace tokenscope::observe {
namespace {

namespace dom = simdjson::dom;

constexpr const char* kNotAnObject = "not a JSON object";
constexpr const char* kBadTime = "\"t_ns\" should be an integer";
constexpr const char* kBadSource = "\"source\" should be a string";
constexpr const char* kBadLabel = "label values should be strings";
constexpr const char* kBadValue = "a sample value should be a number, \"NaN\", \"+Inf\" or \"-Inf\"";

std::runtime_error not_an_array(const char* key) {
  return std::runtime_error(std::string("\"") + key + "\" should be an array");
}
std::runtime_error bad_entry(const char* key) {
  return std::runtime_error(std::string("each \"") + key + "\" entry should be [name, {labels}, value]");
}

// JSON has no NaN or infinities: they are written as the strings "NaN",
// "+Inf" and "-Inf" (the exposition format's own spellings).
void append_value(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "\"NaN\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"+Inf\"" : "\"-Inf\"";
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
}

void append_samples(std::string& out, const std::vector<Sample>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += '[';
    jsonout::append_string(out, v[i].name);
    out += ",{";
    for (std::size_t j = 0; j < v[i].labels.size(); ++j) {
      if (j) out += ',';
      jsonout::append_string(out, v[i].labels[j].name);
      out += ':';
      jsonout::append_string(out, v[i].labels[j].value);
    }
    out += "},";
    append_value(out, v[i].value);
    out += ']';
  }
  out += ']';
}

// The reference reader (nlohmann): the lines simdjson does not take (an
// integer beyond 64 bits, which nlohmann reads as a double; a byte-order
// mark; a NUL after the value; nesting deeper than 1,024) go through it, so
// that what is accepted and every message are exactly its.
double read_value(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "NaN") return std::nan("");
    if (s == "+Inf") return INFINITY;
    if (s == "-Inf") return -INFINITY;
  }
  throw std::runtime_error(kBadValue);
}

std::vector<Sample> read_samples(const nlohmann::json& j, const char* key) {
  std::vector<Sample> out;
  if (!j.contains(key)) return out;
  const auto& arr = j.at(key);
  if (!arr.is_array()) throw not_an_array(key);
  out.reserve(arr.size());
  for (const auto& e : arr) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_object()) throw bad_entry(key);
    Sample s;
    s.name = e[0].get<std::string>();
    for (const auto& [k, v] : e[1].items()) {
      if (!v.is_string()) throw std::runtime_error(kBadLabel);
      s.labels.push_back({k, v.get<std::string>()});
    }
    s.value = read_value(e[2]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

Observation detail::parse_observation_json_nlohmann(std::string_view line) {
  if (json_too_deep_at(line) != std::string_view::npos)
    throw std::runtime_error("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(kNotAnObject);
  Observation o;
  if (!j.contains("t_ns") || !j["t_ns"].is_number_integer()) throw std::runtime_error(kBadTime);
  o.t_ns = j["t_ns"].get<Nanos>();
  if (!j.contains("source") || !j["source"].is_string()) throw std::runtime_error(kBadSource);
  o.source = j["source"].get<std::string>();
  if (j.contains("rtt_ns") && j["rtt_ns"].is_number_integer()) o.rtt_ns = j["rtt_ns"].get<Nanos>();
  if (j.contains("server_t_ns") && j["server_t_ns"].is_number_integer())
    o.server_t_ns = j["server_t_ns"].get<std::int64_t>();
  if (j.contains("error") && j["error"].is_string()) o.error = j["error"].get<std::string>();
  if (j.contains("unavailable") && j["unavailable"].is_string())
    o.unavailable = j["unavailable"].get<std::string>();
  o.canonical = read_samples(j, "canonical");
  o.raw = read_samples(j, "raw");
  o.derived = read_samples(j, "derived");
  return o;
}

namespace {

// The fast reader (simdjson DOM, one parser per thread), read as nlohmann
// reads: of a key given twice the last counts; labels come back sorted by
// name, one per name (the last), as nlohmann's std::map holds them; an
// integer from 2^63 to 2^64-1 is read into int64 by wrapping around, as
// get<Nanos>() does.
struct FastParser {
  dom::parser parser;
  std::string buffer;
  std::vector<std::pair<std::string_view, dom::element>> labels;
};

FastParser& fast_parser() {
  thread_local FastParser p;
  return p;
}

bool is_integer(dom::element v) {
  return v.type() == dom::element_type::INT64 || v.type() == dom::element_type::UINT64;
}

std::int64_t integer(dom::element v) {
  return v.type() == dom::element_type::INT64 ? v.get_int64().value_unsafe()
                                              : static_cast<std::int64_t>(v.get_uint64().value_unsafe());
}

double read_value(dom::element v) {
  switch (v.type()) {
    case dom::element_type::INT64:
      return static_cast<double>(v.get_int64().value_unsafe());
    case dom::element_type::UINT64:
      return static_cast<double>(v.get_uint64().value_unsafe());
    case dom::element_type::DOUBLE:
      return v.get_double().value_unsafe();
    case dom::element_type::STRING: {
      const std::string_view s = v.get_string().value_unsafe();
      if (s == "NaN") return std::nan("");
      if (s == "+Inf") return INFINITY;
      if (s == "-Inf") return -INFINITY;
      break;
    }
    default:
      break;
  }
  throw std::runtime_error(kBadValue);
}

// Fills out from arr (absent: no samples), reusing out's samples and their strings.
void read_samples(const dom::element* arr, const char* key, std::vector<Sample>& out, FastParser& p) {
  std::size_t n = 0;
  if (arr != nullptr) {
    dom::array entries;
    if (arr->get_array().get(entries) != simdjson::SUCCESS) throw not_an_array(key);
    for (const dom::element e : entries) {
      dom::array entry;
      if (e.get_array().get(entry) != simdjson::SUCCESS || entry.size() != 3) throw bad_entry(key);
      auto it = entry.begin();
      const dom::element name = *it;
      const dom::element labels = *++it;
      const dom::element value = *++it;
      std::string_view name_text;
      dom::object label_object;
      if (name.get_string().get(name_text) != simdjson::SUCCESS ||
          labels.get_object().get(label_object) != simdjson::SUCCESS)
        throw bad_entry(key);
      p.labels.clear();
      for (const dom::key_value_pair kv : label_object) p.labels.emplace_back(kv.key, kv.value);
      if (p.labels.size() > 1) {
        std::stable_sort(p.labels.begin(), p.labels.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        // Of equal names the last one written stays.
        std::size_t kept = 0;
        for (std::size_t i = 0; i < p.labels.size(); ++i) {
          if (i + 1 < p.labels.size() && p.labels[i + 1].first == p.labels[i].first) continue;
          p.labels[kept++] = p.labels[i];
        }
        p.labels.resize(kept);
      }
      if (n == out.size()) out.emplace_back();
      Sample& s = out[n++];
      s.name.assign(name_text);
      s.labels.resize(p.labels.size());
      for (std::size_t i = 0; i < p.labels.size(); ++i) {
        std::string_view label_value;
        if (p.labels[i].second.get_string().get(label_value) != simdjson::SUCCESS)
          throw std::runtime_error(kBadLabel);
        s.labels[i].name.assign(p.labels[i].first);
        s.labels[i].value.assign(label_value);
      }
      s.value = read_value(value);
    }
  }
  out.resize(n);
}

}  // namespace

void append_observation_json(std::string& out, const Observation& o) {
  out += "{\"t_ns\":";
  jsonout::append_int(out, o.t_ns);
  out += ",\"source\":";
  jsonout::append_string(out, o.source);
  out += ",\"rtt_ns\":";
  jsonout::append_int(out, o.rtt_ns);
  if (!o.unavailable.empty()) {
    out += ",\"unavailable\":";
    jsonout::append_string(out, o.unavailable);
  } else if (!o.error.empty()) {
    out += ",\"error\":";
    jsonout::append_string(out, o.error);
  } else {
    out += ",\"server_t_ns\":";
    if (o.server_t_ns)
      jsonout::append_int(out, *o.server_t_ns);
    else
      out += "null";
    out += ",\"canonical\":";
    append_samples(out, o.canonical);
    out += ",\"raw\":";
    append_samples(out, o.raw);
    if (!o.derived.empty()) {
      out += ",\"derived\":";
      append_samples(out, o.derived);
    }
  }
  out += '}';
}

Observation parse_observation_json(std::string_view line) {
  Observation o;
  parse_observation_json(line, o);
  return o;
}

void parse_observation_json(std::string_view line, Observation& o) {
  auto& p = fast_parser();
  p.buffer.assign(line);
  p.buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  if (p.parser.parse(p.buffer.data(), line.size(), false).get(doc) != simdjson::SUCCESS) {
    o = detail::parse_observation_json_nlohmann(
        line);  // throws what nlohmann's reading says, or reads what simdjson did not
    return;
  }
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) throw std::runtime_error(kNotAnObject);
  // One pass over the keys; of a key given twice the last one counts.
  std::optional<dom::element> t_ns, source, rtt_ns, server_t_ns, error, unavailable, canonical, raw, derived;
  for (const dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    std::optional<dom::element>* slot = k == "t_ns"          ? &t_ns
                                        : k == "source"      ? &source
                                        : k == "rtt_ns"      ? &rtt_ns
                                        : k == "server_t_ns" ? &server_t_ns
                                        : k == "error"       ? &error
                                        : k == "unavailable" ? &unavailable
                                        : k == "canonical"   ? &canonical
                                        : k == "raw"         ? &raw
                                        : k == "derived"     ? &derived
                                                             : nullptr;
    if (slot != nullptr) *slot = kv.value;
  }
  if (!t_ns || !is_integer(*t_ns)) throw std::runtime_error(kBadTime);
  o.t_ns = integer(*t_ns);
  std::string_view text;
  if (!source || source->get_string().get(text) != simdjson::SUCCESS) throw std::runtime_error(kBadSource);
  o.source.assign(text);
  o.rtt_ns = rtt_ns && is_integer(*rtt_ns) ? integer(*rtt_ns) : 0;
  o.server_t_ns.reset();
  if (server_t_ns && is_integer(*server_t_ns)) o.server_t_ns = integer(*server_t_ns);
  o.error.clear();
  if (error && error->get_string().get(text) == simdjson::SUCCESS) o.error.assign(text);
  o.unavailable.clear();
  if (unavailable && unavailable->get_string().get(text) == simdjson::SUCCESS) o.unavailable.assign(text);
  read_samples(canonical ? &*canonical : nullptr, "canonical", o.canonical, p);
  read_samples(raw ? &*raw : nullptr, "raw", o.raw, p);
  read_samples(derived ? &*derived : nullptr, "derived", o.derived, p);
}

std::optional<double> find_value(const std::vector<Sample>& v, std::string_view name) {
  for (const auto& s : v)
    if (s.name == name) return s.value;
  return std::nullopt;
}

std::optional<double> sum_values(const std::vector<Sample>& v, std::string_view name) {
  std::optional<double> sum;
  for (const auto& s : v)
    if (s.name == name) sum = sum.value_or(0.0) + s.value;
  return sum;
}

}  // namespace tokenscope::observe
