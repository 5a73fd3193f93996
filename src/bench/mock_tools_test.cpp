#include "bench/mock_tools.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>

#include "bench/bench_workload.h"
#include "net/http_fetch.h"

namespace tokenscope::bench {
namespace {

TaskCatalog catalog_of(const std::string& tools_yaml) {
  const YAML::Node root = YAML::Load("num_requests: 1\n" + tools_yaml);
  return parse_task_catalog(root, yaml::Fields("tools.yaml"));
}

TEST(DocumentStore, DocumentsAreSeededAndSearchFindsTheirTopic) {
  DocumentStoreSpec spec;
  spec.count = 500;
  spec.tokens = workload::parse_length_spec("uniform:50:200", "t", workload::LengthRole::kInput);
  const DocumentStore a(spec, 7), b(spec, 7), c(spec, 8);
  EXPECT_EQ(a.text(42), b.text(42));
  EXPECT_NE(a.text(42), c.text(42));
  // A query made of document 42's first words finds it first.
  const std::string text = a.text(42);
  const std::string query = text.substr(0, text.find(' ', text.find(' ', text.find(' ') + 1) + 1));
  const auto hits = a.search(query, 5);
  ASSERT_EQ(hits.size(), 5u);
  EXPECT_EQ(std::set<std::uint32_t>(hits.begin(), hits.end()).size(), 5u);
  EXPECT_EQ(hits[0], 42u) << query;
  EXPECT_EQ(a.search(query, 5), hits);             // deterministic
  EXPECT_EQ(a.search("zzzz qqqq", 3).size(), 3u);  // nothing matches: still three
  EXPECT_EQ(a.search("x", 900).size(), 500u);      // at most the store
  EXPECT_EQ(a.id(3), "doc-3");
}

TEST(Calculator, EvaluatesArithmeticAndRefusesTheRest) {
  EXPECT_EQ(evaluate_expression("2 * (3 + 4)"), 14.0);
  EXPECT_EQ(evaluate_expression("-(2.5) + 10 / 4"), 0.0);
  EXPECT_EQ(evaluate_expression("1 - 2 - 3"), -4.0);  // left to right
  std::string why;
  EXPECT_FALSE(evaluate_expression("1 / (2 - 2)", &why));
  EXPECT_NE(why.find("division by zero"), std::string::npos);
  EXPECT_FALSE(evaluate_expression("2 +", &why));
  EXPECT_FALSE(evaluate_expression("(1", &why));
  EXPECT_NE(why.find("without its ')'"), std::string::npos) << why;
  EXPECT_FALSE(evaluate_expression("abs(2)", &why));
  EXPECT_FALSE(evaluate_expression(std::string(100, '(') + "1" + std::string(100, ')'), &why));
  EXPECT_NE(why.find("deeper than 64"), std::string::npos) << why;
  EXPECT_FALSE(evaluate_expression(std::string(100, '-') + "1", &why));
}

const char* kTools = R"(tools:
  - name: search
    kind: search
    parameters: {type: object, properties: {query: {type: string}, top_k: {type: integer}}, required: [query]}
  - name: calc
    kind: calculator
    parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
  - name: weather
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    response: {type: object, properties: {temp_c: {type: number, minimum: -50, maximum: 50}}, required: [temp_c]}
    payload_tokens: fixed:20
    errors: {http_5xx: 0.2, timeout: 0.1, malformed: 0.1}
)";

// What the mock tools answer, and the injected errors counted exactly as
// they happened.
TEST(MockTools, AnswersByKindAndCountsWhatItInjects) {
  const TaskCatalog catalog = catalog_of(kTools);
  MockToolServer tools(catalog, 3);
  auto a = tools.answer("calc", R"({"expression": "6 * 7"})");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(nlohmann::json::parse(a.body)["value"], 42.0);
  a = tools.answer("search", R"({"query": "the river", "top_k": 4})");
  ASSERT_EQ(a.status, 200);
  const auto docs = nlohmann::json::parse(a.body)["documents"];
  ASSERT_EQ(docs.size(), 4u);
  EXPECT_EQ(docs[0]["id"].get<std::string>().rfind("doc-", 0), 0u);
  EXPECT_FALSE(docs[0]["text"].get<std::string>().empty());
  EXPECT_EQ(tools.answer("calc", R"({"expr": "1"})").status, 400);  // the schema refuses it
  EXPECT_EQ(tools.answer("calc", "[1]").status, 400);
  // Nesting past the bound is refused before nlohmann's parser recurses into it.
  EXPECT_EQ(tools.answer("calc", std::string(200000, '[')).status, 400);
  EXPECT_EQ(tools.answer("nope", "{}").status, 404);
  int ok = 0, e500 = 0, held = 0, malformed = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto w = tools.answer("weather", R"({"city": "Oslo"})");
    if (!w.delay) {
      ++held;
    } else if (w.status == 500) {
      ++e500;
    } else if (!nlohmann::json::accept(w.body)) {
      ++malformed;
    } else {
      ++ok;
      const auto j = nlohmann::json::parse(w.body);
      EXPECT_TRUE(catalog.tools[2].response_checker->valid(j)) << w.body;
      EXPECT_TRUE(j.contains("payload"));
    }
  }
  const auto counts = tools.injected().at("weather");
  EXPECT_EQ(counts.calls, 1000u);
  EXPECT_EQ(counts.http_5xx, static_cast<std::uint64_t>(e500));
  EXPECT_EQ(counts.timeout, static_cast<std::uint64_t>(held));
  EXPECT_EQ(counts.malformed, static_cast<std::uint64_t>(malformed));
  EXPECT_NEAR(e500, 200, 60);  // the rates are drawn: 5 sigma
  EXPECT_NEAR(held, 100, 50);
  EXPECT_EQ(tools.injected().at("calc").invalid_arguments, 3u);
}

// Over real HTTP on loopback; a held answer ends (reset) when the server stops.
TEST(MockTools, ServeOverLoopbackAndStopWithAnswersHeld) {
  const TaskCatalog catalog = catalog_of(R"(tools:
  - name: calc
    kind: calculator
    parameters: {type: object, properties: {expression: {type: string}}, required: [expression]}
    latency_ms: fixed:30
  - name: hang
    parameters: {type: object}
    errors: {timeout: 1}
)");
  MockToolServer tools(catalog, 1);
  const auto endpoint = net::Endpoint::parse_url(fmt::format("http://127.0.0.1:{}", tools.port()));
  net::FetchRequest req;
  req.method = "POST";
  req.path = "/tools/calc";
  req.body = R"({"expression": "1 + 2"})";
  const auto r = net::fetch(endpoint, {}, req);
  ASSERT_TRUE(r.ok()) << r.error << r.status;
  EXPECT_EQ(nlohmann::json::parse(r.body)["value"], 3.0);
  req.path = "/tools/hang";
  req.body = "{}";
  req.timeout_s = 0.3;
  const auto h = net::fetch(endpoint, {}, req);
  EXPECT_FALSE(h.error.empty());  // no answer before the timeout
  EXPECT_EQ(tools.injected().at("hang").timeout, 1u);
  tools.stop();  // with the held answer: returns
}

}  // namespace
}  // namespace tokenscope::bench
