#include "bench/openapi.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "core/json_schema.h"
#include "core/yaml_fields.h"
#include "serve/tools.h"

namespace tokenscope::bench {

namespace {

constexpr int kMaxRefDepth = 32;

// Inlines local references (#/...) of `v` against the document `root`.
// At most this many values in all a document's inlined schemas: references
// used twice at every level would otherwise double them 32 times.
constexpr std::size_t kMaxInlinedValues = 200'000;

nlohmann::json inline_refs(const nlohmann::json& root, const nlohmann::json& v, int depth,
                           const std::function<void(const std::string&)>& refuse, std::size_t& budget) {
  if (budget == 0) refuse("(the references expand past 200,000 values)");
  --budget;
  if (v.is_object()) {
    if (const auto r = v.find("$ref"); r != v.end() && r->is_string()) {
      const std::string ref = r->get<std::string>();
      if (ref.rfind("#/", 0) != 0) refuse(ref);
      if (depth >= kMaxRefDepth) return nlohmann::json::object();  // deeper (or a cycle): any value
      try {
        const nlohmann::json::json_pointer ptr(ref.substr(1));
        if (!root.contains(ptr)) refuse(ref);
        return inline_refs(root, root.at(ptr), depth + 1, refuse, budget);
      } catch (const nlohmann::json::exception&) {
        refuse(ref);
      }
    }
    nlohmann::json out = nlohmann::json::object();
    for (auto it = v.begin(); it != v.end(); ++it)
      out[it.key()] = inline_refs(root, *it, depth, refuse, budget);
    return out;
  }
  if (v.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : v) out.push_back(inline_refs(root, e, depth, refuse, budget));
    return out;
  }
  return v;
}

std::string sanitized(const std::string& method, const std::string& path) {
  std::string out = method + "_" + path;
  for (auto& c : out)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      c = '_';
  // Runs of '_' become one, and none at the end.
  std::string squeezed;
  for (const char c : out)
    if (!(c == '_' && !squeezed.empty() && squeezed.back() == '_')) squeezed += c;
  while (!squeezed.empty() && squeezed.back() == '_') squeezed.pop_back();
  return squeezed.substr(0, 64);
}

}  // namespace

