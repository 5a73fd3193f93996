// JSON Schema validation on valijson (json_schema.h).
#ifndef VALIJSON_USE_EXCEPTIONS
#define VALIJSON_USE_EXCEPTIONS 1
#endif
#include "core/json_schema.h"

#include <fmt/format.h>

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>
#include <string_view>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope {

namespace {

// "#/a~1b/c%25d" -> the JSON pointer "/a~1b/c%d" (a URI fragment is percent-encoded).
std::string fragment_pointer(std::string_view fragment) {
  std::string out;
  for (std::size_t i = 0; i < fragment.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (fragment[i] == '%' && i + 2 < fragment.size() && hex(fragment[i + 1]) >= 0 &&
        hex(fragment[i + 2]) >= 0) {
      out += static_cast<char>(hex(fragment[i + 1]) * 16 + hex(fragment[i + 2]));
      i += 2;
    } else {
      out += fragment[i];
    }
  }
  return out;
}

// Refuses a schema whose references loop without reaching a value: a
// chain of $ref (and of allOf, anyOf, oneOf, not, if, then, else, which
// apply to the same value) that comes back to where it started, as
// {"$ref": "#"} does. Validation would recurse without end (valijson has no
// bound), so a request could take a server down with it.
class RefCycles {
 public:
  // strict: refuse what could resolve elsewhere than this reading says ($id URIs, references it cannot find).
  RefCycles(const nlohmann::json& root, const std::string& where, bool strict)
      : root_(root), where_(where), strict_(strict) {
    index_ids(root_, 0);
  }
  void check() { walk(root_, 0); }

 private:
  static constexpr int kMaxNesting = 512;
  // References in one schema at most: valijson's parser recurses once per hop of a chain of them.
  static constexpr std::size_t kMaxRefs = 256;
  std::size_t refs_ = 0;

  void index_ids(const nlohmann::json& v, int depth) {
    if (depth > kMaxNesting) return;
    if (v.is_object()) {
      if (const auto id = v.find("$id");
          id != v.end() && id->is_string() && id->get_ref<const std::string&>().rfind('#', 0) == 0)
        anchors_.emplace(id->get<std::string>(), &v);
      for (const auto& [k, c] : v.items()) index_ids(c, depth + 1);
    } else if (v.is_array()) {
      for (const auto& c : v) index_ids(c, depth + 1);
    }
  }

  // Every node of the document is a start.
  void walk(const nlohmann::json& v, int depth) {
    if (depth > kMaxNesting) return;
    if (v.is_object()) {
      // Only references within the document: a relative one valijson resolves against the document's
      // own (empty) address, and may chase without end.
      if (const auto r = v.find("$ref");
          r != v.end() && r->is_string() && r->get_ref<const std::string&>().rfind('#', 0) != 0)
        throw UsageError(
            fmt::format("{}: not a JSON Schema tokenscope can use: \"$ref\": {} is not within the "
                        "schema (only \"#...\" references are read; nothing is fetched)",
                        where_, r->dump()));
      // An $id that is a URI moves the base references resolve against: not followed here, so refused.
      if (const auto id = v.find("$id");
          strict_ && id != v.end() && id->is_string() && id->get_ref<const std::string&>().rfind('#', 0) != 0)
        throw UsageError(
            fmt::format("{}: not a JSON Schema tokenscope can use: \"$id\": {} (only \"#name\" ids are "
                        "read; references resolve within the schema)",
                        where_, id->dump()));
      if (const auto r = v.find("$ref"); r != v.end() && r->is_string() && ++refs_ > kMaxRefs)
        throw UsageError(fmt::format("{}: not a JSON Schema tokenscope can use: more than {} references",
                                     where_, kMaxRefs));
      // Patterns compile now (valijson compiles them only when it validates, and a bad one would throw
      // from there).
      auto check_regex = [&](const std::string& pattern) {
        try {
          std::regex re(pattern, std::regex::ECMAScript);
        } catch (const std::exception& e) {
          throw UsageError(
              fmt::format("{}: not a JSON Schema tokenscope can use: the pattern {} is not a "
                          "regular expression ({})",
                          where_, nlohmann::json(pattern).dump(), e.what()));
        }
      };
      if (const auto p = v.find("pattern"); p != v.end() && p->is_string())
        check_regex(p->get<std::string>());
      if (const auto pp = v.find("patternProperties"); pp != v.end() && pp->is_object())
        for (const auto& [k, sub] : pp->items()) check_regex(k);
      visit(v, "");
      for (const auto& [k, c] : v.items()) walk(c, depth + 1);
    } else if (v.is_array()) {
      for (const auto& c : v) walk(c, depth + 1);
    }
  }

