#include "bench/task_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <regex>

#include "bench/openapi.h"
#include "core/error.h"
#include "core/text_reader.h"
#include "serve/tools.h"

namespace tokenscope::bench {

namespace {

double number(const yaml::Fields& rd, const YAML::Node& n, const std::string& field, double lo, double hi) {
  return rd.number(n, field, lo, hi, false, fmt::format("a number in [{}, {}]", lo, hi));
}

workload::LengthDistribution length(const yaml::Fields& rd, const YAML::Node& n, const std::string& field,
                                    workload::LengthRole role) {
  const std::string spec = rd.string(n, field);
  try {
    return workload::parse_length_spec(spec, field, role);
  } catch (const UsageError& e) {
    rd.fail(n, field, e.what());
  }
}

std::shared_ptr<const JsonSchema> compile(const yaml::Fields& rd, const YAML::Node& n,
                                          const nlohmann::json& schema, const std::string& field) {
  if (!schema.is_object() && !schema.is_boolean())
    rd.fail(n, field, "expected a JSON schema (a mapping, e.g. {type: object, properties: {...}})");
  try {
    return std::make_shared<const JsonSchema>(schema, field);
  } catch (const UsageError& e) {
    rd.fail(n, field, e.what());
  }
}

std::string name_field(const yaml::Fields& rd, const YAML::Node& n, const std::string& field) {
  const std::string name = rd.string(n, field);
  if (!serve::valid_tool_name(name))
    rd.fail(n, field, "expected 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  return name;
}

}  // namespace

std::vector<std::string> template_names(std::string_view text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = text.find("{{", at)) != std::string_view::npos) {
    const std::size_t end = text.find("}}", at + 2);
    if (end == std::string_view::npos) throw UsageError("a '{{' without its '}}'");
    std::string_view name = text.substr(at + 2, end - at - 2);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (!serve::valid_tool_name(name))
      throw UsageError(
          fmt::format("{{{{{}}}}} is not a step name (1 to 64 characters of a-z, A-Z, 0-9, _ and -)",
                      std::string(name).substr(0, 80)));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.emplace_back(name);
    at = end + 2;
  }
  return out;
}

nlohmann::json yaml_to_json(const YAML::Node& n, const yaml::Fields& rd, const std::string& field) {
  struct Walk {
    const yaml::Fields& rd;
    const std::string& field;
    std::size_t* budget;  // values left: YAML aliases could otherwise expand a small file without bound
    nlohmann::json operator()(const YAML::Node& v, int depth) const {
      if (depth > 64) rd.fail(v, field, "nested deeper than 64 levels");
      if (*budget == 0) rd.fail(v, field, "more than 100,000 values (YAML aliases expanded)");
      --*budget;
      if (v.IsMap()) {
        nlohmann::json o = nlohmann::json::object();
        for (const auto& kv : v) {
          if (!kv.first.IsScalar()) rd.fail(kv.first, field, "a mapping key must be a string");
          o[kv.first.Scalar()] = (*this)(kv.second, depth + 1);
        }
        return o;
      }
      if (v.IsSequence()) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& e : v) a.push_back((*this)(e, depth + 1));
        return a;
      }
      if (!v.IsScalar()) return nullptr;
      const std::string& s = v.Scalar();
      if (v.Tag() == "!") return s;  // quoted: a string
      if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      static const std::regex integer("[-+]?[0-9]+");
      static const std::regex floating(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
      if (s.size() <= 64 && std::regex_match(s, integer)) {
        std::int64_t i = 0;
        const char* b = s.data() + (s.front() == '+' ? 1 : 0);
        const auto [p, ec] = std::from_chars(b, s.data() + s.size(), i);
        if (ec == std::errc() && p == s.data() + s.size()) return i;
      }
      if (s.size() <= 64 && std::regex_match(s, floating)) {
        const double d = std::strtod(s.c_str(), nullptr);
        if (std::isfinite(d)) return d;
      }
      return s;
    }
  };
  std::size_t budget = 100'000;
  return Walk{rd, field, &budget}(n, 0);
}

