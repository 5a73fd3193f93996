// The report's loader (report_data.h load_report_input): runs, sweeps and
// probe results told apart by their files.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "report/report_data.h"
#include "rundir/run_set.h"

namespace tokenscope::report {

namespace fs = std::filesystem;
using rundir::read_json_file;

namespace {

// A probe's result file: an object with "probe" and "format_version"
// (docs/probes.md). nullopt when the file is some other JSON.
std::optional<ProbeData> read_probe(const fs::path& file) {
  nlohmann::json j = read_json_file(file);
  if (!j.contains("probe") || !j["probe"].is_string() || !j.contains("format_version")) return std::nullopt;
  ProbeData p;
  p.file = file;
  p.probe = j["probe"].get<std::string>();
  p.result = std::move(j);
  return p;
}

// A directory of probe results (probe ... --out DIR): its <probe>.json files in
// name order; empty when it holds none.
std::vector<ProbeData> read_probe_dir(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  // The error_code forms throughout: an entry that is a link loop or gone is
  // skipped, never an exception out of the iteration.
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code entry_ec;
    if (it->is_regular_file(entry_ec) && it->path().extension() == ".json") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::vector<ProbeData> out;
  for (const auto& f : files) {
    std::optional<ProbeData> p;
    try {
      p = read_probe(f);
    } catch (const InputError&) {
      continue;  // another JSON file in the folder
    }
    if (p) out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace

// Long: the kinds of input a report takes (runs, sweeps, probe results) are
// told apart and loaded here in one place, with one message per bad input.
ReportInput load_report_input(const std::vector<fs::path>& paths, const LoadOptions& options) {
  ReportInput in;
  if (paths.empty()) throw UsageError("report: name at least one run directory");
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec) && p.extension() == ".json") {
      auto probe = read_probe(p);
      if (!probe)
        throw UsageError(
            fmt::format("{}: not a probe result (no \"probe\" and \"format_version\"): report "
                        "reads run directories, sweep directories and probe --out files",
                        p.string()));
      in.probes.push_back(std::move(*probe));
      continue;
    }
    if (fs::is_directory(p, ec) && !fs::exists(p / "run.json", ec) && !fs::exists(p / "requests.jsonl", ec) &&
        !fs::exists(p / "sweep.json", ec)) {
      auto probes = read_probe_dir(p);
      if (!probes.empty()) {
        for (auto& probe : probes) in.probes.push_back(std::move(probe));
        continue;
      }
    }
    if (fs::exists(p / "sweep.json", ec) && !fs::exists(p / "run.json", ec)) {
      SweepData sweep;
      sweep.dir = p;
      sweep.name = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
      sweep.sweep_json = read_json_file(p / "sweep.json");
      std::vector<std::pair<double, fs::path>> rates;
      // A server sweep lists its points (NAME-V/): each a run, or a run set
      // of repeats whose first run stands for it.
      const auto set = rundir::read_run_set(p);
      const bool server_sweep = set && set->kind == "server";
      if (server_sweep)
        for (const auto& dir : set->listed) {
          if (fs::exists(dir / "run.json", ec)) {
            rates.emplace_back(rates.size(), dir);
          } else if (const auto inner = rundir::read_run_set(dir); inner && !inner->runs.empty()) {
            rates.emplace_back(rates.size(), inner->runs.front());
          }
        }
      for (auto it = fs::directory_iterator(p, ec); !server_sweep && !ec && it != fs::directory_iterator();
           it.increment(ec)) {
        const std::string n = it->path().filename().string();
        // rate-R/ (a rate sweep) or repeat-K/ (repeats): ordered by R or K.
        const std::size_t prefix = n.rfind("rate-", 0) == 0 ? 5 : n.rfind("repeat-", 0) == 0 ? 7 : 0;
        if (prefix == 0) continue;
        std::error_code entry_ec;
        const bool is_dir = it->is_directory(entry_ec);
        if (entry_ec) {  // a link loop, a dangling link: said, not fatal
          in.notes.push_back(
              fmt::format("{}: left out: {}", display_text(it->path().string()), entry_ec.message()));
          continue;
        }
        if (!is_dir) continue;
        char* end = nullptr;
        const double rate = std::strtod(n.c_str() + prefix, &end);
        if (end == n.c_str() + prefix) continue;
        rates.emplace_back(rate, it->path());
      }
      if (ec)
        throw UsageError(fmt::format("{}: cannot list the sweep directory: {}", p.string(), ec.message()));
      std::sort(rates.begin(), rates.end());
      if (rates.empty())
        in.notes.push_back(
            fmt::format("{}: sweep.json but no run directory (rate-*, repeat-* or listed)", p.string()));
      for (auto& [rate, dir] : rates) {
        // A rate swept with --repeat: rate-R/ is a directory of repeats,
        // whose first run stands for it.
        if (!fs::exists(dir / "run.json", ec))
          if (const auto inner = rundir::read_run_set(dir); inner && !inner->runs.empty())
            dir = inner->runs.front();
        try {
          RunData run = load_run(dir, options);
          sweep.runs.push_back(in.runs.size());
          in.runs.push_back(std::move(run));
        } catch (const UsageError& e) {  // a rate the sweep did not reach (interrupted): said, not fatal
          in.notes.push_back(fmt::format("{}: left out: {}", dir.string(), e.what()));
          continue;
        }
        in.runs.back().name = sweep.name + "/" +
                              (!fs::equivalent(dir.parent_path(), p, ec)
                                   ? dir.parent_path().filename().string() + "/" + in.runs.back().name
                                   : in.runs.back().name);
      }
      in.sweeps.push_back(std::move(sweep));
      continue;
    }
    in.runs.push_back(load_run(p, options));
  }
  // Runs overlaid with different settings: say which settings differ.
  if (in.runs.size() > 1) {
    const auto effective = [](const RunData& r) -> nlohmann::json {
      const nlohmann::json* s = &r.run_json;
      for (const char* k : {"settings", "effective"}) {
        if (!s->is_object() || !s->contains(k)) return nullptr;
        s = &(*s)[k];
      }
      return *s;
    };
    // Every leaf setting ("load.rate_rps") of any run, compared across all
    // runs (a leaf a run lacks counts as null there). Left out: what a run
    // observed rather than was asked (the last arrival, the prompt check,
    // the rows read), the in-process server's port, and within one sweep the
    // rate it sweeps.
    std::vector<std::map<std::string, nlohmann::json>> leaves(in.runs.size());
    const std::function<void(const nlohmann::json&, const std::string&,
                             std::map<std::string, nlohmann::json>&)>
        flatten = [&](const nlohmann::json& j, const std::string& path,
                      std::map<std::string, nlohmann::json>& out) {
          if (j.is_object() && !j.empty()) {
            for (const auto& [k, v] : j.items()) flatten(v, path.empty() ? k : path + "." + k, out);
          } else {
            out[path] = j;
          }
        };
    bool all_in_process = true;
    for (std::size_t i = 0; i < in.runs.size(); ++i) {
      const auto e = effective(in.runs[i]);
      if (e.is_object()) flatten(e, "", leaves[i]);
      const auto it = leaves[i].find("target.in_process");
      all_in_process &= it != leaves[i].end() && it->second == true;
    }
    const bool one_sweep = in.sweeps.size() == 1 && in.sweeps[0].runs.size() == in.runs.size();
    std::vector<std::string> ignored = {
        "load.last_offset_s", "load.planned_requests", "prompts.server_check",      "workload.requests",
        "workload.rows_read", "workload.rows_skipped", "workload.skipped_examples", "engine.notes"};
    if (all_in_process) ignored.push_back("target.url");
    if (one_sweep && json_at(in.sweeps[0].sweep_json, {"kind"}) == "server")
      ignored.push_back("target.server_info");  // what the swept setting changed
    if (one_sweep) {
      ignored.push_back("load.rate_rps");
      ignored.push_back("workload.description");
    }
    const auto is_ignored = [&](const std::string& key) {
      for (const auto& p : ignored)
        if (key == p || key.rfind(p + ".", 0) == 0) return true;
      return false;
    };
    std::set<std::string> keys;
    for (const auto& l : leaves)
      for (const auto& [k, v] : l)
        if (!is_ignored(k)) keys.insert(k);
    std::vector<std::string> differing;
    for (const auto& k : keys) {
      const auto value = [&](std::size_t i) {
        const auto it = leaves[i].find(k);
        return it == leaves[i].end() ? nlohmann::json() : it->second;
      };
      for (std::size_t i = 1; i < in.runs.size(); ++i)
        if (value(i) != value(0)) {
          differing.push_back(k);
          break;
        }
    }
    if (!differing.empty()) {
      std::string list;
      for (std::size_t i = 0; i < differing.size() && i < 8; ++i)
        list += (list.empty() ? "" : ", ") + differing[i];
      if (differing.size() > 8) list += fmt::format(" and {} more", differing.size() - 8);
      in.notes.push_back(
          fmt::format("the runs overlaid differ in their effective settings ({}): compare with care", list));
    }
  }
  // Runs named alike (two directories called "run"): the names take their
  // parent directories until they differ.
  for (std::size_t depth = 1; depth < 8; ++depth) {
    std::map<std::string, int> count;
    for (const auto& r : in.runs) ++count[r.name];
    bool clash = false;
    for (auto& r : in.runs) {
      if (count[r.name] < 2) continue;
      clash = true;
      fs::path p = fs::absolute(r.dir).lexically_normal();
      if (!p.has_filename()) p = p.parent_path();
      std::vector<std::string> parts;
      for (std::size_t k = 0; k <= depth && !p.empty() && p != p.root_path(); ++k, p = p.parent_path())
        parts.insert(parts.begin(), p.filename().string());
      std::string name;
      for (const auto& part : parts) name += (name.empty() ? "" : "/") + part;
      r.name = name;
    }
    if (!clash) break;
  }
  return in;
}

}  // namespace tokenscope::report
