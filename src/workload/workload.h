// A workload: the requests of a run, each with its arrival time, lengths,
// tenant and the source of its prompt tokens. Readers (trace_readers.h) and
// the synthetic generator (synthetic.h) produce one; arrival processes
// (arrivals.h) set or rewrite its timing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/random.h"
#include "tokenizers/builtin.h"

namespace tokenscope::workload {

enum class PromptSource : std::uint8_t {
  kUnique,       // tokens unique to the request (no prefix sharing)
  kHashIds,      // Mooncake-style block hash ids: hash_pool[begin, begin+count)
  kText,         // prompt text: prompts[begin]
  kPrefixGroup,  // group `begin` shares its first `count` tokens; the rest is unique
};

struct Request {
  std::uint64_t id = 0;
  Nanos arrival_ns = 0;
  std::uint32_t input_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::uint32_t tenant = 0;   // index into Workload::tenants
  std::int32_t priority = 0;  // lower runs first under the priority policy
  PromptSource source = PromptSource::kUnique;
  std::uint16_t task_class = 0;  // index into Workload::classes
  std::uint32_t source_begin = 0;
  std::uint32_t source_count = 0;
  std::uint32_t trace_line = 0;  // 1-based line of its trace row; 0: not from a trace line
  // Multimodal inputs after the text (workload files' classes `images`,
  // `audio`): this many images of image_width x image_height pixels, and an
  // audio clip of audio_ms milliseconds (0: none).
  std::uint8_t images = 0;
  std::uint16_t image_width = 0, image_height = 0;
  std::uint32_t audio_ms = 0;
  // The model it is sent to: Workload::models[model - 1]; 0: the run's model.
  std::uint16_t model = 0;
};

struct ReadReport {
  std::uint64_t rows_read = 0;
  std::uint64_t rows_skipped = 0;
  std::vector<std::string> skipped_examples;  // the first few messages
};

struct Workload {
  std::vector<Request> requests;  // ordered by arrival time, then id
  std::vector<std::string> prompts;
  std::vector<std::uint64_t> hash_pool;
  std::uint32_t hash_block_tokens = 512;
  std::vector<std::string> tenants = {"default"};
  std::vector<std::string> classes = {""};  // task classes; "" is the unnamed default
  // Models (or LoRA adapters) of a model mix, named by Request::model; empty: none.
  std::vector<std::string> models;
  std::uint64_t token_seed = 0;  // seeds unique prompt tokens
  bool has_timestamps = false;   // arrival times came from the trace
  std::string description;
  // The trace file it was read from (empty: synthetic), and the names of the
  // fields that give a request's prompt there, as a count and as text.
  std::string trace_file;
  std::string length_field, text_field;
  ReadReport read_report;
};

// The token of a hash-id block at an offset: each 512-token block is derived
// deterministically from its id alone, so equal leading ids give equal
// leading tokens, and different ids give different tokens.
tokenizers::TokenId hash_block_token(std::uint64_t hash_id, std::uint32_t offset);

// Appends the request's prompt tokens (exactly input_tokens of them) to out.
void append_prompt_tokens(const Workload& w, const Request& r, std::vector<tokenizers::TokenId>& out);

inline constexpr std::uint64_t kTokenKeyStep = 0x9e3779b97f4a7c15ULL;
// A generated prompt (any source but kText) as runs of keys: run(key, from,
// to) for each, in order, whose tokens are
// tokenizers::spaced_token_from_key(key + i * kTokenKeyStep) for i in
// [from, to). append_prompt_tokens appends those tokens, the first with its
// space taken off; bench builds the prompt's text from the same runs.
template <class Run>
void for_each_token_run(const Workload& w, const Request& r, Run&& run) {
  const std::uint64_t unique_key = hash_combine64(w.token_seed, r.id);
  switch (r.source) {
    case PromptSource::kUnique:
      run(unique_key, 0u, r.input_tokens);
      return;
    case PromptSource::kPrefixGroup: {
      const std::uint32_t shared = std::min(r.source_count, r.input_tokens);
      run(hash_combine64(w.token_seed ^ 0x5052454649584752ULL, r.source_begin), 0u, shared);
      run(unique_key, shared, r.input_tokens);
      return;
    }
    case PromptSource::kHashIds: {
      std::uint32_t done = 0;
      for (std::uint32_t b = 0; b < r.source_count && done < r.input_tokens; ++b) {
        const std::uint32_t take = std::min(w.hash_block_tokens, r.input_tokens - done);
        run(mix64(w.hash_pool[r.source_begin + b] ^ 0x6861736869647321ULL), 0u, take);
        done += take;
      }
      // Fewer ids than tokens: the tail is unique to the request.
      if (done < r.input_tokens) run(unique_key, done, r.input_tokens);
      return;
    }
    case PromptSource::kText:
      return;
  }
}

// Where a request's prompt comes from, for messages about it: the message
// prefix "FILE:LINE: field 'NAME'" of a trace row (as InputError writes it),
// or "" when the request is not from a trace.
std::string prompt_origin(const Workload& w, const Request& r);

// Sorts requests by (arrival, id) and renumbers nothing.
void sort_by_arrival(Workload& w);

}  // namespace tokenscope::workload
