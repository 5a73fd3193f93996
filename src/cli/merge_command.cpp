#include "cli/merge_command.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/task_driver.h"
#include "cli/history_command.h"
#include "core/error.h"
#include "rundir/merge.h"
#include "session/finishers.h"

namespace tokenscope::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> dirs;
  std::string out;
  bool overwrite = false;
  session::Finishers finish;
  std::vector<std::string> tags;
};

int run_merge(const MergeOptions& o) {
  std::vector<std::filesystem::path> dirs(o.dirs.begin(), o.dirs.end());
  const auto outcome = rundir::merge_shards(dirs, o.out, o.overwrite, std::cerr, o.tags, nullptr,
                                            bench::summarize_task_records);
  // As bench's runs: the page, and the history (one entry: the merged run).
  if (session::finish_run(o.finish, o.out, {o.out}, std::nullopt, std::cerr))
    std::cout << "report: " << display_text((std::filesystem::path(o.out) / "report.html").string()) << "\n";
  std::cout << "run directory: " << display_text(o.out) << "\n";
  if (!outcome.complete()) {
    std::cerr << fmt::format(
        "merge: the merged run is partial ({} of {} shards whole): its summary is of the records it has\n",
        outcome.count - outcome.missing.size() - outcome.partial.size(), outcome.count);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Command add_merge_command(CLI::App& app) {
  const auto options = std::make_shared<MergeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "merge",
      "Merge the run directories of a sharded bench (bench --shard) into one: the records in one order (by "
      "id)\n"
      "on the first shard's clock, the summary, histograms and SLO verdicts rebuilt from them, shard 0's\n"
      "samples, and run.json \"shards\" naming each shard, the missing and the late (docs/fleet.md).\n"
      "Exit 0; 1 when a shard is missing or was cut short (the merged run is written, partial); 2 bad "
      "input.");
  cmd->add_option("dirs", options->dirs, "The shards' run directories")->required();
  cmd->add_option("--out", options->out, "The merged run directory")->required();
  cmd->add_flag("--overwrite", options->overwrite,
                "--out may hold an earlier run: its files are removed first");
  cmd->add_flag(
      "--report", options->finish.report,
      "Write report.html in the merged run directory: the page of tokenscope report (docs/report.md)");
  add_run_history_options(cmd, options->finish.history, options->tags, "Options");
  return {cmd, [options] { return run_merge(*options); }};
}

}  // namespace tokenscope::cli