std::optional<std::uint32_t> TaskCatalog::find(std::string_view name) const {
  for (std::uint32_t i = 0; i < tools.size(); ++i)
    if (tools[i].name == name) return i;
  return std::nullopt;
}

namespace {
// The mock's behaviour: latency, injected errors, payload.
void read_mock_fields(const yaml::Fields& rd, const YAML::Node& n, const std::string& f, ToolSpec& s) {
  if (n["latency_ms"])
    s.latency_ms = length(rd, n["latency_ms"], f + ".latency_ms", workload::LengthRole::kOutput);
  if (n["payload_tokens"])
    s.payload_tokens = length(rd, n["payload_tokens"], f + ".payload_tokens", workload::LengthRole::kOutput);
  if (const YAML::Node e = n["errors"]) {
    rd.only_keys(e, f + ".errors", {"http_5xx", "timeout", "malformed"});
    if (e["http_5xx"]) s.error_5xx = number(rd, e["http_5xx"], f + ".errors.http_5xx", 0, 1);
    if (e["timeout"]) s.error_timeout = number(rd, e["timeout"], f + ".errors.timeout", 0, 1);
    if (e["malformed"]) s.error_malformed = number(rd, e["malformed"], f + ".errors.malformed", 0, 1);
    if (s.error_5xx + s.error_timeout + s.error_malformed > 1 + 1e-12)
      rd.fail(e, f + ".errors", "the rates add up to more than 1");
  }
}
}  // namespace

