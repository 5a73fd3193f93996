// `tokenscope profile --target URL`: the designed sweep that measures a
// server's step costs from the outside (docs/profile.md). Each cell is a
// closed-loop bench run of identical requests — B users, prompts of exactly
// P tokens, O output tokens, a few waves — so that the server's steps carry
// known shapes: a wave's prompts prefilled together, then B sequences
// decoding over a growing context. The batch sizes run up to the server's
// cap (its own word where it gives one, else past 8 to find it), the prompt
// lengths up to what a slot holds. The fit is analyze/profile_fit.h's.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "bench/exchange.h"

namespace tokenscope::bench {

struct ProfileSweepSettings {
  std::string target_url;  // "" : the built-in simulator, in-process
  Api api = Api::kCompletions;
  std::string model, api_key, tokenizer_file, extra_body;
  std::filesystem::path runs_dir;  // one run per cell: b{B}-p{P}
  bool overwrite = false;          // runs_dir may hold an earlier profile's runs
  double budget_s = 600.0;         // no cell starts after this long
  std::uint32_t waves = 3;         // requests per cell: B · waves
  std::uint32_t output_tokens = 32;
  // More output lengths (longer decodes reach longer contexts): each makes
  // another set of cells, b{B}-p{P}-o{O}. Empty: output_tokens alone.
  std::vector<std::uint32_t> more_output_tokens;
  std::vector<std::uint32_t> prompt_tokens = {32, 128, 512, 1024};
  std::vector<std::uint32_t> batch_sizes;  // empty: 1, 2, 4, ... up to the cap
  double timeout_s = 600.0;                // per request
  // Start the server for each cell with this shell command (bench's
  // --server-cmd: stopped after it by its process group), so that every
  // cell begins on a fresh server; "" : the server at target_url is running.
  std::string server_cmd;
  double server_start_timeout_s = 600.0;
};

struct ProfileCell {
  std::uint32_t batch = 0, prompt = 0, output = 0, requests = 0;
  std::string name;
};

struct ProfileSweepResult {
  std::vector<std::filesystem::path> runs;  // the cells measured, in order
  std::vector<ProfileCell> planned;
  bool interrupted = false;
  bool over_budget = false;  // cells left unmeasured by the time budget
  std::string failure;       // the cell that failed and why ("" : none)
};

// The cells for a batch cap (0: unknown) and a per-sequence context (0:
// unknown), in the order they run: cheap ones first.
std::vector<ProfileCell> plan_profile_cells(const ProfileSweepSettings& s, std::uint32_t cap,
                                            std::uint64_t context);

// Runs the sweep; UsageError for bad settings. Progress on log.
ProfileSweepResult run_profile_sweep(const ProfileSweepSettings& s, const std::atomic<bool>& interrupted,
                                     std::ostream& log);

}  // namespace tokenscope::bench
