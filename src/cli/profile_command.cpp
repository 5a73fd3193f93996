#include "cli/profile_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "analyze/profile_fit.h"
#include "bench/profile_sweep.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "engine/profile.h"

namespace tokenscope::cli {

namespace {

struct ProfileOptions {
  bench::ProfileSweepSettings sweep;
  std::string api = "completions";
  std::string out;
  std::string runs;
  std::vector<std::string> from;
  std::string attention;
  std::string decode_cost = "curve";
};

void print_profile(std::ostream& os, const engine::Profile& p) {
  os << fmt::format("\n{:<22} {:>12} {:>12}  {}\n", "coefficient", "value", "± stderr", "per");
  for (std::size_t i = 0; i < engine::kProfileTerms; ++i) {
    const auto& t = engine::profile_terms()[i];
    os << fmt::format("{:<22} {:>12.4g} {:>12.3g}  {}\n", t.key, p.coef[i] / t.seconds_per_unit,
                      p.stderr_[i] / t.seconds_per_unit, t.multiplies);
  }
  if (!p.decode_curve.empty()) {
    os << "decode curve (in place of step_overhead_ms and decode_seq_us): a step with d decoding sequences\n";
    for (const auto& q : p.decode_curve)
      os << fmt::format("  d = {:<5} {:>10.4g} ms {:>10.3g}\n", q.seqs, q.seconds * 1e3, q.stderr_ * 1e3);
  }
  const auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("not found"); };
  os << fmt::format("\nbatch cap (max_num_seqs)        {}\n", opt(p.max_num_seqs));
  os << fmt::format("token budget per step           {}\n", opt(p.max_num_batched_tokens));
  os << fmt::format("KV capacity, tokens             {}\n", opt(p.kv_capacity_tokens));
  for (const auto& [k, v] : p.found) os << fmt::format("  {}: {}\n", k, v);
  os << fmt::format(
      "\nfit: {} steps in {} shapes; R² {:.4f}, MAPE {:.1f}%, p90 |error| {:.1f}%, RMSE {:.3g} ms\n",
      p.fit.observations, p.fit.points, p.fit.r2, 100 * p.fit.mape, 100 * p.fit.p90_abs_rel_error,
      p.fit.rmse_ms);
  os << fmt::format("measured: steps up to {} prompt tokens and {} sequences, contexts up to {} tokens\n",
                    p.ranges.max_prefill_tokens, p.ranges.max_batch, p.ranges.max_context_tokens);
  for (const auto& n : p.notes) os << "note: " << n << "\n";
}

std::vector<std::uint32_t> parse_list(const std::string& text, const char* option) {
  std::vector<std::uint32_t> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const auto comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      std::size_t used = 0;
      const unsigned long v = std::stoul(item, &used);
      if (used != item.size() || v == 0 || v > 1'000'000) throw std::invalid_argument(item);
      out.push_back(static_cast<std::uint32_t>(v));
    } catch (const std::exception&) {
      throw UsageError(
          fmt::format("{}: '{}' is not a positive whole number (expected N,N,...)", option, item));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

int run_profile(ProfileOptions& o, const Interrupts& in) {
  if (o.out.empty()) throw UsageError("profile: --out PROFILE.yaml is required");
  if (!o.from.empty() && (!o.sweep.target_url.empty() || !o.runs.empty() || !o.sweep.server_cmd.empty()))
    throw UsageError("profile: --from fits finished runs; it does not take --target, --runs or --server-cmd");
  if (!o.sweep.server_cmd.empty() && o.sweep.target_url.empty())
    throw UsageError("profile: --server-cmd needs --target (where the server it starts listens)");
  std::vector<std::filesystem::path> runs;
  int exit = kExitOk;
  bool over_budget = false;
  std::string failure;
  if (!o.from.empty()) {
    for (const auto& f : o.from) runs.emplace_back(f);
    std::cerr << "profile: fitting " << runs.size() << " run(s)\n";
  } else {
    o.sweep.api = o.api == "chat" ? bench::Api::kChat : bench::Api::kCompletions;
    o.sweep.runs_dir =
        o.runs.empty() ? std::filesystem::path(o.out + ".runs") : std::filesystem::path(o.runs);
    std::cerr << fmt::format(
        "profile: {} ; runs in {}\n",
        o.sweep.target_url.empty() ? "the built-in simulator, in-process" : o.sweep.target_url,
        o.sweep.runs_dir.string());
    const auto r = bench::run_profile_sweep(o.sweep, *in.interrupted, std::cerr);
    runs = r.runs;
    over_budget = r.over_budget;
    if (r.interrupted) {
      exit = kExitInterrupted;
      std::cerr << "profile: interrupted; fitting the " << runs.size() << " cell(s) measured\n";
    }
    if (!r.failure.empty()) {
      failure = r.failure;
      exit = kExitFailure;
    }
  }
  engine::Profile p;
  try {
    if (runs.empty()) throw UsageError("no run was measured");
    p = analyze::profile_from_runs(runs, std::cerr, o.attention, o.decode_cost);
  } catch (const std::exception& e) {
    std::cerr << "profile: " << (failure.empty() ? "" : failure + "\n")
              << "profile: no profile written: " << e.what() << "\n";
    if (!runs.empty())
      std::cerr << "profile: the runs measured are kept in " << runs.front().parent_path().string() << "\n";
    return exit != kExitOk ? exit : kExitFailure;
  }
  if (!failure.empty()) {
    std::cerr << "profile: " << failure << "\n";
    p.notes.push_back("the sweep stopped early: " + failure);
  }
  if (exit == kExitInterrupted)
    p.notes.push_back("the sweep was interrupted: only the cells measured were fitted");
  if (over_budget)
    p.notes.push_back(fmt::format("the time budget ({:g} s) ran out: only the cells measured were fitted",
                                  o.sweep.budget_s));
  // What is written must read back: bounds a server's odd answers could break are caught here.
  engine::parse_profile(engine::profile_yaml(p), o.out);
  write_file_atomic(o.out, engine::profile_yaml(p));
  print_profile(std::cout, p);
  std::cout << "\nprofile written to " << o.out << " (use it with --profile on sim, serve and bench)\n";
  return exit;
}

}  // namespace

Command add_profile_command(CLI::App& app, Interrupts interrupts) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* p = app.add_subcommand(
      "profile",
      "Fit a server's step costs from the outside (docs/profile.md): a designed sweep of batch sizes and "
      "prompt "
      "lengths against --target (or the built-in simulator), or finished runs (--from); writes a profile for "
      "--profile");
  p->add_option("--out", o->out, "The profile to write (YAML)")->required();
  p->add_option("--target", o->sweep.target_url, "The server's base URL [default: the built-in simulator]");
  p->add_option("--from", o->from,
                "Fit these finished bench runs (or directories of runs) instead of a sweep");
  p->add_option("--runs", o->runs, "Where the sweep's runs go [default: OUT.runs]");
  p->add_flag("--overwrite", o->sweep.overwrite, "Replace an earlier profile's runs in --runs");
  p->add_option("--api", o->api, "completions|chat")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat"}));
  p->add_option("--model", o->sweep.model, "The model to ask for [default: the target's GET /v1/models]");
  p->add_option("--api-key", o->sweep.api_key, "Bearer token");
  p->add_option(
      "--tokenizer", o->sweep.tokenizer_file,
      "A tokenizer.json or SentencePiece model for exact prompt lengths [default: the server's /tokenize]");
  p->add_option("--extra-body", o->sweep.extra_body, "A JSON object merged into every request");
  p->add_option("--budget-s", o->sweep.budget_s, "No cell starts after this long, seconds")
      ->capture_default_str();
  p->add_option("--waves", o->sweep.waves, "Requests per cell: batch size times this")->capture_default_str();
  p->add_option_function<std::string>(
      "--output-len,--output-lens",
      [o](const std::string& t) {
        const auto lens = parse_list(t, "--output-lens");
        o->sweep.output_tokens = lens.front();
        o->sweep.more_output_tokens.assign(lens.begin() + 1, lens.end());
      },
      "Output tokens of every request; several (N,N,...) make a set of cells each, the later ones named "
      "b{B}-p{P}-o{O} [default: 32]");
  p->add_option_function<std::string>(
      "--prompt-lens", [o](const std::string& t) { o->sweep.prompt_tokens = parse_list(t, "--prompt-lens"); },
      "Prompt lengths, tokens [default: 32,128,512,1024]");
  p->add_option_function<std::string>(
      "--batch-sizes", [o](const std::string& t) { o->sweep.batch_sizes = parse_list(t, "--batch-sizes"); },
      "Concurrent users per cell [default: 1, 2, 4, ... up to the server's cap]");
  p->add_option("--timeout-s", o->sweep.timeout_s, "Per request, seconds")->capture_default_str();
  p->add_option("--server-cmd", o->sweep.server_cmd,
                "Start the server for each cell with this shell command (stopped after it, as bench "
                "--server-cmd does), so that every cell begins on a fresh server; needs --target");
  p->add_option("--server-start-timeout", o->sweep.server_start_timeout_s,
                "Seconds --server-cmd's server may take to answer GET /health")
      ->capture_default_str();
  p->add_option(
       "--attention", o->attention,
       "What attention is fitted over: own (each sequence's context, vLLM) or occupancy (every occupied "
       "cell, llama.cpp) [default: own; occupancy when the runs simulated it]")
      ->check(CLI::IsMember({"own", "occupancy"}));
  p->add_option(
       "--decode-cost", o->decode_cost,
       "How a step's cost grows with its decoding sequences: curve (a point per decode count measured, "
       "on a grid 1-4, 6, 8, 12, ..., linear between them) or linear (one coefficient)")
      ->capture_default_str()
      ->check(CLI::IsMember({"curve", "linear"}));
  return {p, [o, interrupts] { return run_profile(*o, interrupts); }};
}

}  // namespace tokenscope::cli
