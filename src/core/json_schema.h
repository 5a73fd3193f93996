// JSON Schema validation (draft 7; drafts 4 and 6 documents read too) of
// what servers and tools answer: structured outputs (response_format
// json_schema), tool-call arguments against the tool's parameters (issue 25's
// semantic checks). On valijson (Debian libvalijson-dev, header-only, with
// an nlohmann::json adapter), chosen over hand-written checks because it
// implements the whole vocabulary of draft 7 and is tested by its authors
// against the official JSON-Schema-Test-Suite, which Debian ships as
// json-schema-test-suite and json_schema_test.cpp runs here too.
// Remote references ($ref to another document by URL) are refused: nothing
// is fetched at run time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope {

class JsonSchema {
 public:
  // Throws UsageError naming `where` and the problem when `schema` is not a
  // schema valijson can read (a wrong type for a keyword, a remote $ref).
  // conformance: also read what the official test suite uses and requests
  // have no need of ($id URIs that move the base of references, references
  // to ids this reading does not resolve), which could hide a reference
  // loop from the check; off everywhere but the suite's test.
  JsonSchema(const nlohmann::json& schema, const std::string& where, bool conformance = false);
  ~JsonSchema();
  JsonSchema(JsonSchema&&) noexcept;
  JsonSchema& operator=(JsonSchema&&) noexcept;

  bool valid(const nlohmann::json& instance) const;
  // The violations, each "PATH: what" (PATH as valijson names it, e.g.
  // "<root>[city]"), at most max_errors; empty when valid.
  std::vector<std::string> violations(const nlohmann::json& instance, std::size_t max_errors = 8) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Rng;

// A JSON value that `schema` accepts, drawn from `rng` (the same seed gives
// the same value): what a simulated model passes as a tool's arguments and
// a mock tool answers from its response schema. Reads type (one or a list),
// enum, const, properties (every required one, each other one with
// probability 1/2), items (one schema or a tuple), min/maxItems,
// min/maxLength, minimum/maximum (exclusive too), multipleOf, anyOf/oneOf
// (one branch), local $ref (#/definitions/..., #/$defs/...), and the date,
// date-time, email and uri formats; every draw is checked against the
// schema (JsonSchema) and drawn again, up to 32 times, when a keyword it
// does not read (pattern, allOf, ...) refuses it. Throws UsageError naming
// `where` when no draw is accepted (an unsatisfiable schema, `false`).
nlohmann::json draw_instance(const nlohmann::json& schema, Rng& rng, const std::string& where);
// The same with the schema's checker already built (drawing many values).
nlohmann::json draw_instance(const nlohmann::json& schema, const JsonSchema& checker, Rng& rng,
                             const std::string& where);

}  // namespace tokenscope
