#include "bench/profile_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "bench/bench_run.h"
#include "bench/bench_settings.h"
#include "core/error.h"
#include "rundir/readers.h"
#include "rundir/run_files.h"
#include "workload/lengths.h"

namespace tokenscope::bench {

namespace {

nlohmann::json read_run_json(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "run.json", ec)) return nullptr;
  return rundir::read_json_file(dir / "run.json");
}

std::uint64_t positive_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const auto* v = rundir::json_path(j, path);
  return v && v->is_number_unsigned() ? v->get<std::uint64_t>() : 0;
}

double number_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const auto* v = rundir::json_path(j, path);
  return v && v->is_number() ? v->get<double>() : NAN;
}

ProfileCell make_cell(std::uint32_t b, std::uint32_t p, std::uint32_t o, std::uint32_t waves,
                      bool named_by_output = false) {
  return {b, p, o, b * waves,
          named_by_output ? fmt::format("b{}-p{}-o{}", b, p, o) : fmt::format("b{}-p{}", b, p)};
}

}  // namespace

std::vector<ProfileCell> plan_profile_cells(const ProfileSweepSettings& s, std::uint32_t cap,
                                            std::uint64_t context) {
  std::vector<std::uint32_t> batches = s.batch_sizes;
  if (batches.empty()) {
    // Powers of two up to the cap and the cap itself; past 8 (to 16) when
    // the server does not say, so that the cap shows in behaviour.
    const std::uint32_t top = cap > 0 ? cap : 16;
    for (std::uint32_t b = 1; b < top; b *= 2) batches.push_back(b);
    batches.push_back(top);
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  std::vector<std::uint32_t> prompts = s.prompt_tokens;
  std::sort(prompts.begin(), prompts.end());
  prompts.erase(std::unique(prompts.begin(), prompts.end()), prompts.end());
  std::vector<std::uint32_t> outputs = {s.output_tokens};
  for (const auto o : s.more_output_tokens)
    if (std::find(outputs.begin(), outputs.end(), o) == outputs.end()) outputs.push_back(o);
  std::vector<ProfileCell> cells;
  for (const auto o : outputs)
    for (const auto p : prompts) {
      // What a sequence may hold: the prompt, its output and a margin for
      // the tokens a server adds (BOS).
      if (context > 0 && std::uint64_t{p} + o + 8 > context) continue;
      for (const auto b : batches) cells.push_back(make_cell(b, p, o, s.waves, o != s.output_tokens));
    }
  return cells;
}

ProfileSweepResult run_profile_sweep(const ProfileSweepSettings& s, const std::atomic<bool>& interrupted,
                                     std::ostream& log) {
  if (s.waves == 0 || s.output_tokens < 2 ||
      std::any_of(s.more_output_tokens.begin(), s.more_output_tokens.end(), [](auto o) { return o < 2; }))
    throw UsageError(
        "profile: --waves must be at least 1 and every output length at least 2 (decodes are measured)");
  if (s.prompt_tokens.empty() ||
      std::find(s.prompt_tokens.begin(), s.prompt_tokens.end(), 0u) != s.prompt_tokens.end())
    throw UsageError("profile: --prompt-lens must list prompt lengths of at least 1 token");
  for (const auto b : s.batch_sizes)
    if (b == 0 || b > 4096) throw UsageError("profile: --batch-sizes must be in [1, 4096]");
  if (!(s.budget_s > 0)) throw UsageError("profile: --budget-s must be positive");
  std::error_code ec;
  if (std::filesystem::exists(s.runs_dir / "probe-b1-p16" / "run.json", ec) && !s.overwrite)
    throw UsageError(
        fmt::format("profile: {} holds an earlier profile's runs (give --overwrite to replace them)",
                    s.runs_dir.string()));
  std::filesystem::create_directories(s.runs_dir, ec);
  if (ec)
    throw IoError(fmt::format("{}: cannot create the runs directory: {}", s.runs_dir.string(), ec.message()));

  ProfileSweepResult result;
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::uint64_t seed = 1000;
  // Runs one cell; false when the sweep must stop.
  // (The probe cell only asks the server what it is: it is not fitted.)
  const auto run_cell = [&](const ProfileCell& c, std::size_t index, std::size_t total, bool fitted) {
    BenchSettings b;
    b.target_url = s.target_url;
    b.api = s.api;
    b.model = s.model;
    b.api_key = s.api_key;
    b.tokenizer_file = s.tokenizer_file;
    b.sampling.extra_body = s.extra_body;
    b.timeout_s = s.timeout_s;
    b.server_cmd = s.server_cmd;
    b.server_start_timeout_s = s.server_start_timeout_s;
    // The server's counters four times a second: its KV usage and queue beside
    // the client's requests (analyze/profile_fit.h read_counters).
    b.scrape_interval_s = 0.25;
    b.workload.num_requests = c.requests;
    b.workload.input_len = workload::parse_input_len(fmt::format("fixed:{}", c.prompt));
    b.workload.output_len = workload::parse_output_len(fmt::format("fixed:{}", c.output));
    // Prompts of their own in every cell: a server's prefix cache finds nothing.
    b.workload.seed = seed++;
    b.concurrency = c.batch;
    b.ignore_eos = true;
    b.no_gpu = true;
    b.no_host = true;
    b.progress = Progress::kNone;
    b.quiet = true;
    b.overwrite = true;
    b.max_error_rate = 0.0;
    b.out_dir = (s.runs_dir / c.name).string();
    std::ostringstream sink;
    BenchResult r;
    try {
      r = run(b, interrupted, sink);
    } catch (const UsageError& e) {
      // After the probe the options are known good: something else answers
      // at the target (the last cell's server outlived its stop), and the
      // cells measured are kept and fitted.
      if (!fitted) throw;
      result.failure =
          fmt::format("cell {} (batch {}, prompt {}) failed: {}", c.name, c.batch, c.prompt, e.what());
      return false;
    } catch (const TargetError& e) {
      if (!fitted) throw;
      result.failure =
          fmt::format("cell {} (batch {}, prompt {}) failed: {}", c.name, c.batch, c.prompt, e.what());
      return false;
    }
    if (fitted && !r.runs.empty() && std::filesystem::exists(s.runs_dir / c.name / "requests.jsonl"))
      result.runs.push_back(s.runs_dir / c.name);
    const nlohmann::json summary = r.runs.empty() ? nlohmann::json(nullptr) : r.runs.front().summary;
    log << fmt::format(
        "  [{}/{}] batch {:>3}, prompt {:>5}: TTFT p50 {:>9.2f} ms, ITL p50 {:>7.2f} ms  ({:.0f} s)\n", index,
        total, c.batch, c.prompt, number_at(summary, {"ttft_ms", "p50"}),
        number_at(summary, {"itl_ms", "p50"}), elapsed());
    if (r.runs.empty() && !interrupted.load()) {  // the server --server-cmd started did not come up
      std::string why;
      for (const auto& v : r.verdicts) why += (why.empty() ? "" : "; ") + v;
      result.failure = fmt::format("cell {} (batch {}, prompt {}) failed: {}", c.name, c.batch, c.prompt,
                                   why.empty() ? "its server did not start" : why);
      return false;
    }
    if (r.runs.empty() || r.runs.front().interrupted || interrupted.load()) {
      result.interrupted = true;
      return false;
    }
    if (r.exit_code != 0) {
      std::string why = r.runs.front().failure;
      for (const auto& v : r.verdicts) why += (why.empty() ? "" : "; ") + v;
      result.failure = fmt::format("cell {} (batch {}, prompt {}) failed: {}", c.name, c.batch, c.prompt,
                                   why.empty() ? fmt::format("exit {}", r.exit_code) : why);
      return false;
    }
    // A server whose usage disagrees with the requests measures nothing the fit can use.
    const double count = number_at(summary, {"requests_completed"});
    const double prompt_bad = number_at(summary, {"prompt_token_mismatches"});
    const double output_bad = number_at(summary, {"output_token_mismatches"});
    // (An output count one off now and then is a stream that merged two
    // tokens' text into one event, not a lie.)
    if (count > 0 && ((prompt_bad > 0.5 * count) || (output_bad > 0.5 * count))) {
      result.failure = fmt::format(
          "cell {}: the server's usage disagrees with what was sent and streamed ({:.0f} of {:.0f} requests "
          "with "
          "another prompt length, {:.0f} with another output count): its token counts cannot be fitted",
          c.name, prompt_bad, count, output_bad);
      return false;
    }
    return true;
  };

  // A first small cell: the server's word on its cap and context (run.json).
  ProfileCell probe = make_cell(1, 16, std::max<std::uint32_t>(s.output_tokens / 4, 4), 2);
  probe.name = "probe-" + probe.name;
  log << "profile: asking the server what it is (one user, a 16-token prompt)\n";
  if (!run_cell(probe, 0, 0, false)) return result;
  const nlohmann::json first = read_run_json(s.runs_dir / probe.name);
  const nlohmann::json info = [&] {
    const auto* i = rundir::json_path(first, {"settings", "effective", "target", "server_info"});
    return i ? *i : nlohmann::json(nullptr);
  }();
  auto cap = static_cast<std::uint32_t>(std::min<std::uint64_t>(positive_at(info, {"max_batch"}), 64));
  if (cap == 0 && s.target_url.empty())
    cap = static_cast<std::uint32_t>(std::min<std::uint64_t>(
        positive_at(first, {"settings", "requested", "server", "engine", "max_num_seqs"}), 64));
  cap = std::min<std::uint32_t>(cap, 64);  // a batch of 64 identical users is enough to see the slope
  const std::uint64_t context = std::min<std::uint64_t>(positive_at(info, {"n_ctx"}), 1u << 30);
  result.planned = plan_profile_cells(s, cap, context);
  log << fmt::format(
      "profile: {} cells (batch sizes up to {}{}, prompts up to {} tokens{}), {} waves each\n",
      result.planned.size(), cap > 0 ? cap : 16, cap > 0 ? ", the server's cap" : ", the cap unknown",
      result.planned.empty() ? 0
                             : std::max_element(result.planned.begin(), result.planned.end(),
                                                [](auto& a, auto& b) { return a.prompt < b.prompt; })
                                   ->prompt,
      context > 0 ? fmt::format(", a slot holds {}", context) : "", s.waves);
  for (std::size_t i = 0; i < result.planned.size(); ++i) {
    if (elapsed() > s.budget_s) {
      result.over_budget = true;
      log << fmt::format("profile: the budget of {:g} s is spent: {} cells left unmeasured\n", s.budget_s,
                         result.planned.size() - i);
      break;
    }
    if (!run_cell(result.planned[i], i + 1, result.planned.size(), true)) break;
  }
  return result;
}

}  // namespace tokenscope::bench
