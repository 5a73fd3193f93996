// libFuzzer target: OpenAI request bodies (completions, chat, responses, embeddings,
// rerank, tokenize).
// Every input is accepted with a consistent request or refused with an error
// that names a status; nothing else may happen.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "serve/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenscope::serve;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const ParseContext ctx{{"m", "alias"}, 4096, 16};
  for (Api api : {Api::kCompletions, Api::kChat, Api::kResponses}) {
    const auto r = parse_generation_request(api, body, ctx);
    if (const auto* req = std::get_if<GenerationRequest>(&r)) {
      if (req->prompts.empty() || req->max_tokens < 1) __builtin_trap();
      for (const auto& p : req->prompts)
        if (p.empty() || p.size() + req->max_tokens > ctx.max_model_len) __builtin_trap();
      if (req->min_tokens > req->max_tokens) __builtin_trap();
      // Tool calls and JSON answers planned from the request's schemas, under every fault.
      if (!req->tools.tools.empty() || req->format.kind != OutputFormat::Kind::kText) {
        for (const FaultKind f : {FaultKind::kNone, FaultKind::kWrongTool, FaultKind::kInvalidArguments,
                                  FaultKind::kMalformedJson}) {
          try {
            const auto plan = plan_output(req->tools, req->format, {}, size, 1, f);
            if (!plan) continue;
            if (plan->tokens != tokenscope::tokenizers::tokenize(plan->text) ||
                plan->ends.size() != plan->tokens.size())
              __builtin_trap();
            for (const auto& c : plan->calls)
              if (c.args_end > plan->text.size() ||
                  plan->text.compare(c.args_begin, c.arguments.size(), c.arguments) != 0)
                __builtin_trap();
          } catch (const tokenscope::UsageError&) {
            // a schema no drawn value satisfies
          }
        }
      }
    } else {
      const auto& e = std::get<ApiError>(r);
      if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
      (void)error_body(e);
    }
  }
  for (Api api : {Api::kEmbeddings, Api::kRerank}) {
    const auto r = parse_pooling_request(api, body, ctx);
    if (const auto* req = std::get_if<GenerationRequest>(&r)) {
      if (req->prompts.empty() || req->prompts.size() > 2048 || req->max_tokens != 1 || req->stream)
        __builtin_trap();
      for (const auto& p : req->prompts)
        if (p.size() >= ctx.max_model_len) __builtin_trap();
      if (req->dimensions < 1 || req->dimensions > kEmbeddingDim) __builtin_trap();
      if (req->prompts.size() <= 16) {  // formatting 2048 vectors would only slow the search
        std::vector<std::uint64_t> hashes;
        for (const auto& p : req->prompts) hashes.push_back(pooling_input_hash(p));
        (void)pooling_response(*req, hashes, "id", 0, "m", 1);
      }
    } else {
      const auto& e = std::get<ApiError>(r);
      if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
    }
  }
  (void)parse_tokenize_request(body, ctx);
  return 0;
}