  const nlohmann::json* target(const std::string& ref) const {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) == 0) {
      try {
        const nlohmann::json::json_pointer ptr(fragment_pointer(std::string_view(ref).substr(1)));
        return root_.contains(ptr) ? &root_.at(ptr) : nullptr;
      } catch (const std::exception&) {
        return nullptr;
      }
    }
    const auto it = anchors_.find(ref);
    return it == anchors_.end() ? nullptr : it->second;
  }

  void visit(const nlohmann::json& v, const std::string& via) {
    if (!v.is_object()) return;
    auto& state = state_[&v];
    if (state == 2) return;
    if (state == 1)
      throw UsageError(
          fmt::format("{}: not a JSON Schema tokenscope can use: its references loop without "
                      "reaching a value ({})",
                      where_, via));
    state = 1;
    if (const auto r = v.find("$ref"); r != v.end() && r->is_string()) {
      if (const auto* t = target(r->get<std::string>())) {
        visit(*t, "$ref " + r->get<std::string>());
      } else if (strict_) {  // where valijson would look for it is not known here: refused
        throw UsageError(
            fmt::format("{}: not a JSON Schema tokenscope can use: \"$ref\": {} names nothing in the "
                        "schema",
                        where_, r->dump()));
      }
    }
    for (const char* k : {"allOf", "anyOf", "oneOf"})
      if (const auto a = v.find(k); a != v.end() && a->is_array())
        for (const auto& sub : *a) visit(sub, via.empty() ? k : via);
    for (const char* k : {"not", "if", "then", "else"})
      if (const auto a = v.find(k); a != v.end()) visit(*a, via.empty() ? k : via);
    // Schema-valued dependencies apply to the same object too.
    if (const auto d = v.find("dependencies"); d != v.end() && d->is_object())
      for (const auto& [name, sub] : d->items())
        if (sub.is_object()) visit(sub, via.empty() ? "dependencies" : via);
    state = 2;
  }

  const nlohmann::json& root_;
  const std::string& where_;
  bool strict_ = true;
  std::map<std::string, const nlohmann::json*> anchors_;
  std::map<const nlohmann::json*, int> state_;  // 1: on the path, 2: done
};

}  // namespace

struct JsonSchema::Impl {
  valijson::Schema schema;
  bool uses_regex = false;  // "pattern", "patternProperties" or "format" somewhere
};

namespace {
bool mentions_regex(const nlohmann::json& v, int depth = 0) {
  if (depth > 1024) return true;
  if (v.is_object()) {
    for (const auto& [k, c] : v.items())
      if (k == "pattern" || k == "patternProperties" || k == "format" || mentions_regex(c, depth + 1))
        return true;
  } else if (v.is_array()) {
    for (const auto& c : v)
      if (mentions_regex(c, depth + 1)) return true;
  }
  return false;
}
}  // namespace

