#include "core/error.h"

#include <fmt/format.h>

namespace tokenscope {
namespace {
std::string format_input_error(const std::string& file, std::size_t line, const std::string& field,
                               const std::string& problem) {
  std::string where = file;
  if (line > 0) where += fmt::format(":{}", line);
  if (!field.empty()) return fmt::format("{}: field '{}': {}", where, field, problem);
  return fmt::format("{}: {}", where, problem);
}
}  // namespace

InputError::InputError(std::string file, std::size_t line, std::string field, const std::string& problem)
    : UsageError(format_input_error(file, line, field, problem)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      problem_(problem) {}

}  // namespace tokenscope
