// The nesting bound on JSON from outside (docs/reliability.md "Bounds"):
// every document tokenscope parses from a file, a server or a client is
// scanned for its depth before it is parsed. nlohmann::json parses
// iteratively, but copying, comparing and printing a value recurse once per
// level, as do the readers that walk one: a run.json whose `server` is nested
// 200,000 deep (200 KB) crashed `check --baseline auto` on the stack. No file
// tokenscope writes, no OpenAI request or answer and no trace in use is
// nested more than a dozen levels; JSON Schemas in requests stay far below
// the bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tokenscope {

inline constexpr std::size_t kMaxJsonDepth = 256;

// The byte offset of the bracket that opens level max_depth + 1 of `text`
// (arrays and objects; brackets inside strings do not count), or npos when
// no value is nested deeper than max_depth. Linear, no allocation; it does
// not validate the rest of the syntax (the parser after it does).
std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth = kMaxJsonDepth);

// Throws InputError(file, line of the offending bracket + first_line - 1, "",
// "JSON nested deeper than N levels ...") when json_too_deep_at finds one.
// `first_line` is the line number of text's first line (a line of a JSON Lines
// file: that line).
void require_json_depth(std::string_view text, const std::string& file, std::size_t first_line = 1,
                        std::size_t max_depth = kMaxJsonDepth);

}  // namespace tokenscope