TaskCatalog parse_task_catalog(const YAML::Node& root, const yaml::Fields& rd) {
  TaskCatalog c;
  c.documents.tokens =
      workload::parse_length_spec("fixed:200", "documents.tokens", workload::LengthRole::kInput);
  if (const YAML::Node d = root["documents"]) {
    rd.only_keys(d, "documents", {"count", "tokens"});
    if (d["count"])
      c.documents.count = static_cast<std::uint32_t>(rd.whole(d["count"], "documents.count", 1, 100'000));
    if (d["tokens"]) {
      c.documents.tokens = length(rd, d["tokens"], "documents.tokens", workload::LengthRole::kInput);
      if (c.documents.tokens.max <= 0 && c.documents.tokens.kind != workload::LengthKind::kFixed &&
          c.documents.tokens.kind != workload::LengthKind::kUniform)
        rd.fail(d["tokens"], "documents.tokens", "unbounded: give a largest value (:max=N)");
    }
  }
  const YAML::Node t = root["tools"];
  if (!t) return c;
  if (!t.IsSequence() || t.size() == 0) rd.fail(t, "tools", "expected a non-empty list of tools");
  if (t.size() > kMaxTools) rd.fail(t, "tools", fmt::format("at most {} tools", kMaxTools));
  for (std::size_t i = 0; i < t.size(); ++i) {
    const YAML::Node n = t[i];
    const std::string f = fmt::format("tools[{}]", i);
    if (n.IsMap() && n["openapi"]) {
      // Every operation of an OpenAPI 3 document, a json_api mock each (bench/openapi.h).
      rd.only_keys(n, f, {"openapi", "operations", "latency_ms", "errors", "payload_tokens"});
      std::string path = rd.string(n["openapi"], f + ".openapi");
      if (!path.empty() && path.front() != '/')
        path = (std::filesystem::path(rd.file()).parent_path() / path).string();
      std::string text;
      try {
        text = read_regular_file(path, "OpenAPI document", kMaxOpenApiBytes);
      } catch (const UsageError& e) {
        rd.fail(n["openapi"], f + ".openapi", e.what());
      }
      std::vector<ToolSpec> ops = read_openapi_tools(text, path);
      if (const YAML::Node only = n["operations"]) {
        if (!only.IsSequence() || only.size() == 0)
          rd.fail(only, f + ".operations", "expected a list of operation names");
        std::vector<ToolSpec> kept;
        for (std::size_t j = 0; j < only.size(); ++j) {
          const std::string name = rd.string(only[j], fmt::format("{}.operations[{}]", f, j));
          const auto it =
              std::find_if(ops.begin(), ops.end(), [&](const ToolSpec& x) { return x.name == name; });
          if (it == ops.end())
            rd.fail(only[j], fmt::format("{}.operations[{}]", f, j),
                    fmt::format("no operation {} in {}", quote_input(name), path));
          kept.push_back(*it);
        }
        ops = std::move(kept);
      }
      ToolSpec common;
      read_mock_fields(rd, n, f, common);
      for (auto& op : ops) {
        if (c.find(op.name))
          rd.fail(n, f, "the operation " + quote_input(op.name) + " is named like another tool");
        if (c.tools.size() >= kMaxTools) rd.fail(n, f, fmt::format("more than {} tools", kMaxTools));
        op.latency_ms = common.latency_ms;
        op.payload_tokens = common.payload_tokens;
        op.error_5xx = common.error_5xx;
        op.error_timeout = common.error_timeout;
        op.error_malformed = common.error_malformed;
        op.line = yaml::line_of(n);
        c.tools.push_back(std::move(op));
      }
      continue;
    }
    rd.only_keys(n, f,
                 {"name", "kind", "description", "parameters", "response", "url", "latency_ms", "errors",
                  "payload_tokens"});
    ToolSpec s;
    s.line = yaml::line_of(n);
    if (!n["name"]) rd.fail(n, f + ".name", "missing (expected the tool's name)");
    s.name = name_field(rd, n["name"], f + ".name");
    if (c.find(s.name)) rd.fail(n["name"], f + ".name", "duplicate tool " + quote_input(s.name));
    if (n["description"]) s.description = rd.string(n["description"], f + ".description");
    if (n["url"]) {
      s.kind = ToolSpec::Kind::kUrl;
      s.url = rd.string(n["url"], f + ".url");
      if (s.url.rfind("http://", 0) != 0)
        rd.fail(n["url"], f + ".url", "expected an http:// URL (https is not spoken to tools)");
    }
    if (const YAML::Node k = n["kind"]) {
      const std::string kind = rd.string(k, f + ".kind");
      if (kind == "search")
        s.kind = ToolSpec::Kind::kSearch;
      else if (kind == "calculator")
        s.kind = ToolSpec::Kind::kCalculator;
      else if (kind == "json_api")
        s.kind = ToolSpec::Kind::kJsonApi;
      else if (kind == "url")
        s.kind = ToolSpec::Kind::kUrl;
      else
        rd.fail(k, f + ".kind", "expected search, calculator, json_api or url");
    }
    if (s.kind == ToolSpec::Kind::kUrl && s.url.empty())
      rd.fail(n, f + ".url", "missing (kind url needs one)");
    if (s.kind != ToolSpec::Kind::kUrl && !s.url.empty())
      rd.fail(n["url"], f + ".url", "only a tool of kind url has one");
    if (!n["parameters"])
      rd.fail(
          n, f + ".parameters",
          "missing (a JSON schema of the tool's arguments, e.g. {type: object, properties: {query: {type: "
          "string}}, required: [query]})");
    s.parameters = yaml_to_json(n["parameters"], rd, f + ".parameters");
    s.parameters_checker = compile(rd, n["parameters"], s.parameters, f + ".parameters");
    if (n["response"]) {
      if (s.kind != ToolSpec::Kind::kJsonApi)
        rd.fail(n["response"], f + ".response", "only a json_api tool answers from a response schema");
      s.response = yaml_to_json(n["response"], rd, f + ".response");
      s.response_checker = compile(rd, n["response"], s.response, f + ".response");
    } else if (s.kind == ToolSpec::Kind::kJsonApi) {
      s.response = {{"type", "object"},
                    {"properties", {{"status", {{"enum", {"ok"}}}}, {"result", {{"type", "string"}}}}},
                    {"required", {"status", "result"}}};
      s.response_checker = std::make_shared<const JsonSchema>(s.response, f + ".response");
    }
    if (s.kind == ToolSpec::Kind::kUrl && n["errors"])
      rd.fail(n["errors"], f + ".errors",
              "a url tool is the user's: its errors are its own (mock tools inject them)");
    read_mock_fields(rd, n, f, s);
    c.tools.push_back(std::move(s));
  }
  return c;
}

namespace {

// Reads the fields common to steps and to a model-driven task.
void retry_fields(const yaml::Fields& rd, const YAML::Node& n, const std::string& f, double& timeout_ms,
                  std::uint32_t& retries, double& backoff_ms) {
  if (n["timeout_ms"]) timeout_ms = number(rd, n["timeout_ms"], f + ".timeout_ms", 1, 3.6e6);
  if (n["retries"]) retries = static_cast<std::uint32_t>(rd.whole(n["retries"], f + ".retries", 0, 10));
  if (n["backoff_ms"]) backoff_ms = number(rd, n["backoff_ms"], f + ".backoff_ms", 0, 600'000);
}

// `judge: true` or `judge: {rubric, min_score, timeout_ms}`.
JudgeSpec judge_field(const yaml::Fields& rd, const YAML::Node& n, const std::string& f) {
  JudgeSpec j;
  if (n.IsScalar()) {
    if (n.Scalar() != "true") rd.fail(n, f, "expected true or a mapping with rubric, min_score, timeout_ms");
    return j;
  }
  if (!n.IsMap()) rd.fail(n, f, "expected true or a mapping with rubric, min_score, timeout_ms");
  rd.only_keys(n, f, {"rubric", "min_score", "timeout_ms"});
  if (n["rubric"]) {
    j.rubric = rd.string(n["rubric"], f + ".rubric");
    if (j.rubric.empty()) rd.fail(n["rubric"], f + ".rubric", "expected the judge's instructions, not empty");
  }
  if (n["min_score"]) j.min_score = static_cast<int>(rd.whole(n["min_score"], f + ".min_score", 1, 5));
  if (n["timeout_ms"]) j.timeout_ms = number(rd, n["timeout_ms"], f + ".timeout_ms", 1, 3.6e6);
  return j;
}

void check_template(const yaml::Fields& rd, const YAML::Node& n, const std::string& field,
                    std::string_view text, const std::function<bool(const std::string&)>& known,
                    std::string_view expected) {
  std::vector<std::string> names;
  try {
    names = template_names(text);
  } catch (const UsageError& e) {
    rd.fail(n, field, e.what());
  }
  for (const auto& name : names)
    if (name != "input" && !known(name))
      rd.fail(n, field, fmt::format("names {{{{{}}}}}, which is not {}", name, expected));
}

// Every string inside a JSON value.
void strings_of(const nlohmann::json& v, std::vector<std::string>& out) {
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_structured()) {
    for (const auto& e : v) strings_of(e, out);
  }
}

}  // namespace

TaskSpec parse_task(const YAML::Node& node, const std::string& f, const TaskCatalog& catalog,
                    const yaml::Fields& rd) {
  rd.only_keys(node, f,
               {"mode", "input_len", "steps", "tools", "tool_choice", "parallel_tool_calls", "max_steps",
                "system", "prompt", "output_len", "timeout_ms", "retries", "backoff_ms", "stream", "judge"});
  TaskSpec t;
  t.line = yaml::line_of(node);
  t.input_len = workload::parse_length_spec("fixed:32", f + ".input_len", workload::LengthRole::kInput);
  if (node["input_len"])
    t.input_len = length(rd, node["input_len"], f + ".input_len", workload::LengthRole::kInput);
  if (const YAML::Node st = node["stream"]) {
    if (!st.IsScalar() || (st.Scalar() != "true" && st.Scalar() != "false"))
      rd.fail(st, f + ".stream", "expected true or false");
    t.stream = st.Scalar() == "true";
  }
  if (const YAML::Node m = node["mode"]) {
    const std::string mode = rd.string(m, f + ".mode");
    if (mode == "scripted")
      t.mode = TaskSpec::Mode::kScripted;
    else if (mode == "model-driven")
      t.mode = TaskSpec::Mode::kModelDriven;
    else
      rd.fail(m, f + ".mode", "expected scripted or model-driven");
  }
  const auto tool_index = [&](const YAML::Node& n, const std::string& field) {
    const std::string name = rd.string(n, field);
    const auto i = catalog.find(name);
    if (!i)
      rd.fail(n, field,
              fmt::format("unknown tool {} (not in the file's 'tools'{})", quote_input(name),
                          catalog.tools.empty() ? ", which has none" : ""));
    return *i;
  };

  if (t.mode == TaskSpec::Mode::kModelDriven) {
    for (const char* k : {"steps"})
      if (node[k])
        rd.fail(node[k], f + "." + k,
                "a model-driven task has no steps: the model's tool calls are its steps");
    const YAML::Node tl = node["tools"];
    if (!tl || !tl.IsSequence() || tl.size() == 0)
      rd.fail(tl ? tl : node, f + ".tools",
              "expected a non-empty list of tool names (the tools the model may call)");
    for (std::size_t i = 0; i < tl.size(); ++i) {
      const auto idx = tool_index(tl[i], fmt::format("{}.tools[{}]", f, i));
      if (std::find(t.tools.begin(), t.tools.end(), idx) != t.tools.end())
        rd.fail(tl[i], fmt::format("{}.tools[{}]", f, i), "named twice");
      t.tools.push_back(idx);
    }
    if (node["tool_choice"]) {
      t.tool_choice = rd.string(node["tool_choice"], f + ".tool_choice");
      if (t.tool_choice != "auto" && t.tool_choice != "required" && t.tool_choice != "none")
        rd.fail(node["tool_choice"], f + ".tool_choice", "expected auto, required or none");
    }
    if (const YAML::Node p = node["parallel_tool_calls"]) {
      if (!p.IsScalar() || (p.Scalar() != "true" && p.Scalar() != "false"))
        rd.fail(p, f + ".parallel_tool_calls", "expected true or false");
      t.parallel_tool_calls = p.Scalar() == "true";
    }
    if (node["max_steps"])
      t.max_steps = static_cast<std::uint32_t>(rd.whole(node["max_steps"], f + ".max_steps", 1, 1000));
    if (node["system"]) t.system = rd.string(node["system"], f + ".system");
    if (!node["prompt"])
      rd.fail(node, f + ".prompt", "missing (the user's message; {{input}} is the task's input)");
    t.prompt = rd.string(node["prompt"], f + ".prompt");
    const auto only_input = [](const std::string&) { return false; };
    check_template(rd, node["prompt"], f + ".prompt", t.prompt, only_input, "{{input}} (the only name here)");
    if (node["system"])
      check_template(rd, node["system"], f + ".system", t.system, only_input,
                     "{{input}} (the only name here)");
    if (!node["output_len"])
      rd.fail(node, f + ".output_len", "missing (max_tokens of each model call, a length spec)");
    t.output_len = length(rd, node["output_len"], f + ".output_len", workload::LengthRole::kOutput);
    retry_fields(rd, node, f, t.timeout_ms, t.retries, t.backoff_ms);
    if (node["judge"]) t.judge = judge_field(rd, node["judge"], f + ".judge");
    return t;
  }
  if (node["judge"])
    rd.fail(node["judge"], f + ".judge",
            "belongs to a model-driven task; in a scripted one, give the model step that answers a judge");

  for (const char* k :
       {"tools", "tool_choice", "parallel_tool_calls", "max_steps", "system", "prompt", "output_len"})
    if (node[k])
      rd.fail(node[k], f + "." + k,
              "belongs to a model-driven task (mode: model-driven); a scripted one has steps");
  const YAML::Node steps = node["steps"];
  if (!steps) rd.fail(node, f + ".steps", "missing (a list of steps: model, tool or retrieve)");
  if (!steps.IsSequence() || steps.size() == 0)
    rd.fail(steps, f + ".steps", "expected a non-empty list of steps");
  if (steps.size() > kMaxTaskSteps)
    rd.fail(steps, f + ".steps", fmt::format("at most {} steps", kMaxTaskSteps));
  // Ids first: `after` and `cite` may name later steps.
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const YAML::Node s = steps[i];
    const std::string sf = fmt::format("{}.steps[{}]", f, i);
    if (!s.IsMap()) rd.fail(s, sf, "expected a mapping with id and one of model, tool, retrieve");
    if (!s["id"]) rd.fail(s, sf + ".id", "missing (the step's name)");
    StepSpec step;
    step.id = name_field(rd, s["id"], sf + ".id");
    if (step.id == "input") rd.fail(s["id"], sf + ".id", "'input' names the task's input; choose another id");
    for (const auto& o : t.steps)
      if (o.id == step.id) rd.fail(s["id"], sf + ".id", "duplicate step " + quote_input(step.id));
    step.line = yaml::line_of(s);
    t.steps.push_back(std::move(step));
  }
  const auto step_index = [&](const YAML::Node& n, const std::string& field) -> std::uint32_t {
    const std::string id = rd.string(n, field);
    for (std::uint32_t k = 0; k < t.steps.size(); ++k)
      if (t.steps[k].id == id) return k;
    rd.fail(n, field,
            fmt::format("unknown step {} (expected the id of a step of this task)", quote_input(id)));
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const YAML::Node s = steps[i];
    const std::string sf = fmt::format("{}.steps[{}]", f, i);
    rd.only_keys(s, sf,
                 {"id", "after", "model", "tool", "retrieve", "timeout_ms", "retries", "backoff_ms", "cite",
                  "output_schema", "judge"});
    StepSpec& step = t.steps[i];
    if (const YAML::Node a = s["after"]) {
      if (!a.IsSequence()) rd.fail(a, sf + ".after", "expected a list of step ids");
      for (std::size_t j = 0; j < a.size(); ++j) {
        const std::uint32_t k = step_index(a[j], fmt::format("{}.after[{}]", sf, j));
        if (k == i) rd.fail(a[j], fmt::format("{}.after[{}]", sf, j), "a step cannot come after itself");
        if (std::find(step.after.begin(), step.after.end(), k) == step.after.end()) step.after.push_back(k);
      }
    }
    const int kinds = (s["model"] ? 1 : 0) + (s["tool"] ? 1 : 0) + (s["retrieve"] ? 1 : 0);
    if (kinds != 1) rd.fail(s, sf, "expected exactly one of model, tool, retrieve");
    retry_fields(rd, s, sf, step.timeout_ms, step.retries, step.backoff_ms);
  }
  // The order, and a cycle named when there is one.
  {
    std::vector<std::uint32_t> indegree(t.steps.size(), 0);
    std::vector<std::vector<std::uint32_t>> next(t.steps.size());
    for (std::uint32_t i = 0; i < t.steps.size(); ++i)
      for (const auto a : t.steps[i].after) {
        ++indegree[i];
        next[a].push_back(i);
      }
    std::vector<std::uint32_t> ready;
    for (std::uint32_t i = 0; i < t.steps.size(); ++i)
      if (indegree[i] == 0) ready.push_back(i);
    for (std::size_t r = 0; r < ready.size(); ++r) {
      t.order.push_back(ready[r]);
      for (const auto n : next[ready[r]])
        if (--indegree[n] == 0) ready.push_back(n);
    }
    if (t.order.size() != t.steps.size()) {
      // Walk `after` from a step left over until a step repeats: that is the cycle.
      std::uint32_t at = 0;
      while (indegree[at] == 0) ++at;
      std::vector<std::uint32_t> path;
      std::vector<int> seen(t.steps.size(), -1);
      while (seen[at] < 0) {
        seen[at] = static_cast<int>(path.size());
        path.push_back(at);
        for (const auto a : t.steps[at].after)
          if (indegree[a] > 0) {
            at = a;
            break;
          }
      }
      std::string cycle;
      for (std::size_t k = static_cast<std::size_t>(seen[at]); k < path.size(); ++k)
        cycle += t.steps[path[k]].id + " after ";
      cycle += t.steps[at].id;
      rd.fail(steps[at], fmt::format("{}.steps[{}].after", f, at),
              fmt::format("the steps form a cycle ({}); expected a graph without cycles", cycle));
    }
  }
  // Ancestors: what a step may read.
  std::vector<std::vector<bool>> ancestor(t.steps.size(), std::vector<bool>(t.steps.size(), false));
  for (const auto i : t.order)
    for (const auto a : t.steps[i].after) {
      ancestor[i][a] = true;
      for (std::size_t k = 0; k < t.steps.size(); ++k)
        if (ancestor[a][k]) ancestor[i][k] = true;
    }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const YAML::Node s = steps[i];
    const std::string sf = fmt::format("{}.steps[{}]", f, i);
    StepSpec& step = t.steps[i];
    const auto known = [&](const std::string& name) {
      for (std::size_t k = 0; k < t.steps.size(); ++k)
        if (t.steps[k].id == name) return static_cast<bool>(ancestor[i][k]);
      return false;
    };
    const std::string expected = "the output of a step this one comes after (list it in after)";
    if (const YAML::Node m = s["model"]) {
      step.kind = StepSpec::Kind::kModel;
      rd.only_keys(m, sf + ".model", {"system", "prompt", "input_len", "output_len"});
      if (!m["prompt"]) rd.fail(m, sf + ".model.prompt", "missing (the user's message, a template)");
      step.prompt = rd.string(m["prompt"], sf + ".model.prompt");
      check_template(rd, m["prompt"], sf + ".model.prompt", step.prompt, known, expected);
      if (m["system"]) {
        step.system = rd.string(m["system"], sf + ".model.system");
        check_template(rd, m["system"], sf + ".model.system", step.system, known, expected);
      }
      if (m["input_len"])
        step.input_len = length(rd, m["input_len"], sf + ".model.input_len", workload::LengthRole::kInput);
      if (!m["output_len"]) rd.fail(m, sf + ".model.output_len", "missing (max_tokens, a length spec)");
      step.output_len = length(rd, m["output_len"], sf + ".model.output_len", workload::LengthRole::kOutput);
    } else if (const YAML::Node tl = s["tool"]) {
      step.kind = StepSpec::Kind::kTool;
      if (tl.IsMap()) {
        rd.only_keys(tl, sf + ".tool", {"name", "arguments"});
        if (!tl["name"]) rd.fail(tl, sf + ".tool.name", "missing (the tool's name)");
        if (const YAML::Node args = tl["arguments"]) {
          step.arguments = yaml_to_json(args, rd, sf + ".tool.arguments");
          if (!step.arguments->is_object()) rd.fail(args, sf + ".tool.arguments", "expected a mapping");
          std::vector<std::string> texts;
          strings_of(*step.arguments, texts);
          for (const auto& text : texts)
            check_template(rd, args, sf + ".tool.arguments", text, known, expected);
        }
      }
      // (yaml-cpp's Node::operator= writes through to the document: no node variable is reassigned here.)
      step.tool = tl.IsMap() ? tool_index(tl["name"], sf + ".tool.name") : tool_index(tl, sf + ".tool");
      if (step.arguments) {
        std::vector<std::string> texts;
        strings_of(*step.arguments, texts);
        bool templated = false;
        for (const auto& text : texts) templated |= text.find("{{") != std::string::npos;
        const auto& tool = catalog.tools[step.tool];
        if (!templated) {
          const auto why = tool.parameters_checker->violations(*step.arguments, 1);
          if (!why.empty())
            rd.fail(
                tl["arguments"], sf + ".tool.arguments",
                fmt::format("not valid for the parameters of {}: {}", quote_input(tool.name), why.front()));
        }
      }
    } else {
      step.kind = StepSpec::Kind::kRetrieve;
      const YAML::Node r = s["retrieve"];
      rd.only_keys(r, sf + ".retrieve", {"query", "top_k", "tool"});
      if (!r["query"]) rd.fail(r, sf + ".retrieve.query", "missing (the search query, a template)");
      step.query = rd.string(r["query"], sf + ".retrieve.query");
      check_template(rd, r["query"], sf + ".retrieve.query", step.query, known, expected);
      if (r["top_k"])
        step.top_k = static_cast<std::uint32_t>(rd.whole(r["top_k"], sf + ".retrieve.top_k", 1, 50));
      if (r["tool"]) {
        step.tool = tool_index(r["tool"], sf + ".retrieve.tool");
        if (catalog.tools[step.tool].kind != ToolSpec::Kind::kSearch)
          rd.fail(r["tool"], sf + ".retrieve.tool", "expected a tool of kind search");
      } else {
        step.tool = std::numeric_limits<std::uint32_t>::max();  // the first search tool, or the built-in one
        for (std::uint32_t k = 0; k < catalog.tools.size(); ++k)
          if (catalog.tools[k].kind == ToolSpec::Kind::kSearch) {
            step.tool = k;
            break;
          }
      }
    }
    if (const YAML::Node c = s["cite"]) {
      if (!c.IsSequence() || c.size() == 0) rd.fail(c, sf + ".cite", "expected a list of retrieve steps");
      if (step.kind != StepSpec::Kind::kModel) rd.fail(c, sf + ".cite", "only a model step's answer cites");
      for (std::size_t j = 0; j < c.size(); ++j) {
        const std::string cf = fmt::format("{}.cite[{}]", sf, j);
        const std::uint32_t k = step_index(c[j], cf);
        if (t.steps[k].kind != StepSpec::Kind::kRetrieve && !steps[k]["retrieve"])
          rd.fail(c[j], cf, fmt::format("{} is not a retrieve step", quote_input(t.steps[k].id)));
        if (!ancestor[i][k])
          rd.fail(c[j], cf,
                  fmt::format("{} does not come before this step (list it in after)",
                              quote_input(t.steps[k].id)));
        step.cite.push_back(k);
      }
    }
    if (const YAML::Node o = s["output_schema"]) {
      if (step.kind != StepSpec::Kind::kModel)
        rd.fail(o, sf + ".output_schema", "only a model step's answer has one");
      step.output_schema = yaml_to_json(o, rd, sf + ".output_schema");
      step.output_checker = compile(rd, o, *step.output_schema, sf + ".output_schema");
    }
    if (const YAML::Node jn = s["judge"]) {
      if (step.kind != StepSpec::Kind::kModel)
        rd.fail(jn, sf + ".judge", "only a model step's answer is judged");
      step.judge = judge_field(rd, jn, sf + ".judge");
    }
  }
  return t;
}

std::string_view default_judge_rubric() {
  return "You grade an assistant's answer to a request. Score it from 1 to 5: 5 when it does what the "
         "request asks, completely, and every claim in it is supported by the material given in the "
         "request; 4 when it does so with small gaps; 3 when it answers part of the request; 2 when it "
         "barely addresses it; 1 when it does not answer it or contradicts the material. Reply with a "
         "JSON object {\"score\": N, \"reason\": \"one sentence\"} and nothing else.";
}

const nlohmann::json& judge_verdict_schema() {
  static const nlohmann::json schema = {
      {"type", "object"},
      {"properties",
       {{"score", {{"type", "integer"}, {"minimum", 1}, {"maximum", 5}}}, {"reason", {{"type", "string"}}}}},
      {"required", {"score", "reason"}},
      {"additionalProperties", false}};
  return schema;
}

}  // namespace tokenscope::bench
