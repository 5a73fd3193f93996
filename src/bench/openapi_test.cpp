#include "bench/openapi.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/bench_workload.h"
#include "bench/mock_tools.h"
#include "core/error.h"

namespace tokenscope::bench {
namespace {

const char* kStore = R"(openapi: 3.0.3
info: {title: store, version: "1"}
paths:
  /orders/{order_id}:
    parameters:
      - {name: order_id, in: path, required: true, schema: {type: string, pattern: "^[0-9]{6}$"}}
    get:
      operationId: getOrder
      summary: Look up an order
      parameters:
        - {name: verbose, in: query, schema: {type: boolean}}
      responses:
        "200":
          description: the order
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Order"}
  /orders:
    post:
      description: Place an order
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              properties: {sku: {type: string}, quantity: {type: integer, minimum: 1}}
              required: [sku, quantity]
      responses:
        "201":
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Order"}
  /health:
    get:
      responses: {"200": {description: ok}}
components:
  schemas:
    Order:
      type: object
      properties:
        id: {type: string}
        status: {enum: [pending, shipped]}
        items: {type: array, items: {$ref: "#/components/schemas/Item"}}
      required: [id, status]
    Item:
      type: object
      properties: {sku: {type: string}, next: {$ref: "#/components/schemas/Item"}}
)";

TEST(OpenApi, OperationsBecomeToolsWithTheirSchemas) {
  const auto tools = read_openapi_tools(kStore, "store.yaml");
  ASSERT_EQ(tools.size(), 3u);
  const ToolSpec& get = tools[0];
  EXPECT_EQ(get.name, "getOrder");
  EXPECT_EQ(get.description, "Look up an order");
  EXPECT_EQ(get.kind, ToolSpec::Kind::kJsonApi);
  // Path parameters (of the path item) are required; the query one is not.
  EXPECT_TRUE(get.parameters_checker->valid(nlohmann::json{{"order_id", "123456"}}));
  EXPECT_TRUE(get.parameters_checker->valid(nlohmann::json{{"order_id", "123456"}, {"verbose", true}}));
  EXPECT_FALSE(get.parameters_checker->valid(nlohmann::json{{"order_id", "12"}}));
  EXPECT_FALSE(get.parameters_checker->valid(nlohmann::json::object()));
  // The response schema, references inlined (the Item cycle cut at the depth bound).
  EXPECT_TRUE(get.response_checker->valid(nlohmann::json{{"id", "a"}, {"status", "shipped"}}));
  EXPECT_FALSE(get.response_checker->valid(nlohmann::json{{"id", "a"}, {"status", "lost"}}));
  EXPECT_EQ(get.response.dump().find("$ref"), std::string::npos);
  // No operationId: a name from the method and the path; the JSON body's properties are the parameters.
  const ToolSpec& post = tools[1];
  EXPECT_EQ(post.name, "post_orders");
  EXPECT_EQ(post.description, "Place an order");
  EXPECT_TRUE(post.parameters_checker->valid(nlohmann::json{{"sku", "x"}, {"quantity", 2}}));
  EXPECT_FALSE(post.parameters_checker->valid(nlohmann::json{{"sku", "x"}}));
  EXPECT_EQ(tools[2].name, "get_health");
  EXPECT_EQ(tools[2].response, nlohmann::json({{"type", "object"}}));
  // The mock answers from the response schema.
  TaskCatalog catalog;
  catalog.tools = tools;
  MockToolServer mock(catalog, 1);
  const auto a = mock.answer("getOrder", R"({"order_id": "654321"})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_TRUE(get.response_checker->valid(nlohmann::json::parse(a.body))) << a.body;
  EXPECT_EQ(mock.answer("getOrder", R"({"order_id": "x"})").status, 400);
}

TEST(OpenApi, BadDocumentsAreRefusedNamingThePlace) {
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"swagger: '2.0'\npaths: {}\n", "Swagger 2 is not read"},
           {"openapi: 3.0.0\n", "field 'paths'"},
           {"openapi: 3.0.0\npaths: {/a: {get: {parameters: [{in: query}]}}}\n",
            "expected a parameter with a name"},
           {"openapi: 3.0.0\npaths: {/a: {get: {responses: {'200': {content: {application/json: {schema: "
            "{$ref: 'other.yaml#/X'}}}}}}}}\n",
            "is not a reference within this document"},
           {"openapi: 3.0.0\npaths: {/a: {get: {responses: {'200': {content: {application/json: {schema: "
            "{$ref: '#/components/schemas/Missing'}}}}}}}}\n",
            "paths./a.get"},
           {"openapi: 3.0.0\npaths: {/a: {summary: nothing}}\n", "no operation"},
           {"openapi: 3.0.0\npaths: {/a: {get: {parameters: [{name: n, schema: {type: 7}}]}}}\n",
            "not a JSON Schema"},
           {"[1, 2", "malformed YAML"},
       }) {
    try {
      read_openapi_tools(text, "api.yaml");
      ADD_FAILURE() << "accepted " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("api.yaml"), std::string::npos) << e.what();
    }
  }
  // References that double at every level are refused, not expanded 2^32 times.
  std::string bomb =
      "openapi: 3.0.0\npaths: {/a: {get: {responses: {'200': {content: {application/json: {schema: "
      "{$ref: '#/components/schemas/S0'}}}}}}}}\ncomponents:\n  schemas:\n";
  for (int i = 0; i < 30; ++i)
    bomb += fmt::format(
        "    S{}: {{type: object, properties: {{a: {{$ref: '#/components/schemas/S{}'}}, b: {{$ref: "
        "'#/components/schemas/S{}'}}}}}}\n",
        i, i + 1, i + 1);
  bomb += "    S30: {type: string}\n";
  try {
    read_openapi_tools(bomb, "bomb.yaml");
    ADD_FAILURE() << "the reference bomb was expanded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
}

// A workload file names the document beside it; `operations` keeps some.
TEST(OpenApi, WorkloadFilesDeclareToolsFromADocument) {
  const auto dir = std::filesystem::temp_directory_path() / ("openapi-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "store.yaml") << kStore;
  std::ofstream(dir / "w.yaml") << R"(num_requests: 2
tools:
  - {openapi: store.yaml, operations: [getOrder, post_orders], latency_ms: fixed:5, errors: {http_5xx: 0.1}}
classes:
  - name: agent
    task:
      mode: model-driven
      tools: [getOrder, post_orders]
      prompt: "{{input}}"
      output_len: fixed:50
)";
  const auto b = load_workload_file((dir / "w.yaml").string(), 1);
  ASSERT_EQ(b.tasks->catalog.tools.size(), 2u);
  EXPECT_EQ(b.tasks->catalog.tools[0].error_5xx, 0.1);
  EXPECT_TRUE(b.tasks->catalog.tools[1].latency_ms.has_value());
  std::ofstream(dir / "bad.yaml")
      << "num_requests: 1\ntools:\n  - {openapi: store.yaml, operations: [nope]}\n"
         "classes:\n  - {name: c, input_len: fixed:1, output_len: fixed:1}\n";
  try {
    load_workload_file((dir / "bad.yaml").string(), 1);
    ADD_FAILURE() << "accepted an unknown operation";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no operation 'nope'"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tokenscope::bench
