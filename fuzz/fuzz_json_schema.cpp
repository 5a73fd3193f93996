// libFuzzer target: JSON schemas and the values checked against them (the
// schemas of tool parameters and response formats that requests and tool
// declarations bring, core/json_schema.h). The input is a JSON document:
// {"schema": S, "instance": I}, or a schema alone. Every schema is accepted
// or refused with a UsageError; an accepted schema validates any value
// without crashing or recursing without end, and every value drawn from it
// satisfies it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_schema.h"
#include "core/random.h"
#include "serve/tools.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (json_too_deep_at(text) != std::string_view::npos) return 0;  // refused before parsing, as serve does
  const auto doc = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) return 0;
  const bool pair = doc.is_object() && doc.contains("schema");
  const nlohmann::json& schema = pair ? doc["schema"] : doc;
  const nlohmann::json instance =
      pair && doc.contains("instance") ? doc["instance"] : nlohmann::json(nullptr);
  try {
    const JsonSchema checker(schema, "fuzz");
    const bool ok = checker.valid(instance);
    const auto v = checker.violations(instance);
    if (ok != v.empty()) __builtin_trap();
    Rng rng(size);
    try {
      const auto drawn = draw_instance(schema, checker, rng, "fuzz");
      if (!checker.valid(drawn)) __builtin_trap();
      if (const auto bad = serve::violating_instance(checker, drawn); bad && checker.valid(*bad))
        __builtin_trap();
    } catch (const UsageError&) {
      // an unsatisfiable schema (or one no draw in 32 satisfies)
    }
  } catch (const UsageError&) {
    // refused with its reason
  }
  return 0;
}
