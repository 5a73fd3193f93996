#include "cli/bench_mpi.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/task_driver.h"
#include "cli/summary_table.h"
#include "core/error.h"
#include "core/run_dir.h"
#include "rundir/merge.h"
#include "rundir/readers.h"
#include "rundir/run_files.h"

namespace tokenscope::cli {

namespace fs = std::filesystem;

namespace {

std::int64_t mpi_wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string mpi_default_out() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/bench-%Y%m%d-%H%M%S", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// A file's bytes; nullopt when it cannot be read.
std::optional<std::string> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string s{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return std::nullopt;
  return s;
}

}  // namespace

MpiBench::MpiBench(const std::string& out, const std::string& shard_root, bool overwrite)
    : world_(std::make_unique<cluster::MpiWorld>()) {
  const cluster::ClockOffset c = world_->offset_to_root(32);
  offset_ = {.offset_ns = c.offset_ns, .error_ns = c.error_ns, .rtt_ns = c.rtt_ns, .rounds = c.rounds};
  // Rank 0's names: every rank writes under the same run's name.
  const std::string mine = out.empty() ? mpi_default_out() : out;
  out_ = world_->broadcast(rank() == 0 ? mine : std::string());
  root_ =
      world_->broadcast(rank() == 0 ? (shard_root.empty() ? out_ + ".shards" : shard_root) : std::string());
  // The merged run's directory claimed now, not found taken after the run:
  // every rank gets rank 0's verdict, and all stop alike.
  std::string problem;
  if (rank() == 0) {
    try {
      claim_run_directory(out_, overwrite, "--out");
    } catch (const std::exception& e) {
      problem = e.what();
      if (problem.empty()) problem = "--out: cannot be claimed";
    }
  }
  problem = world_->broadcast(problem);
  if (!problem.empty()) throw UsageError(problem);
}

MpiBench::~MpiBench() = default;

std::string MpiBench::shard_dir() const {
  return (fs::path(root_) / std::to_string(rank())).string();
}

std::int64_t MpiBench::agree_start() {
  started_ = true;
  reached_start_ = true;
  return start_step(true);
}

std::int64_t MpiBench::start_step(bool ready) {
  const auto all = world_->gather(ready ? 1 : 0);
  std::int64_t start = 0;
  if (rank() == 0) {
    for (std::size_t r = 0; r < all.size(); ++r)
      if (all[r] == 0) not_ready_.push_back(static_cast<int>(r));
    start = mpi_wall_ns() + kMpiStartLeadNs;
  }
  // On rank 0's clock: bench moves it onto this host's by the offset.
  return world_->broadcast(start);
}

void MpiBench::all_done() {
  done_ = true;
  world_->barrier();
}

int MpiBench::finish(const std::string& error, bool overwrite, const session::Finishers& finishers,
                     const std::vector<std::string>& tags, bool json, bool quiet, std::ostream& out,
                     std::ostream& log) {
  // The steps this rank's run did not take, so that no other rank waits.
  if (!started_) {
    started_ = true;
    start_step(false);
  }
  if (!done_) all_done();

  const fs::path mine = fs::absolute(shard_dir());
  // Only a run that reached the start wrote run.json in its directory (a
  // directory refused at its claim may hold an earlier run).
  const auto run_json = reached_start_ ? file_bytes(mine / "run.json") : std::nullopt;
  nlohmann::json status = {{"rank", rank()},
                           {"host", host_name()},
                           // As given: a relative path is the rank's own working directory's, which
                           // rank 0 reads against its own (the same on a shared file system).
                           {"dir", shard_dir()},
                           {"dir_absolute", mine.string()},
                           {"has_run", run_json.has_value()},
                           {"run_json", run_json.value_or("")},
                           {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)}};
  if (rank() != 0) {
    world_->send(0, status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (run_json && world_->receive(0) == "send") world_->send_file(0, mine / "requests.jsonl");
    world_->barrier();  // rank 0's merge
    return kExitOk;
  }

  // Rank 0: every rank's run directory, where this host can read it.
  std::vector<fs::path> dirs;
  nlohmann::json ranks = nlohmann::json::array();
  std::vector<std::string> failures;
  const auto note_rank = [&](const nlohmann::json& st, const std::string& read_from, bool sent,
                             const std::string& problem) {
    nlohmann::json r = {
        {"rank", st.value("rank", -1)},
        {"host", st.value("host", "")},
        {"dir", st.value("dir_absolute", st.value("dir", ""))},
        {"read_from", read_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(read_from)},
        {"sent_over_mpi", sent},
        {"error", st.contains("error") ? st["error"] : nlohmann::json(nullptr)}};
    if (!problem.empty()) r["gather_error"] = problem;
    ranks.push_back(r);
    if (!st.value("error", nlohmann::json(nullptr)).is_null())
      failures.push_back(fmt::format("rank {} ({}): {}", st.value("rank", -1), st.value("host", "?"),
                                     st["error"].get<std::string>()));
    if (!problem.empty())
      failures.push_back(
          fmt::format("rank {} ({}): {}", st.value("rank", -1), st.value("host", "?"), problem));
  };
  if (run_json) dirs.push_back(mine);
  note_rank(status, run_json ? mine.string() : "", false, "");
  for (int r = 1; r < size(); ++r) {
    nlohmann::json st;
    try {
      st = nlohmann::json::parse(world_->receive(r));
    } catch (const nlohmann::json::exception& e) {
      // Not a rank of this build: its files are not asked for.
      st = {{"rank", r}, {"error", fmt::format("its status could not be read: {}", e.what())}};
      note_rank(st, "", false, "");
      continue;
    }
    if (!st.is_object() || !st.value("has_run", false)) {
      note_rank(st, "", false, "");
      continue;
    }
    const std::string theirs = st.value("run_json", "");
    // A shared file system: this host reads the very directory (the rank's
    // path as given, from this working directory: ranks in other working
    // directories send their files, as ranks on hosts that share none).
    std::optional<fs::path> seen;
    if (const fs::path local = st.value("dir", "");
        !local.empty() && file_bytes(local / "run.json") == theirs)
      seen = local;
    if (seen) {
      world_->send(r, "have");
      dirs.push_back(*seen);
      note_rank(st, seen->string(), false, "");
      continue;
    }
    const fs::path target = fs::absolute(fs::path(root_) / std::to_string(r));
    std::string problem;
    try {
      if (file_bytes(target / "run.json") == theirs) {
        world_->send(r, "have");
        dirs.push_back(target);
        note_rank(st, target.string(), false, "");
        continue;
      }
      // As bench claims a run directory: another run there is refused unless
      // --overwrite, which removes its files (never through a link).
      claim_run_directory(target, overwrite, "--mpi-shards");
      fs::create_directories(target);
      write_file_atomic(target / "run.json", theirs);
    } catch (const std::exception& e) {
      problem = fmt::format("not gathered: {}", e.what());
    }
    if (!problem.empty()) {
      world_->send(r, "skip");
      note_rank(st, "", false, problem);
      continue;
    }
    world_->send(r, "send");
    try {
      world_->receive_file(r, target / "requests.jsonl");
      dirs.push_back(target);
      note_rank(st, target.string(), true, "");
    } catch (const std::exception& e) {
      note_rank(st, "", false, fmt::format("not gathered: {}", e.what()));
    }
  }
  for (const auto& f : failures) log << "bench --mpi: " << display_text(f) << "\n";
  if (!not_ready_.empty())
    log << fmt::format("bench --mpi: ranks not ready at the start: {} (their share is missing)\n",
                       fmt::join(not_ready_, ", "));
  if (dirs.empty()) {
    log << "bench --mpi: no rank has a run to merge\n";
    world_->barrier();
    return kExitFailure;
  }
  const nlohmann::json launcher = {{"by", "mpi"},
                                   {"library", world_->library()},
                                   {"ranks", size()},
                                   {"start_lead_ns", kMpiStartLeadNs},
                                   {"not_ready", not_ready_},
                                   {"rank_runs", ranks}};
  // The ranks wait for rank 0's merge (mpirun ends the job when a rank
  // exits with an error; a rank whose own run failed exits so after this).
  std::exception_ptr merge_failure;
  rundir::MergeOutcome outcome;
  // --quiet: the merge's lines only when it is not whole.
  std::ostringstream merge_log;
  try {
    outcome = rundir::merge_shards(dirs, out_, overwrite, quiet ? merge_log : log, tags, launcher,
                                   bench::summarize_task_records);
    merged_ = true;
    if (quiet && !outcome.complete()) log << merge_log.str();
  } catch (...) {
    merge_failure = std::current_exception();
  }
  world_->barrier();
  if (merge_failure) std::rethrow_exception(merge_failure);
  const bool report_written = session::finish_run(finishers, out_, {out_}, std::nullopt, log);
  const nlohmann::json run = rundir::read_json_file(fs::path(out_) / "run.json");
  const nlohmann::json summary = run.value("summary", nlohmann::json::object());
  bool slo_failed = false;
  if (const auto it = summary.find("slo_attainment"); it != summary.end() && it->is_object())
    for (const auto& [cls, a] : it->items())
      if (a.is_object() && a.value("pass", true) == false) slo_failed = true;
  const bool failed = run.value("verdict", nlohmann::json::object()).value("failed", false);
  if (json) {
    out << summary.dump(2) << "\n";
  } else if (!quiet) {
    SummaryHeader h;
    h.client_rows = true;
    h.title = fmt::format("tokenscope bench --mpi: {} ranks merged", size());
    if (const auto* url = rundir::json_path(run, {"settings", "requested", "target", "url"});
        url && url->is_string())
      h.lines.push_back("target: " + display_text(url->get<std::string>()));
    h.lines.push_back(fmt::format("shards: {} of {} whole{}",
                                  outcome.count - outcome.missing.size() - outcome.partial.size(),
                                  outcome.count, outcome.complete() ? "" : " (the run is partial)"));
    print_summary_table(out, h, summary);
    if (report_written) out << "report: " << display_text((fs::path(out_) / "report.html").string()) << "\n";
    out << "run directory: " << display_text(out_) << "\n";
    out << "shard directories: " << display_text(root_) << "\n";
  }
  if (!outcome.complete() || failed) return kExitFailure;
  return slo_failed ? kExitSloFailed : kExitOk;
}

}  // namespace tokenscope::cli
