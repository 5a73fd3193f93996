#include "serve/tools.h"

#include <fmt/format.h>

#include "core/random.h"

#include <algorithm>

namespace tokenscope::serve {

bool valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

std::string render_tool_call(std::string_view name, std::string_view arguments) {
  std::string out = "<tool_call>\n{\"name\":";
  out += nlohmann::json(std::string(name)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out += ",\"arguments\":";
  out += arguments;
  out += "}\n</tool_call>";
  return out;
}

void collect_citations(std::string_view text, std::vector<std::string>& out) {
  std::size_t at = 0;
  while (out.size() < 256 && (at = text.find("[doc-", at)) != std::string_view::npos) {
    std::size_t end = at + 5;
    while (end < text.size() && end - at < 16 && text[end] >= '0' && text[end] <= '9') ++end;
    if (end > at + 5 && end < text.size() && text[end] == ']') {
      std::string id(text.substr(at + 1, end - at - 1));
      if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(std::move(id));
    }
    at = end;
  }
}

std::optional<OutputPlan> plan_citations(const std::vector<std::string>& documents, std::uint32_t tokens,
                                         double cite_prob, std::uint64_t key) {
  Rng rng(hash_combine64(key, 0x63697465ULL));
  std::vector<std::string> cited;
  for (const auto& d : documents)
    if (rng.uniform01() < cite_prob) cited.push_back(d);
  if (cited.empty() || tokens == 0) return std::nullopt;
  // The citations that fit, then words spread between them.
  std::uint32_t cite_tokens = 0;
  std::size_t fit = 0;
  for (; fit < cited.size(); ++fit) {
    const auto n = static_cast<std::uint32_t>(tokenizers::count_tokens(" [" + cited[fit] + "]"));
    if (cite_tokens + n > tokens) break;
    cite_tokens += n;
  }
  cited.resize(fit);
  if (cited.empty()) return std::nullopt;
  const std::uint32_t word_tokens = tokens - cite_tokens;
  const std::uint32_t every = word_tokens / static_cast<std::uint32_t>(cited.size() + 1);
  OutputPlan plan;
  std::size_t next = 0;
  std::uint32_t words = 0, count = 0;
  while (count < tokens) {
    // Each piece tokenizes alone: a citation starts with a space and a bracket, a word with a space.
    std::string piece;
    if (next < cited.size() && (words >= every * (next + 1) || words >= word_tokens)) {
      piece = " [" + cited[next++] + "]";
    } else {
      piece = tokenizers::piece_text(tokenizers::spaced_token_from_key(rng.next_u64())).value_or(" a");
      ++words;
    }
    count += static_cast<std::uint32_t>(tokenizers::count_tokens(piece));
    plan.text += piece;
  }
  tokenizers::tokenize(plan.text, plan.tokens, &plan.ends);
  if (plan.tokens.size() > tokens && tokens > 0) {  // the last citation ran past the length: cut there
    plan.text.resize(plan.ends[tokens - 1]);
    plan.tokens.resize(tokens);
    plan.ends.resize(tokens);
  }
  return plan;
}

std::optional<nlohmann::json> violating_instance(const JsonSchema& checker, const nlohmann::json& valid) {
  std::vector<nlohmann::json> candidates;
  if (valid.is_object()) {
    // A member left out (a required one makes it invalid).
    for (auto it = valid.begin(); it != valid.end(); ++it) {
      nlohmann::json c = valid;
      c.erase(it.key());
      candidates.push_back(std::move(c));
    }
    // A member of the wrong type.
    for (auto it = valid.begin(); it != valid.end(); ++it) {
      nlohmann::json c = valid;
      c[it.key()] =
          it->is_string() ? nlohmann::json(12345) : nlohmann::json("not-a-" + std::string(it->type_name()));
      candidates.push_back(std::move(c));
    }
    // A member the schema may not allow.
    nlohmann::json extra = valid;
    extra["unexpected_argument"] = true;
    candidates.push_back(std::move(extra));
  }
  for (const auto& other : {nlohmann::json::array(), nlohmann::json("x"), nlohmann::json(0),
                            nlohmann::json(nullptr), nlohmann::json::object(), nlohmann::json(true)})
    candidates.push_back(other);
  for (auto& c : candidates)
    if (!checker.valid(c)) return std::move(c);
  return std::nullopt;
}

namespace {

std::string dump(const nlohmann::json& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Not JSON: the first half of the text (and a stray brace when the half
// still parses, as a number's prefix does).
std::string malformed(const std::string& text) {
  std::string out = text.substr(0, std::max<std::size_t>(1, text.size() / 2));
  if (nlohmann::json::accept(out)) out += '}';
  return out;
}

// The generic object of response_format json_object.
const nlohmann::json& json_object_schema() {
  static const nlohmann::json s = {{"type", "object"},
                                   {"properties",
                                    {{"answer", {{"type", "string"}, {"minLength", 8}, {"maxLength", 64}}},
                                     {"confidence", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}}}},
                                   {"required", {"answer"}}};
  return s;
}

void tokenize_plan(OutputPlan& plan) {
  tokenizers::tokenize(plan.text, plan.tokens, &plan.ends);
}

}  // namespace

std::optional<OutputPlan> plan_output(const ToolRequest& tools, const OutputFormat& format,
                                      const ToolPolicy& policy, std::uint64_t key, std::uint64_t id_key,
                                      FaultKind fault) {
  Rng rng(hash_combine64(key, 0x746f6f6c73ULL));
  bool call = false;
  if (!tools.tools.empty()) {
    switch (tools.choice) {
      case ToolRequest::Choice::kNone:
        break;
      case ToolRequest::Choice::kRequired:
      case ToolRequest::Choice::kNamed:
        call = true;
        break;
      case ToolRequest::Choice::kAuto:
        call = tools.rounds < policy.max_rounds && rng.uniform01() < policy.call_prob;
        break;
    }
  }
  OutputPlan plan;
  if (call) {
    std::uint32_t n = 1;
    if (tools.parallel && tools.choice != ToolRequest::Choice::kNamed && policy.max_parallel > 1)
      n = static_cast<std::uint32_t>(rng.uniform_int(1, policy.max_parallel));
    for (std::uint32_t j = 0; j < n; ++j) {
      const ToolDef* tool = nullptr;
      if (tools.choice == ToolRequest::Choice::kNamed) {
        for (const auto& t : tools.tools)
          if (t.name == tools.named) tool = &t;
      }
      if (tool == nullptr) tool = &tools.tools[rng.uniform_int(0, tools.tools.size() - 1)];
      PlannedCall c;
      c.id = fmt::format("chatcmpl-tool-{:016x}{:016x}", mix64(hash_combine64(id_key, 2 * j)),
                         mix64(hash_combine64(id_key, 2 * j + 1)));
      c.name = tool->name;
      nlohmann::json args = draw_instance(tool->parameters, *tool->checker, rng,
                                          fmt::format("the parameters of tool '{}'", tool->name));
      c.arguments = dump(args);
      if (j == 0 && fault == FaultKind::kWrongTool) {
        // A name that is not declared.
        std::string wrong = tool->name + "_v2";
        for (bool clash = true; clash;) {
          clash = false;
          for (const auto& t : tools.tools) clash |= t.name == wrong;
          if (clash) wrong += "x";
        }
        c.name = wrong;
        plan.fault = fault;
      } else if (j == 0 && fault == FaultKind::kInvalidArguments) {
        if (auto bad = violating_instance(*tool->checker, args)) {
          c.arguments = dump(*bad);
          plan.fault = fault;
        }
      } else if (j == 0 && fault == FaultKind::kMalformedJson) {
        c.arguments = malformed(c.arguments);
        plan.fault = fault;
      }
      if (j) plan.text += '\n';
      const std::size_t start = plan.text.size();
      plan.text += render_tool_call(c.name, c.arguments);
      const std::size_t name_json = dump(nlohmann::json(c.name)).size();
      c.name_end = start + std::string_view("<tool_call>\n{\"name\":").size() + name_json;
      c.args_begin = c.name_end + std::string_view(",\"arguments\":").size();
      c.args_end = c.args_begin + c.arguments.size();
      plan.calls.push_back(std::move(c));
    }
    tokenize_plan(plan);
    return plan;
  }
  if (format.kind == OutputFormat::Kind::kText) return std::nullopt;
  nlohmann::json value;
  if (format.kind == OutputFormat::Kind::kJsonSchema) {
    value = draw_instance(format.schema, *format.checker, rng, "response_format.json_schema.schema");
  } else {
    static const JsonSchema object_checker(json_object_schema(), "the json_object schema");
    value = draw_instance(json_object_schema(), object_checker, rng, "response_format");
  }
  plan.text = dump(value);
  if (fault == FaultKind::kInvalidArguments) {
    std::optional<nlohmann::json> bad;
    if (format.kind == OutputFormat::Kind::kJsonSchema)
      bad = violating_instance(*format.checker, value);
    else
      bad = nlohmann::json::array();  // json_object asks for an object
    if (bad) {
      plan.text = dump(*bad);
      plan.fault = fault;
    }
  } else if (fault == FaultKind::kMalformedJson) {
    plan.text = malformed(plan.text);
    plan.fault = fault;
  }
  tokenize_plan(plan);
  return plan;
}

}  // namespace tokenscope::serve