std::vector<ToolSpec> read_openapi_tools(const std::string& text, const std::string& file) {
  const YAML::Node root = yaml::load(text, file);
  const yaml::Fields rd(file);
  try {
    if (!root.IsMap())
      throw InputError(file, 1, "", "expected an OpenAPI 3 document (a mapping with openapi and paths)");
    const YAML::Node version = root["openapi"];
    if (!version || !version.IsScalar() || version.Scalar().rfind("3.", 0) != 0)
      rd.fail(
          version ? version : root, "openapi",
          "expected an OpenAPI 3.x document (\"openapi\": \"3.0.3\" or \"3.1.0\"); Swagger 2 is not read");
    const YAML::Node paths = root["paths"];
    if (!paths || !paths.IsMap() || paths.size() == 0)
      rd.fail(paths ? paths : root, "paths", "expected a mapping of paths to operations");
    // The whole document as JSON, for references.
    const nlohmann::json doc = yaml_to_json(root, rd, "");
    std::vector<ToolSpec> tools;
    std::size_t budget = kMaxInlinedValues;
    for (const auto& p : paths) {
      const std::string path = rd.string(p.first, "paths");
      const std::string pf = "paths." + path;
      if (!p.second.IsMap()) rd.fail(p.second, pf, "expected a mapping of methods to operations");
      // Parameters of the path item apply to every operation under it.
      const YAML::Node shared_params = p.second["parameters"];
      for (const auto& m : p.second) {
        const std::string method = rd.string(m.first, pf);
        static const char* kMethods[] = {"get", "put", "post", "delete", "options", "head", "patch", "trace"};
        if (std::find_if(std::begin(kMethods), std::end(kMethods),
                         [&](const char* k) { return method == k; }) == std::end(kMethods))
          continue;  // parameters, summary, servers, x-...
        const YAML::Node op = m.second;
        const std::string of = pf + "." + method;
        if (!op.IsMap()) rd.fail(op, of, "expected an operation (a mapping)");
        if (tools.size() >= kMaxTools)
          rd.fail(op, of, fmt::format("more than {} operations (each becomes a tool)", kMaxTools));
        const auto refuse = [&](const std::string& ref) {
          if (ref.rfind("(", 0) == 0) rd.fail(op, of, "references too large to inline " + ref);
          rd.fail(op, of,
                  fmt::format("$ref {} is not a reference within this document (#/components/...)",
                              quote_input(ref)));
        };
        const auto inline_refs_budget = [&](const nlohmann::json& d, const nlohmann::json& v, int depth,
                                            const std::function<void(const std::string&)>& r) {
          return inline_refs(d, v, depth, r, budget);
        };
        ToolSpec t;
        t.kind = ToolSpec::Kind::kJsonApi;
        t.line = yaml::line_of(op);
        std::string name =
            op["operationId"] && op["operationId"].IsScalar() ? op["operationId"].Scalar() : "";
        if (!serve::valid_tool_name(name)) name = sanitized(method, path);
        if (name.empty()) rd.fail(op, of, "no operationId, and no name can be made from the method and path");
        std::string unique = name;
        for (int k = 2;
             std::any_of(tools.begin(), tools.end(), [&](const ToolSpec& x) { return x.name == unique; });
             ++k)
          unique = name.substr(0, 60) + "_" + std::to_string(k);
        t.name = unique;
        if (op["summary"] && op["summary"].IsScalar())
          t.description = op["summary"].Scalar().substr(0, 1024);
        else if (op["description"] && op["description"].IsScalar())
          t.description = op["description"].Scalar().substr(0, 1024);
        // Parameters: the path item's, then the operation's (which win).
        nlohmann::json properties = nlohmann::json::object(), required = nlohmann::json::array();
        auto take_params = [&](const YAML::Node& list, const std::string& field) {
          if (!list) return;
          if (!list.IsSequence()) rd.fail(list, field, "expected a list of parameters");
          for (std::size_t i = 0; i < list.size(); ++i) {
            const std::string f = fmt::format("{}[{}]", field, i);
            const nlohmann::json param = inline_refs_budget(doc, yaml_to_json(list[i], rd, f), 0, refuse);
            if (!param.is_object() || !param.contains("name") || !param["name"].is_string())
              rd.fail(list[i], f, "expected a parameter with a name");
            const std::string pname = param["name"].get<std::string>();
            properties[pname] =
                param.contains("schema") ? param["schema"] : nlohmann::json{{"type", "string"}};
            const bool in_path = param.contains("in") && param["in"] == "path";
            const bool declared = param.contains("required") && param["required"] == true;
            if (in_path || declared)
              if (std::find(required.begin(), required.end(), pname) == required.end())
                required.push_back(pname);
          }
        };
        take_params(shared_params, pf + ".parameters");
        take_params(op["parameters"], of + ".parameters");
        if (const YAML::Node body = op["requestBody"]) {
          const nlohmann::json rb =
              inline_refs_budget(doc, yaml_to_json(body, rd, of + ".requestBody"), 0, refuse);
          const nlohmann::json* schema = nullptr;
          if (rb.is_object() && rb.contains("content") && rb["content"].is_object())
            for (const auto& [type, media] : rb["content"].items())
              if (type.find("json") != std::string::npos && media.is_object() && media.contains("schema")) {
                schema = &media["schema"];
                break;
              }
          if (schema) {
            const bool body_required = rb.contains("required") && rb["required"] == true;
            if (schema->is_object() && schema->contains("properties") &&
                (*schema)["properties"].is_object()) {
              for (const auto& [k, v] : (*schema)["properties"].items()) properties[k] = v;
              if (body_required && schema->contains("required") && (*schema)["required"].is_array())
                for (const auto& r : (*schema)["required"])
                  if (std::find(required.begin(), required.end(), r) == required.end()) required.push_back(r);
            } else {
              properties["body"] = *schema;
              if (body_required) required.push_back("body");
            }
          }
        }
        t.parameters = {{"type", "object"}, {"properties", properties}};
        if (!required.empty()) t.parameters["required"] = required;
        try {
          t.parameters_checker = std::make_shared<const JsonSchema>(t.parameters, of + " (parameters)");
        } catch (const UsageError& e) {
          rd.fail(op, of, e.what());
        }
        // The response: the first success (or default) with a JSON schema.
        t.response = {{"type", "object"}};
        if (const YAML::Node responses = op["responses"]) {
          const nlohmann::json rs =
              inline_refs_budget(doc, yaml_to_json(responses, rd, of + ".responses"), 0, refuse);
          for (const char* code : {"200", "201", "202", "2XX", "default"}) {
            if (!rs.is_object() || !rs.contains(code) || !rs[code].is_object() ||
                !rs[code].contains("content"))
              continue;
            bool found = false;
            if (!rs[code]["content"].is_object()) continue;
            for (const auto& [type, media] : rs[code]["content"].items())
              if (type.find("json") != std::string::npos && media.is_object() && media.contains("schema")) {
                t.response = media["schema"];
                found = true;
                break;
              }
            if (found) break;
          }
        }
        try {
          t.response_checker = std::make_shared<const JsonSchema>(t.response, of + " (response)");
        } catch (const UsageError& e) {
          rd.fail(op, of, e.what());
        }
        tools.push_back(std::move(t));
      }
    }
    if (tools.empty()) rd.fail(paths, "paths", "no operation (get, post, ...) in any path");
    return tools;
  } catch (const InputError&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file, 0, "", fmt::format("not an OpenAPI document tokenscope can read: {}", e.what()));
  } catch (const YAML::Exception& e) {
    throw InputError(file, e.mark.line >= 0 ? static_cast<std::size_t>(e.mark.line) + 1 : 0, "", e.msg);
  }
}

}  // namespace tokenscope::bench