JsonSchema::JsonSchema(const nlohmann::json& schema, const std::string& where, bool conformance)
    : impl_(std::make_unique<Impl>()) {
  RefCycles(schema, where, !conformance).check();
  impl_->uses_regex = mentions_regex(schema);
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

namespace {

// The longest string or member name of a value.
std::size_t longest_string(const nlohmann::json& v, int depth = 0) {
  if (depth > 1024) return 0;
  if (v.is_string()) return v.get_ref<const std::string&>().size();
  std::size_t n = 0;
  if (v.is_object())
    for (const auto& [k, c] : v.items()) n = std::max({n, k.size(), longest_string(c, depth + 1)});
  else if (v.is_array())
    for (const auto& c : v) n = std::max(n, longest_string(c, depth + 1));
  return n;
}

// Runs f on a thread with a stack of `bytes` (reserved, committed as used),
// rethrowing what it throws.
void run_with_stack(const std::function<void()>& f, std::size_t bytes) {
  struct Job {
    const std::function<void()>* f;
    std::exception_ptr error;
  } job{&f, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* p) -> void* {
        auto* j = static_cast<Job*>(p);
        try {
          (*j->f)();
        } catch (...) {
          j->error = std::current_exception();
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("json schema: no thread for a long value's check");
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace

// valijson matches "pattern", "patternProperties" and "format" with
// std::regex, whose matcher recurses once per character: a long string
// (about 40,000 characters on an 8 MiB stack, 8,000 under ASan) would
// overflow the stack. A value with strings longer than kShortString under
// such a schema is checked on a thread with a stack of kLongStack; strings
// longer than kMaxRegexSubject are a violation of their own.
namespace {
constexpr std::size_t kShortString = 1000, kMaxRegexSubject = 1 << 20;
constexpr std::size_t kLongStack = std::size_t{2} << 30;
}  // namespace

bool JsonSchema::valid(const nlohmann::json& instance) const {
  const std::size_t longest = impl_->uses_regex ? longest_string(instance) : 0;
  if (longest > kMaxRegexSubject) return false;
  bool ok = false;
  auto check = [&] {
    valijson::Validator validator(valijson::Validator::kStrongTypes);
    valijson::adapters::NlohmannJsonAdapter adapter(instance);
    try {
      ok = validator.validate(impl_->schema, adapter, nullptr);
    } catch (const std::exception&) {
      ok = false;  // whatever valijson could not check is no valid value
    }
  };
  if (longest > kShortString) {
    try {
      run_with_stack(check, kLongStack);
    } catch (const std::exception&) {
      return false;  // no thread for the check: not a value known to be valid
    }
  } else {
    check();
  }
  return ok;
}

std::vector<std::string> JsonSchema::violations(const nlohmann::json& instance,
                                                std::size_t max_errors) const {
  std::vector<std::string> out;
  const std::size_t longest = impl_->uses_regex ? longest_string(instance) : 0;
  if (longest > kMaxRegexSubject) {
    out.push_back(
        fmt::format("<root>: a string of {} bytes is longer than the {} bytes a pattern or format "
                    "of this schema can be checked on",
                    longest, kMaxRegexSubject));
    return out;
  }
  auto check = [&] {
    valijson::Validator validator(valijson::Validator::kStrongTypes);
    valijson::adapters::NlohmannJsonAdapter adapter(instance);
    valijson::ValidationResults results;
    try {
      if (validator.validate(impl_->schema, adapter, &results)) return;
    } catch (const std::exception& e) {
      out.push_back(fmt::format("<root>: not checked: {}", e.what()));
      return;
    }
    valijson::ValidationResults::Error error;
    while (out.size() < std::max<std::size_t>(1, max_errors) && results.popError(error)) {
      std::string path;
      for (const auto& c : error.context) path += c;
      out.push_back(fmt::format("{}: {}", path, error.description));
    }
    if (out.empty()) out.push_back("<root>: invalid");
  };
  if (longest > kShortString) {
    try {
      run_with_stack(check, kLongStack);
    } catch (const std::exception& e) {
      out.assign(1, fmt::format("<root>: not checked: {}", e.what()));
    }
  } else {
    check();
  }
  return out;
}

namespace {

constexpr int kMaxDepth = 16;

// A local reference ("#/definitions/x", "#/$defs/x", "#/properties/y"): the
// schema it names within the root, or null.
const nlohmann::json* resolve_local_ref(const nlohmann::json& root, const std::string& ref) {
  if (ref.rfind("#", 0) != 0) return nullptr;
  if (ref == "#") return &root;
  try {
    const auto ptr = nlohmann::json::json_pointer(ref.substr(1));
    return root.contains(ptr) ? &root.at(ptr) : nullptr;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// What one draw may build: values and string bytes (a 60-byte schema of
// nested arrays would otherwise ask for 256^9 values).
struct DrawBudget {
  std::size_t values = 50'000;
  std::size_t bytes = 4u << 20;
};
thread_local DrawBudget* draw_budget = nullptr;
struct OverBudget {};

std::string draw_word(Rng& rng, std::size_t lo, std::size_t hi) {
  static const char* letters = "abcdefghijklmnopqrstuvwxyz";
  const std::size_t n = static_cast<std::size_t>(rng.uniform_int(lo, std::max(lo, hi)));
  if (draw_budget) {
    if (draw_budget->bytes < n) throw OverBudget{};
    draw_budget->bytes -= n;
  }
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += letters[rng.uniform_int(0, 25)];
  return s;
}

double number_or(const nlohmann::json& s, const char* key, double fallback) {
  const auto it = s.find(key);
  return it != s.end() && it->is_number() ? it->get<double>() : fallback;
}

nlohmann::json draw(const nlohmann::json& root, const nlohmann::json& s, Rng& rng, int depth) {
  if (depth > kMaxDepth) return nullptr;
  if (draw_budget) {
    if (draw_budget->values == 0) throw OverBudget{};
    --draw_budget->values;
  }
  if (s.is_boolean()) return s.get<bool>() ? nlohmann::json("x") : nlohmann::json(nullptr);
  if (!s.is_object()) return nullptr;
  if (const auto it = s.find("$ref"); it != s.end() && it->is_string()) {
    const nlohmann::json* target = resolve_local_ref(root, it->get<std::string>());
    return target ? draw(root, *target, rng, depth + 1) : nlohmann::json(nullptr);
  }
  if (const auto it = s.find("const"); it != s.end()) return *it;
  if (const auto it = s.find("enum"); it != s.end() && it->is_array() && !it->empty())
    return (*it)[static_cast<std::size_t>(rng.uniform_int(0, it->size() - 1))];
  for (const char* any : {"anyOf", "oneOf"})
    if (const auto it = s.find(any); it != s.end() && it->is_array() && !it->empty())
      return draw(root, (*it)[static_cast<std::size_t>(rng.uniform_int(0, it->size() - 1))], rng, depth + 1);
  if (const auto it = s.find("allOf"); it != s.end() && it->is_array() && !it->empty()) {
    // The branches' object properties together (the common shape of allOf).
    nlohmann::json merged = nlohmann::json::object();
    for (const auto& b : *it)
      if (b.is_object())
        for (const auto& [k, v] : b.items()) {
          if ((k == "properties") && merged.contains(k) && v.is_object())
            merged[k].update(v);
          else if (k == "required" && merged.contains(k) && v.is_array())
            for (const auto& r : v) merged[k].push_back(r);
          else
            merged[k] = v;
        }
    return draw(root, merged, rng, depth + 1);
  }
  std::string type;
  if (const auto it = s.find("type"); it != s.end()) {
    if (it->is_string()) {
      type = it->get<std::string>();
    } else if (it->is_array() && !it->empty()) {
      const auto& t = (*it)[static_cast<std::size_t>(rng.uniform_int(0, it->size() - 1))];
      if (t.is_string()) type = t.get<std::string>();
    }
  } else if (s.contains("properties") || s.contains("required")) {
    type = "object";
  } else if (s.contains("items")) {
    type = "array";
  } else {
    type = "string";
  }
  if (type == "null") return nullptr;
  if (type == "boolean") return rng.uniform_int(0, 1) == 1;
  if (type == "integer" || type == "number") {
    // Bounds past 2^53 are clamped: the arithmetic below stays exact and within int64.
    constexpr double kBig = 9007199254740992.0;
    double lo = std::clamp(number_or(s, "minimum", 0.0), -kBig, kBig);
    double hi = std::clamp(number_or(s, "maximum", lo + 100), -kBig, kBig);
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number())
      lo = std::max(lo, s["exclusiveMinimum"].get<double>() + (type == "integer" ? 1 : 1e-6));
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number())
      hi = std::min(hi, s["exclusiveMaximum"].get<double>() - (type == "integer" ? 1 : 1e-6));
    if (hi < lo) hi = lo;
    const double step = number_or(s, "multipleOf", 0);
    if (type == "integer" || step > 0) {
      const double unit = step > 0 ? step : 1;
      const auto first = static_cast<std::int64_t>(std::clamp(std::ceil(lo / unit), -kBig, kBig));
      const auto last = static_cast<std::int64_t>(std::clamp(std::floor(hi / unit), -kBig, kBig));
      if (last < first) return lo;
      const auto k =
          first + static_cast<std::int64_t>(rng.uniform_int(
                      0, static_cast<std::uint64_t>(std::min<std::int64_t>(last - first, 1 << 30))));
      if (type == "integer") return static_cast<std::int64_t>(static_cast<double>(k) * unit);
      return static_cast<double>(k) * unit;
    }
    return lo + rng.uniform01() * (hi - lo);
  }
  if (type == "string") {
    const auto fmt_it = s.find("format");
    const std::string format = fmt_it != s.end() && fmt_it->is_string() ? fmt_it->get<std::string>() : "";
    if (format == "date")
      return fmt::format("2026-{:02}-{:02}", rng.uniform_int(1, 12), rng.uniform_int(1, 28));
    if (format == "date-time")
      return fmt::format("2026-{:02}-{:02}T{:02}:{:02}:00Z", rng.uniform_int(1, 12), rng.uniform_int(1, 28),
                         rng.uniform_int(0, 23), rng.uniform_int(0, 59));
    if (format == "email") return draw_word(rng, 3, 8) + "@example.com";
    if (format == "uri") return "https://example.com/" + draw_word(rng, 3, 8);
    const auto lo = static_cast<std::size_t>(std::max(0.0, number_or(s, "minLength", 3)));
    const auto hi = static_cast<std::size_t>(std::max<double>(
        static_cast<double>(lo), number_or(s, "maxLength", std::max<double>(static_cast<double>(lo), 12))));
    return draw_word(rng, std::min<std::size_t>(lo, 4096), std::min<std::size_t>(hi, 4096));
  }
  if (type == "array") {
    nlohmann::json out = nlohmann::json::array();
    const auto items = s.find("items");
    if (items != s.end() && items->is_array()) {  // a tuple
      for (const auto& it : *items) out.push_back(draw(root, it, rng, depth + 1));
      return out;
    }
    const auto lo = static_cast<std::size_t>(std::max(0.0, number_or(s, "minItems", 1)));
    const auto hi = static_cast<std::size_t>(std::max<double>(
        static_cast<double>(lo), number_or(s, "maxItems", std::max<double>(static_cast<double>(lo), 3))));
    const std::size_t n = static_cast<std::size_t>(
        rng.uniform_int(std::min<std::size_t>(lo, 256), std::min<std::size_t>(hi, 256)));
    const nlohmann::json any = nlohmann::json::object();
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(draw(root, items != s.end() ? *items : any, rng, depth + 1));
    return out;
  }
  // An object: every required property, each other declared one with probability 1/2.
  nlohmann::json out = nlohmann::json::object();
  const auto props = s.find("properties");
  std::vector<std::string> required;
  if (const auto r = s.find("required"); r != s.end() && r->is_array())
    for (const auto& k : *r)
      if (k.is_string()) required.push_back(k.get<std::string>());
  if (props != s.end() && props->is_object())
    for (const auto& [k, v] : props->items()) {
      const bool req = std::find(required.begin(), required.end(), k) != required.end();
      if (req || rng.uniform_int(0, 1) == 1) out[k] = draw(root, v, rng, depth + 1);
    }
  for (const auto& k : required)
    if (!out.contains(k)) out[k] = draw_word(rng, 3, 8);
  return out;
}

}  // namespace

nlohmann::json draw_instance(const nlohmann::json& schema, Rng& rng, const std::string& where) {
  return draw_instance(schema, JsonSchema(schema, where), rng, where);
}

nlohmann::json draw_instance(const nlohmann::json& schema, const JsonSchema& checker, Rng& rng,
                             const std::string& where) {
  for (int attempt = 0; attempt < 32; ++attempt) {
    DrawBudget budget;
    draw_budget = &budget;
    nlohmann::json v;
    try {
      v = draw(schema, schema, rng, 0);
    } catch (const OverBudget&) {
      draw_budget = nullptr;
      throw UsageError(
          fmt::format("{}: the schema asks for values of more than 50,000 parts or 4 MiB of text", where));
    }
    draw_budget = nullptr;
    if (checker.valid(v)) return v;
  }
  throw UsageError(fmt::format("{}: no value drawn in 32 tries satisfies the schema", where));
}

}  // namespace tokenscope
