#include "core/yaml_fields.h"

#include <yaml-cpp/depthguard.h>

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace tokenscope::yaml {

std::size_t line_of(const YAML::Node& n) {
  return n.Mark().line >= 0 ? static_cast<std::size_t>(n.Mark().line) + 1 : 0;
}

InputError load_error(const YAML::Exception& e, const std::string& file) {
  const std::size_t line = e.mark.line >= 0 ? static_cast<std::size_t>(e.mark.line) + 1 : 0;
  // yaml-cpp's parser recurses once per level of nesting and stops at its
  // bound (500 levels in Debian 12's yaml-cpp) with "bad file" as the
  // message: say what it is.
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e))
    return InputError(file, line, "",
                      fmt::format("YAML nested too deep: yaml-cpp stops at {} levels; no input tokenscope "
                                  "reads is nested that deep",
                                  deep->depth()));
  return InputError(file, line, "", "malformed YAML: " + e.msg);
}

YAML::Node load(const std::string& text, const std::string& file) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw load_error(e, file);
  }
}

void Fields::fail(const YAML::Node& n, const std::string& field, const std::string& problem) const {
  throw InputError(file_, line_of(n), field, problem);
}

void Fields::only_keys(const YAML::Node& map, const std::string& field,
                       std::initializer_list<const char*> keys) const {
  if (!map.IsMap()) fail(map, field, "expected a mapping");
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    bool known = false;
    for (const char* x : keys) known |= k == x;
    if (!known) {
      std::string list;
      for (const char* x : keys) list += (list.empty() ? "" : ", ") + std::string(x);
      fail(kv.first, field.empty() ? k : field + "." + k, "unknown key (expected one of: " + list + ")");
    }
  }
}

double Fields::number(const YAML::Node& n, const std::string& field, double lo, double hi, bool lo_open,
                      std::string_view expected) const {
  double d = 0;
  try {
    if (!n.IsScalar()) throw YAML::Exception(n.Mark(), "not a scalar");
    d = n.as<double>();
  } catch (const YAML::Exception&) {
    fail(n, field, fmt::format("expected {}", expected));
  }
  if (!std::isfinite(d) || d < lo || (lo_open && d == lo) || d > hi)
    fail(n, field, fmt::format("expected {}, got {}", expected, d));
  return d;
}

std::uint64_t Fields::whole(const YAML::Node& n, const std::string& field, double lo, double hi) const {
  const std::string expected = fmt::format("a whole number in [{}, {}]", lo, hi);
  const double d = number(n, field, lo, hi, false, expected);
  if (d != std::floor(d)) fail(n, field, "expected " + expected);
  return static_cast<std::uint64_t>(d);
}

std::string Fields::string(const YAML::Node& n, const std::string& field) const {
  if (!n.IsScalar() || n.Scalar().empty()) fail(n, field, "expected a non-empty string");
  return n.Scalar();
}

}  // namespace tokenscope::yaml
