// Small run directories for the exporters' tests, written by the same code
// that writes real runs (RequestRecord::append_json, append_observation_json).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/record.h"
#include "core/temp_dir.h"
#include "observe/observation.h"

namespace tokenscope::exporters::testing {

using observe::Observation;

using TempDir = tokenscope::TempDir;

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_lines(const std::filesystem::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p, std::ios::binary);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string requests_jsonl(const std::vector<RequestRecord>& records) {
  std::string out;
  for (const auto& r : records) {
    r.append_json(out);
    out += '\n';
  }
  return out;
}

inline std::string samples_jsonl(const std::vector<Observation>& observations) {
  std::string out;
  for (const auto& o : observations) {
    append_observation_json(out, o);
    out += '\n';
  }
  return out;
}

// A streamed request: scheduled at t0, sent `queue` later, first token
// `ttft` after the send, then `tokens` events `gap` apart.
inline RequestRecord streamed(std::uint64_t id, Nanos t0, Nanos queue, Nanos ttft, int tokens, Nanos gap) {
  RequestRecord r;
  r.id = id;
  r.tenant = "tenant-a";
  r.t_sched = t0;
  r.t_send = t0 + queue;
  r.t_headers = r.t_send + ttft / 2;
  for (int i = 0; i < tokens; ++i) {
    r.event_times.push_back(r.t_send + ttft + i * gap);
    r.event_tokens.push_back(1);
  }
  r.t_first_token = tokens > 0 ? r.event_times.front() : -1;
  r.t_last_token = tokens > 0 ? r.event_times.back() : -1;
  r.t_close = (tokens > 0 ? r.t_last_token : r.t_send + ttft) + 1'000;
  r.prompt_tokens = 100 + static_cast<std::int64_t>(id);
  r.output_tokens = tokens;
  r.output_tokens_planned = tokens;
  r.http_status = 200;
  r.response_id = "cmpl-" + std::to_string(id);
  return r;
}

inline nlohmann::json run_json(std::int64_t monotonic_ns, std::int64_t unix_ns,
                               const std::string& model = "llama-3-8b", const std::string& api = "chat") {
  return {{"tool", {{"name", "tokenscope"}, {"version", "0.1.0"}, {"command", "bench"}}},
          {"clock", {{"monotonic_ns", monotonic_ns}, {"unix_ns", unix_ns}}},
          {"settings",
           {{"requested", {{"target", {{"api", api}, {"model", nullptr}}}}},
            {"effective", {{"target", {{"url", "http://127.0.0.1:8123"}, {"model", model}}}}}}}};
}

}  // namespace tokenscope::exporters::testing
