// Reading the fields of a YAML file (yaml-cpp) with messages a user can act
// on: every failure is an InputError naming the file, the line, the field
// and what was expected (docs/errors.md). One reader for every YAML input:
// the catalog (engine/catalog.h), workload files (bench/bench_workload.h)
// and check's thresholds (analyze/thresholds.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tokenscope::yaml {

// The 1-based line of a node; 0 when yaml-cpp does not know it.
std::size_t line_of(const YAML::Node& n);

// Parses a whole document; text that is not YAML is an InputError
// ("malformed YAML: ...") at the line yaml-cpp names, and a document nested
// past yaml-cpp's bound (500 levels) says so (load_error).
YAML::Node load(const std::string& text, const std::string& file);
// The InputError for a YAML::Exception out of parsing or reading `file`.
InputError load_error(const YAML::Exception& e, const std::string& file);

class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& field, const std::string& problem) const;
  // A mapping whose keys are all among `keys` ("unknown key (expected one
  // of: ...)" names the first that is not). field: the mapping's own name,
  // "" at the top.
  void only_keys(const YAML::Node& map, const std::string& field,
                 std::initializer_list<const char*> keys) const;
  // A finite number in [lo, hi] ((lo, hi] when lo_open). `expected` words
  // it for the messages: "expected <expected>" when the node is not a
  // number, "expected <expected>, got <value>" when it is out of range.
  double number(const YAML::Node& n, const std::string& field, double lo, double hi, bool lo_open,
                std::string_view expected) const;
  // A whole number in [lo, hi] ("expected a whole number in [lo, hi]").
  std::uint64_t whole(const YAML::Node& n, const std::string& field, double lo, double hi) const;
  // A non-empty scalar.
  std::string string(const YAML::Node& n, const std::string& field) const;

 private:
  std::string file_;
};

}  // namespace tokenscope::yaml
