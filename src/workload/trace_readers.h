// Readers of request traces (formats in docs/workloads.md):
//  * Azure LLM inference 2023 CSV: header TIMESTAMP,ContextTokens,GeneratedTokens;
//  * Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids
//    (512-token blocks);
//  * ShareGPT JSON: an array of {"conversations": [{"from", "value"}...]};
//    the first human turn is the prompt, its length by tokenizers/builtin.h; there is
//    no output length (the caller supplies a distribution);
//  * native JSONL: tokenscope's own format.
// Errors raise InputError naming file, line, field and what was expected;
// with skip_bad_rows a bad row is skipped and counted in read_report instead.
// Arrival times are offsets from the first row (trace time, unscaled).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "workload/workload.h"

namespace tokenscope::workload {

enum class TraceFormat { kAuto, kAzure, kMooncake, kShareGpt, kNative };

// Parses "auto", "azure", "mooncake", "sharegpt", "native"; throws UsageError.
TraceFormat parse_trace_format(std::string_view name);
std::string_view trace_format_name(TraceFormat f);

struct TraceReadOptions {
  TraceFormat format = TraceFormat::kAuto;
  bool skip_bad_rows = false;
  std::uint64_t max_rows = 0;  // 0: all rows
};

// Reads a trace file. Throws InputError (bad content) or UsageError (cannot open).
Workload read_trace(const std::string& path, const TraceReadOptions& options);

// The same parsers over text in memory; `name` stands for the file in messages.
Workload parse_trace_text(std::string_view text, const std::string& name, TraceFormat format,
                          const TraceReadOptions& options);

// Guesses the format from the file name and its first bytes.
TraceFormat detect_trace_format(const std::string& path, std::string_view head);

// "2023-11-16 18:15:46.6805900" -> nanoseconds since the Unix epoch (UTC).
// Returns false when the text is not such a timestamp.
bool parse_civil_timestamp(std::string_view text, std::int64_t& ns_since_epoch);

}  // namespace tokenscope::workload
