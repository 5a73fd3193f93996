#include "observe/observation.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/json_out.h"

namespace tokenscope::observe {
namespace {

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

double read_value(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "NaN") return std::nan("");
    if (s == "+Inf") return INFINITY;
    if (s == "-Inf") return -INFINITY;
  }
  throw std::runtime_error("a sample value should be a number, \"NaN\", \"+Inf\" or \"-Inf\"");
}

std::vector<Sample> read_samples(const nlohmann::json& j, const char* key) {
  std::vector<Sample> out;
  if (!j.contains(key)) return out;
  const auto& arr = j.at(key);
  if (!arr.is_array()) throw std::runtime_error(std::string("\"") + key + "\" should be an array");
  out.reserve(arr.size());
  for (const auto& e : arr) {
    if (!e.is_array() || e.size() != 3 || !e[0].is_string() || !e[1].is_object())
      throw std::runtime_error(std::string("each \"") + key + "\" entry should be [name, {labels}, value]");
    Sample s;
    s.name = e[0].get<std::string>();
    for (const auto& [k, v] : e[1].items()) {
      if (!v.is_string()) throw std::runtime_error("label values should be strings");
      s.labels.push_back({k, v.get<std::string>()});
    }
    s.value = read_value(e[2]);
    out.push_back(std::move(s));
  }
  return out;
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
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("not a JSON object");
  Observation o;
  if (!j.contains("t_ns") || !j["t_ns"].is_number_integer())
    throw std::runtime_error("\"t_ns\" should be an integer");
  o.t_ns = j["t_ns"].get<Nanos>();
  if (!j.contains("source") || !j["source"].is_string())
    throw std::runtime_error("\"source\" should be a string");
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
