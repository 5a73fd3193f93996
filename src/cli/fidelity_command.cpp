#include "cli/fidelity_command.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "analyze/fidelity.h"
#include "analyze/run_data.h"
#include "bench/bench_run.h"
#include "bench/bench_settings.h"
#include "cli/engine_options.h"
#include "cli/workload_options.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "engine/profile.h"
#include "report/render.h"
#include "report/report_data.h"
#include "rundir/readers.h"
#include "session/sim_run.h"

namespace tokenscope::cli {

namespace {

struct FidelityOptions {
  WorkloadOptions workload;
  EngineOptions engine;
  std::string target, out, api = "completions", model, api_key, tokenizer, extra_body;
  double timeout_s = 600.0;
  std::string server_cmd;
  double server_start_timeout_s = 600.0;
  bool overwrite = false;
  bool no_defaults = false;
};

std::string pct(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:+.1f}%", 100 * v.get<double>()) : "-";
}
std::string val(const nlohmann::json& v) {
  if (!v.is_number()) return "-";
  const double d = v.get<double>();
  return fmt::format("{:.{}f}", d, std::abs(d) < 10 ? 2 : 1);
}

void print_fidelity(std::ostream& os, const nlohmann::json& f) {
  os << fmt::format("\n{:<20} {:>10} {:>10} {:>9} {:>12} {:>10}  {}\n", "metric", "real", "sim", "error",
                    "real spread", "defaults", "verdict");
  const auto row = [&](const std::string& name, const nlohmann::json& c) {
    std::string verdict = c["within_target"] == true
                              ? fmt::format("within {:g}%", 100 * c["target"].get<double>())
                              : fmt::format("over {:g}%", 100 * c["target"].get<double>());
    if (c["within_noise"] == true) verdict += ", inside the server's own spread";
    os << fmt::format("{:<20} {:>10} {:>10} {:>9} {:>12} {:>10}  {}\n", name, val(c["real"]), val(c["sim"]),
                      pct(c["rel_error"]), pct(c["real_spread"]), pct(c["defaults_rel_error"]), verdict);
  };
  for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
    for (const char* p : {"p50", "p90", "p99"}) row(fmt::format("{} {}", m, p), f[m][p]);
  row("output tok/s", f["throughput"]["output_token_throughput_tps"]);
  row("requests/s", f["throughput"]["request_throughput_rps"]);
  for (const char* m : {"ttft_ms", "e2e_ms"}) {
    const auto& x = f["mape"][m];
    os << fmt::format(
        "MAPE {:<15} {:>10} {:>10} {:>9} {:>12} {:>10}  over {} requests\n", m, "", "",
        x["sim"].is_number() ? fmt::format("{:.1f}%", 100 * x["sim"].get<double>()) : "-",
        x["real_spread"].is_number() ? fmt::format("{:.1f}%", 100 * x["real_spread"].get<double>()) : "-",
        x["defaults"].is_number() ? fmt::format("{:.1f}%", 100 * x["defaults"].get<double>()) : "-",
        x["requests"].get<std::size_t>());
  }
  os << fmt::format("{} of {} figures within their targets\n", f["within_target"]["count"].get<int>(),
                    f["within_target"]["of"].get<int>());
}

// The first real run as sim replays it (a native trace, docs/workloads.md):
// the requests that completed, each when it was sent, with the prompt
// length the server counted (a text the server tokenizes otherwise than
// planned is priced as the server saw it), the output it produced and its
// tenant; in id order. Returns the real id of each row (sim numbers the
// rows 0, 1, ...).
std::vector<std::uint64_t> write_replay_trace(const std::filesystem::path& real,
                                              const std::filesystem::path& out) {
  rundir::RequestsReader reader(real / "requests.jsonl", rundir::BadLines::kFail);
  std::map<std::uint64_t, std::pair<Nanos, nlohmann::json>> rows;
  Nanos first = std::numeric_limits<Nanos>::max();
  RequestRecord r;
  while (reader.next(r)) {
    if (r.outcome != Outcome::kOk || r.warmup) continue;
    const Nanos sent = r.t_send >= 0 ? r.t_send : r.t_sched;
    if (r.prompt_tokens <= 0 || r.output_tokens <= 0 || sent < 0) continue;
    nlohmann::json row = {{"input_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens}};
    if (!r.tenant.empty()) row["tenant"] = r.tenant;
    rows[r.id] = {sent, std::move(row)};
    first = std::min(first, sent);
  }
  if (rows.empty())
    throw TargetError(
        fmt::format("{}: no request completed with its token counts: nothing to replay", real.string()));
  std::string text;
  std::vector<std::uint64_t> ids;
  for (auto& [id, row] : rows) {
    row.second["t_ms"] = static_cast<double>(row.first - first) / 1e6;
    text += row.second.dump() + "\n";
    ids.push_back(id);
  }
  write_file_atomic(out, text);
  return ids;
}

int run_fidelity(FidelityOptions& o, const Interrupts& in) {
  if (o.engine.profile_file.empty())
    throw UsageError("fidelity: --profile FILE is required (from `tokenscope profile`)");
  if (o.target.empty()) throw UsageError("fidelity: --target URL is required (the real server)");
  if (o.out.empty()) throw UsageError("fidelity: --out DIR is required");
  if (o.workload.prefix_groups > 0 || o.workload.prefix_tokens > 0)
    throw UsageError(
        "fidelity: shared prefixes (--prefix-groups, --prefix-tokens) are not replayed in sim yet: leave "
        "them out");
  const engine::Profile profile = engine::read_profile(o.engine.profile_file);
  const std::filesystem::path dir(o.out);
  std::error_code ec;
  if (std::filesystem::exists(dir / "fidelity.json", ec) && !o.overwrite)
    throw UsageError(
        fmt::format("fidelity: {} holds an earlier comparison (give --overwrite to replace it)", o.out));
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create: {}", o.out, ec.message()));
  // An earlier comparison's results go first: a run that fails now leaves none of them beside its own.
  for (const char* f : {"fidelity.json", "report.html", "replay.jsonl"}) std::filesystem::remove(dir / f, ec);

  // The real server, twice: its own run-to-run spread.
  for (const char* name : {"real-1", "real-2"}) {
    bench::BenchSettings b;
    b.workload = o.workload;
    b.target_url = o.target;
    b.api = o.api == "chat" ? bench::Api::kChat : bench::Api::kCompletions;
    b.model = o.model;
    b.api_key = o.api_key;
    b.tokenizer_file = o.tokenizer;
    b.sampling.extra_body = o.extra_body;
    b.timeout_s = o.timeout_s;
    b.server_cmd = o.server_cmd;
    b.server_start_timeout_s = o.server_start_timeout_s;
    b.ignore_eos = true;
    b.no_gpu = true;
    b.no_host = true;
    b.progress = bench::Progress::kNone;
    b.quiet = true;
    b.overwrite = true;
    b.out_dir = (dir / name).string();
    std::cerr << "fidelity: the real server (" << name << ")\n";
    std::ostringstream sink;
    bench::BenchResult r;
    try {
      r = bench::run(b, *in.interrupted, sink);
    } catch (const UsageError& e) {
      // The second run's options are the first's: something else answers at
      // the target (the first run's server outlived its stop).
      if (std::string(name) == "real-1") throw;
      std::cerr << "fidelity: the real run " << name << " failed: " << e.what() << "\n";
      return kExitFailure;
    } catch (const TargetError& e) {
      if (std::string(name) == "real-1") throw;
      std::cerr << "fidelity: the real run " << name << " failed: " << e.what() << "\n";
      return kExitFailure;
    }
    if (r.runs.empty() && !in.interrupted->load()) {  // the server --server-cmd started did not come up
      std::string why;
      for (const auto& v : r.verdicts) why += (why.empty() ? "" : "; ") + v;
      std::cerr << "fidelity: the real run " << name << " failed: " << (why.empty() ? "no run" : why) << "\n"
                << sink.str();
      return kExitFailure;
    }
    if (r.runs.empty() || r.runs.front().interrupted) {
      std::cerr << "fidelity: interrupted; the runs so far are in " << o.out << "\n";
      return kExitInterrupted;
    }
    if (r.exit_code != 0) {
      std::string why = r.runs.front().failure;
      for (const auto& v : r.verdicts) why += (why.empty() ? "" : "; ") + v;
      std::cerr << "fidelity: the real run " << name << " failed: " << why << "\n" << sink.str();
      return kExitFailure;
    }
  }
  // The planner: sim with the profile, and with the defaults at the same limits.
  const auto replay = dir / "replay.jsonl";
  const std::vector<std::uint64_t> replay_ids = write_replay_trace(dir / "real-1", replay);
  const auto simulate = [&](const char* name, engine::EngineOptions e) {
    session::SimRunSettings s;
    s.workload.trace = replay.string();
    s.workload.trace_format = "native";
    s.workload.arrival = "trace";
    s.workload.seed = o.workload.seed;
    s.engine = std::move(e);
    s.out = (dir / name).string();
    s.overwrite = true;
    s.finish.history.disabled = true;
    std::cerr << "fidelity: sim (" << name << ")\n";
    const auto r = session::run_sim(s, *in.interrupted, std::cerr);
    return !r.report.interrupted;
  };
  if (!simulate("sim-profile", o.engine)) return kExitInterrupted;
  if (!o.no_defaults) {
    engine::EngineOptions d = o.engine;
    d.profile_file.clear();
    if (profile.max_num_seqs && !d.max_num_seqs_given) d.engine.max_num_seqs = *profile.max_num_seqs;
    if (profile.max_num_batched_tokens && !d.max_num_batched_tokens_given)
      d.engine.max_num_batched_tokens = *profile.max_num_batched_tokens;
    if (profile.kv_capacity_tokens && d.num_gpu_blocks == 0 && d.engine.block_size_tokens > 0)
      d.num_gpu_blocks = static_cast<std::uint32_t>(std::min<std::uint64_t>(
          (*profile.kv_capacity_tokens + d.engine.block_size_tokens - 1) / d.engine.block_size_tokens,
          UINT32_MAX));
    if (!simulate("sim-defaults", d)) return kExitInterrupted;
  }
  if (in.interrupted->load()) return kExitInterrupted;
  analyze::FidelityRuns runs{dir / "real-1", dir / "real-2", dir / "sim-profile",
                             o.no_defaults ? std::filesystem::path() : dir / "sim-defaults", replay_ids};
  nlohmann::json f = analyze::fidelity(runs);
  f["profile"] = o.engine.profile_file;
  f["target"] = o.target;
  write_file_atomic(dir / "fidelity.json", f.dump(2) + "\n");
  // One page: the runs' CDFs overlaid.
  try {
    std::vector<std::filesystem::path> paths = {runs.real, runs.real_repeat, runs.sim};
    if (!runs.sim_defaults.empty()) paths.push_back(runs.sim_defaults);
    analyze::LoadOptions load;
    write_file_atomic(dir / "report.html",
                      report::render_html(report::report_data(report::load_report_input(paths, load))));
  } catch (const std::exception& e) {
    std::cerr << "fidelity: no report page: " << e.what() << "\n";
  }
  print_fidelity(std::cout, f);
  std::cout << "\nfidelity.json and report.html in " << o.out << "\n";
  return kExitOk;
}

}  // namespace

Command add_fidelity_command(CLI::App& app, Interrupts interrupts) {
  auto o = std::make_shared<FidelityOptions>();
  CLI::App* f = app.add_subcommand(
      "fidelity",
      "The planner's error against a real server (docs/profile.md): one workload twice on --target and "
      "through "
      "sim with --profile and with the defaults; fidelity.json and a report page in --out");
  f->add_option("--target", o->target, "The real server's base URL")->required();
  f->add_option("--out", o->out, "Directory for the four runs, fidelity.json and report.html")->required();
  f->add_flag("--overwrite", o->overwrite, "Replace an earlier comparison in --out");
  f->add_option("--api", o->api, "completions|chat")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat"}));
  f->add_option("--served-model", o->model, "The model to ask the server for [default: its GET /v1/models]");
  f->add_option("--api-key", o->api_key, "Bearer token");
  f->add_option("--tokenizer", o->tokenizer,
                "A tokenizer.json or SentencePiece model for exact prompt lengths");
  f->add_option("--extra-body", o->extra_body, "A JSON object merged into every request to the server");
  f->add_option("--timeout-s", o->timeout_s, "Per request, seconds")->capture_default_str();
  f->add_option("--server-cmd", o->server_cmd,
                "Start the server for each real run with this shell command (stopped after it, as bench "
                "--server-cmd does): both real runs begin on a fresh server");
  f->add_option("--server-start-timeout", o->server_start_timeout_s,
                "Seconds --server-cmd's server may take to answer GET /health")
      ->capture_default_str();
  f->add_flag("--no-defaults", o->no_defaults, "Leave out the run with the uncalibrated defaults");
  add_workload_options(f, o->workload);
  add_engine_options(f, o->engine);
  return {f, [o, interrupts] { return run_fidelity(*o, interrupts); }};
}

}  // namespace tokenscope::cli
