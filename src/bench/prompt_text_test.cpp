#include "bench/prompt_text.h"

#include <gtest/gtest.h>

#include "workload/synthetic.h"

namespace tokenscope::bench {
namespace {

TEST(PromptText, RetokenizesToTheWorkloadTokens) {
  workload::Workload w;
  w.hash_pool = {11, 12, 11, 13};
  workload::Request a, b;
  a.source = b.source = workload::PromptSource::kHashIds;
  a.source_begin = 0;
  b.source_begin = 2;
  a.source_count = b.source_count = 2;
  a.input_tokens = 700;
  b.input_tokens = 900;
  for (const auto* r : {&a, &b}) {
    std::vector<tokenizers::TokenId> expected;
    workload::append_prompt_tokens(w, *r, expected);
    EXPECT_EQ(tokenizers::tokenize(prompt_text(w, *r)), expected);
  }
  // Shared leading hash ids give a shared leading text.
  const std::string ta = prompt_text(w, a), tb = prompt_text(w, b);
  std::size_t common = 0;
  while (common < ta.size() && common < tb.size() && ta[common] == tb[common]) ++common;
  const auto shared_tokens = tokenizers::tokenize(ta.substr(0, common)).size();
  EXPECT_GE(shared_tokens, 511u);
  EXPECT_LE(shared_tokens, 513u);
}

TEST(PromptText, SyntheticPrefixGroupsAndTextPrompts) {
  workload::SyntheticSettings s;
  s.num_requests = 20;
  s.input = workload::parse_length_spec("fixed:200", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("fixed:5", "--output-len", workload::LengthRole::kOutput);
  s.prefix_groups = 1;
  s.prefix_tokens = 120;
  const auto w = workload::make_synthetic(s, workload::WorkloadSeeds::from_master(2));
  for (const auto& r : w.requests) EXPECT_EQ(tokenizers::tokenize(prompt_text(w, r)).size(), 200u);
  workload::Workload t;
  t.prompts = {"Hello, World!"};
  workload::Request r;
  r.source = workload::PromptSource::kText;
  EXPECT_EQ(prompt_text(t, r), "Hello, World!");
}

}  // namespace
}  // namespace tokenscope::bench
