// JSON Schema validation on valijson (json_schema.h).
#ifndef VALIJSON_USE_EXCEPTIONS
#define VALIJSON_USE_EXCEPTIONS 1
#endif
#include "core/json_schema.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "core/error.h"

namespace tokenscope {

struct JsonSchema::Impl {
  valijson::Schema schema;
};

JsonSchema::JsonSchema(const nlohmann::json& schema, const std::string& where)
    : impl_(std::make_unique<Impl>()) {
  valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
  valijson::adapters::NlohmannJsonAdapter adapter(schema);
  try {
    parser.populateSchema(adapter, impl_->schema);  // no fetch functions: a remote $ref is an error
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: not a JSON Schema tokenscope can use: {}", where, e.what()));
  }
}

JsonSchema::~JsonSchema() = default;
JsonSchema::JsonSchema(JsonSchema&&) noexcept = default;
JsonSchema& JsonSchema::operator=(JsonSchema&&) noexcept = default;

bool JsonSchema::valid(const nlohmann::json& instance) const {
  valijson::Validator validator(valijson::Validator::kStrongTypes);
  valijson::adapters::NlohmannJsonAdapter adapter(instance);
  return validator.validate(impl_->schema, adapter, nullptr);
}

std::vector<std::string> JsonSchema::violations(const nlohmann::json& instance,
                                                std::size_t max_errors) const {
  valijson::Validator validator(valijson::Validator::kStrongTypes);
  valijson::adapters::NlohmannJsonAdapter adapter(instance);
  valijson::ValidationResults results;
  std::vector<std::string> out;
  if (validator.validate(impl_->schema, adapter, &results)) return out;
  valijson::ValidationResults::Error error;
  while (out.size() < max_errors && results.popError(error)) {
    std::string path;
    for (const auto& c : error.context) path += c;
    out.push_back(fmt::format("{}: {}", path, error.description));
  }
  return out;
}

}  // namespace tokenscope
