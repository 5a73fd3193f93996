// Tools declared by an OpenAPI 3 document (a workload file's `tools:
// - openapi: FILE`, docs/tasks.md): every operation becomes a tool, a
// function the model may call, answered by the mock tools from the
// operation's response schema.
//
//   name         operationId, or METHOD_PATH with every other character
//                made '_' (at most 64 characters; made unique with _2, _3)
//   description  the operation's summary, else its description
//   parameters   an object schema: one property per parameter (path,
//                query, header, cookie; its `schema`, a string when it has
//                none; `required` as declared, path parameters always),
//                and the JSON request body's properties (an object schema)
//                or the body itself as "body"
//   response     the JSON schema of the first of 200, 201, 202, 2XX,
//                default that has one; an object otherwise
//
// Local references (#/components/...) are inlined, 32 levels deep at most
// (deeper, and in cycles, a reference becomes {}: any value); references
// to other documents are refused. Bad documents are InputErrors naming the
// document, the line and the place (e.g. paths./orders/{id}.get).
#pragma once

#include <string>
#include <vector>

#include "bench/task_graph.h"

namespace tokenscope::bench {

// OpenAPI documents are files of at most this many bytes.
inline constexpr std::uint64_t kMaxOpenApiBytes = std::uint64_t{16} << 20;

// The tools of an OpenAPI 3.x document (YAML or JSON text); at most
// kMaxTools operations.
std::vector<ToolSpec> read_openapi_tools(const std::string& text, const std::string& file);

}  // namespace tokenscope::bench
