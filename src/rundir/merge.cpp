#include "rundir/merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/record.h"
#include "core/run_dir.h"
#include "core/summary.h"
#include "core/text_reader.h"
#include "rundir/readers.h"
#include "rundir/run_files.h"
#include "rundir/run_json.h"
#include "rundir/shard_info.h"

namespace tokenscope::rundir {

namespace {

namespace fs = std::filesystem;

struct Shard {
  fs::path dir;
  nlohmann::json run;
  ShardInfo info;
  bool partial = false;
  Nanos shift = 0;  // added to every time: onto the first shard's clock
  std::uint64_t records = 0;
  std::uint64_t skipped = 0;  // a cut last line of a shard cut short
  int fd = -1;
};

// A record's place: which shard's requests.jsonl, where its line is.
struct Entry {
  std::uint64_t id;
  std::uint64_t offset;
  std::uint32_t shard;
  std::uint32_t length;
};

// false when a time would leave 64 bits or turn negative (not a time then).
bool shift_record(RequestRecord& r, Nanos d) {
  bool ok = true;
  const auto move = [&](Nanos& t) { ok = ok && !__builtin_add_overflow(t, d, &t) && t >= 0; };
  for (Nanos* t : {&r.t_sched, &r.t_dispatch, &r.t_send, &r.t_headers, &r.t_first_scheduled, &r.t_first_token,
                   &r.t_last_token, &r.t_close, &r.t_first_answer})
    if (*t >= 0) move(*t);
  for (auto& t : r.event_times) move(t);
  return ok;
}

// Every time of a task record (its t_*_ns at any depth: the task's, its
// steps', their judges') moved by d; false when one would leave the clock.
bool shift_task(nlohmann::json& j, Nanos d) {
  bool ok = true;
  if (j.is_array()) {
    for (auto& v : j) ok = shift_task(v, d) && ok;
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      if (k.size() > 5 && k.rfind("t_", 0) == 0 && k.ends_with("_ns") && it->is_number_integer()) {
        Nanos t = it->get<Nanos>();
        if (t < 0) continue;  // not known
        ok = ok && !__builtin_add_overflow(t, d, &t) && t >= 0;
        *it = t;
      } else if (it->is_structured()) {
        ok = shift_task(*it, d) && ok;
      }
    }
  }
  return ok;
}

// The first place where two settings differ, for the message.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b) {
  const auto patch = nlohmann::json::diff(a, b);
  if (patch.empty()) return "";
  const auto& op = patch.front();
  return op.value("path", std::string("/"));
}

void read_index(Shard& s, std::uint32_t which, std::vector<Entry>& index) {
  const fs::path file = s.dir / "requests.jsonl";
  std::error_code ec;
  if (!fs::exists(file, ec)) {
    if (s.partial) return;  // cut short before its first record
    throw InputError(file.string(), 0, "",
                     "missing: a shard's run that reached its end writes requests.jsonl");
  }
  auto reader = TextReader::open_regular(file.string(), "requests file");
  RequestLineParser parser;
  RequestRecord r;
  std::string_view line;
  std::optional<std::string> bad;  // a bad line: fatal unless it is a cut short shard's last
  std::uint64_t bad_line = 0;
  while (reader.next_line(line)) {
    if (bad) throw InputError(file.string(), bad_line, "", *bad);
    if (const auto flaw = reader.flaw_message()) {
      bad = *flaw;
      bad_line = reader.line_number();
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      parser.parse(line, r);
    } catch (const LineError& e) {
      bad = fmt::format("field '{}': {}", e.field(), e.what());
      bad_line = reader.line_number();
      continue;
    }
    if (line.size() > UINT32_MAX) throw InputError(file.string(), reader.line_number(), "", "line too long");
    index.push_back({r.id, reader.line_offset(), which, static_cast<std::uint32_t>(line.size())});
    ++s.records;
  }
  if (bad) {
    if (!s.partial) throw InputError(file.string(), bad_line, "", *bad);
    ++s.skipped;  // the line a shard that was cut short was writing
  }
}

}  // namespace

namespace {

// The summary's server keys of shard 0's run.json (null: not known).
ServerCounters server_counters_of(const nlohmann::json& run, const std::string& file) {
  ServerCounters c;
  const auto* sm = json_path(run, {"summary"});
  if (!sm || !sm->is_object()) return c;
  const auto count = [&](const char* key) -> std::optional<std::uint64_t> {
    const auto it = sm->find(key);
    if (it == sm->end() || it->is_null()) return std::nullopt;
    if (!it->is_number_unsigned())
      throw InputError(file, 0, std::string("summary.") + key, "expected a count (an integer of at least 0)");
    return it->get<std::uint64_t>();
  };
  c.prefix_cache_queries_tokens = count("prefix_cache_queries_tokens");
  c.prefix_cache_hits_tokens = count("prefix_cache_hits_tokens");
  c.preemptions_total = count("preemptions_total");
  if (const auto it = sm->find("kv_cache_usage_peak"); it != sm->end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() >= 0 && it->get<double>() <= 1))
      throw InputError(file, 0, "summary.kv_cache_usage_peak", "expected a share from 0 to 1");
    c.kv_cache_usage_peak = it->get<double>();
  }
  return c;
}

}  // namespace

MergeOutcome merge_shards(const std::vector<fs::path>& dirs, const fs::path& out, bool overwrite,
                          std::ostream& log, const std::vector<std::string>& tags,
                          const nlohmann::json& launcher, const TaskSummarizer& summarize_tasks) {
  if (dirs.empty()) throw UsageError("merge: name the shards' run directories");
  std::vector<Shard> shards;
  std::error_code ec;
  for (const auto& dir : dirs) {
    if (fs::exists(out, ec) && fs::exists(dir, ec) && fs::equivalent(out, dir, ec))
      throw UsageError(fmt::format("merge: --out {} is one of the shards: merge into a directory of its own",
                                   out.string()));
    Shard s;
    s.dir = dir;
    const fs::path file = dir / "run.json";
    // A shard that failed before its run began leaves a directory without
    // run.json: it is missing (named below), not a reason to merge nothing.
    if (fs::is_directory(dir, ec) && !fs::exists(file, ec)) {
      log << fmt::format("merge: {}: no run.json (a shard that failed before its run began): left out\n",
                         dir.string());
      continue;
    }
    s.run = read_json_file(file);
    const auto* command = json_path(s.run, {"tool", "command"});
    if (!command || *command != "bench")
      throw InputError(file.string(), 0, "tool.command",
                       "expected a run of bench (only bench runs are sharded)");
    const auto it = s.run.find("shard");
    if (it == s.run.end() || it->is_null())
      throw InputError(file.string(), 0, "shard",
                       "missing: not a shard of a sharded bench run (bench --shard I/N or --shard env)");
    s.info = shard_info_from_json(*it, file.string());
    const auto partial = s.run.find("partial");
    if (partial == s.run.end() || !partial->is_boolean())
      throw InputError(file.string(), 0, "partial", "expected true or false");
    s.partial = partial->get<bool>();
    shards.push_back(std::move(s));
  }
  if (shards.empty()) throw UsageError("merge: none of the directories holds a shard's run.json");
  std::sort(shards.begin(), shards.end(),
            [](const Shard& a, const Shard& b) { return a.info.index < b.info.index; });
  const Shard& first = shards.front();
  const std::string first_file = (first.dir / "run.json").string();
  for (std::size_t k = 1; k < shards.size(); ++k) {
    const Shard& s = shards[k];
    const std::string file = (s.dir / "run.json").string();
    if (s.info.index == shards[k - 1].info.index)
      throw InputError(file, 0, "shard.index",
                       fmt::format("shard {} is also {}: one directory per shard", s.info.index,
                                   shards[k - 1].dir.string()));
    if (s.info.count != first.info.count)
      throw InputError(file, 0, "shard.count",
                       fmt::format("{} shards, where {} has {}: shards of different runs", s.info.count,
                                   first_file, first.info.count));
    if (s.info.start_at_unix_ns != first.info.start_at_unix_ns)
      throw InputError(file, 0, "shard.start_at_unix_ns",
                       fmt::format("{}, where {} has {}: shards of different runs (bench --start-at)",
                                   s.info.start_at_unix_ns, first_file, first.info.start_at_unix_ns));
    const auto* a = json_path(first.run, {"settings", "requested"});
    const auto* b = json_path(s.run, {"settings", "requested"});
    if (!a || !b || *a != *b)
      throw InputError(
          file, 0, "settings.requested" + (a && b ? first_difference(*a, *b) : std::string()),
          fmt::format("differs from {}: shards of one run are started with the same settings", first_file));
  }
  MergeOutcome outcome;
  outcome.count = first.info.count;
  {
    std::uint32_t next = 0;
    for (const auto& s : shards) {
      for (; next < s.info.index; ++next) outcome.missing.push_back(next);
      next = s.info.index + 1;
      if (s.partial) outcome.partial.push_back(s.info.index);
      if (s.info.ready_late_ns > 0) outcome.late.push_back(s.info.index);
    }
    for (; next < outcome.count; ++next) outcome.missing.push_back(next);
  }
  for (auto& s : shards) s.shift = first.info.epoch_monotonic_ns - s.info.epoch_monotonic_ns;

  // Pass 1: where every record is; then the canonical order.
  std::vector<Entry> index;
  for (std::uint32_t k = 0; k < shards.size(); ++k) read_index(shards[k], k, index);
  std::sort(index.begin(), index.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
  for (std::size_t i = 1; i < index.size(); ++i)
    if (index[i].id == index[i - 1].id) {
      const auto file = (shards[index[i].shard].dir / "requests.jsonl").string();
      if (index[i].shard == index[i - 1].shard)
        throw InputError(file, 0, "id",
                         fmt::format("request {} is there twice: one id, two records", index[i].id));
      throw InputError(
          file, 0, "id",
          fmt::format("request {} is also in {}: the shards' shares overlap (shards of different "
                      "runs, or one shard run twice)",
                      index[i].id, (shards[index[i - 1].shard].dir / "requests.jsonl").string()));
    }

  // Pass 2: the records in that order, onto the merged clock, into the
  // merged requests.jsonl and the summary.
  struct Closer {
    std::vector<Shard>& shards;
    ~Closer() {
      for (auto& s : shards)
        if (s.fd >= 0) ::close(s.fd);
    }
  } closer{shards};
  for (auto& s : shards) {
    const auto file = s.dir / "requests.jsonl";
    if (s.records == 0) continue;
    s.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (s.fd < 0) throw IoError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
  }
  claim_run_directory(out, overwrite, "--out");
  RunDirectory dir(out, false);
  SummaryBuilder summary;
  summary.set_slos(first.info.slos);
  summary.set_slo_from_schedule(first.info.slo_from_schedule);
  // Shard 0's counters span the whole run when its last scrape came after
  // every shard's last response (bench --mpi): kept, as one process's.
  const bool counters_kept = first.info.index == 0 && first.info.counters_span_all_shards;
  if (counters_kept)
    summary.set_server_counters(server_counters_of(first.run, (first.dir / "run.json").string()));
  RequestLineParser parser;
  RequestRecord r;
  std::string buffer;
  std::uint64_t written = 0;
  for (const auto& e : index) {
    Shard& s = shards[e.shard];
    buffer.resize(e.length);
    std::size_t got = 0;
    while (got < e.length) {
      const auto n = ::pread(s.fd, buffer.data() + got, e.length - got, static_cast<off_t>(e.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw IoError(fmt::format("{}: changed while it was merged (a line could not be read again)",
                                  (s.dir / "requests.jsonl").string()));
      got += static_cast<std::size_t>(n);
    }
    parser.parse(buffer, r);
    if (!shift_record(r, s.shift))
      throw InputError(
          (s.dir / "requests.jsonl").string(), 0, "t_*",
          fmt::format("request {}: its times, moved by {} ns onto the first shard's clock, leave the "
                      "clock's range (a time or an epoch that is not this run's)",
                      r.id, s.shift));
    summary.add(r);
    r.append_json(dir.requests().begin_line());
    dir.requests().end_line();
    if (++written % 4096 == 0) dir.requests().flush();
  }
  dir.requests().flush();
  outcome.records = written;

  // Shard 0's observations (only it observes), on the merged clock already.
  const bool observed = first.info.index == 0 && fs::exists(first.dir / "samples.jsonl");
  if (observed) {
    auto reader = TextReader::open_regular((first.dir / "samples.jsonl").string(), "samples file");
    for (std::string_view line; reader.next_line(line);)
      if (!line.empty()) dir.samples().append_line(line);
    dir.samples().flush();
  }

  // Tasks (task classes; each task whole on one shard): their records on the
  // merged clock, by id, and the summary rebuilt from them.
  std::vector<nlohmann::json> tasks;
  bool any_tasks = false;
  TaskLineParser task_parser;
  TaskRecord task_record;
  for (auto& sh : shards) {
    const fs::path file = sh.dir / "tasks.jsonl";
    if (!fs::exists(file)) continue;
    any_tasks = true;
    auto reader = TextReader::open_regular(file.string(), "tasks file");
    std::size_t line_no = 0, cut = 0;
    std::string cut_message;
    for (std::string_view line; reader.next_line(line);) {
      ++line_no;
      if (line.empty()) continue;
      if (cut > 0) break;  // a bad line followed by more: said below
      // Checked as every reader of tasks.jsonl checks it (fields, types, depth), then kept whole.
      try {
        task_parser.parse(line, task_record);
      } catch (const LineError& e) {
        if (sh.partial) {  // the cut last line of a shard cut short, if nothing follows it
          cut = line_no;
          cut_message = e.what();
          continue;
        }
        throw InputError(file.string(), line_no, e.field(), e.what());
      }
      nlohmann::json t = nlohmann::json::parse(line, nullptr, false);
      if (t.is_discarded() || !t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned())
        throw InputError(file.string(), line_no, "id", "expected a task record: a JSON object with an id");
      if (!shift_task(t, sh.shift))
        throw InputError(
            file.string(), line_no, "t_*_ns",
            fmt::format("task {}: its times, moved by {} ns onto the first shard's clock, leave the "
                        "clock's range",
                        t["id"].get<std::uint64_t>(), sh.shift));
      tasks.push_back(std::move(t));
    }
    if (cut > 0 && cut < line_no) throw InputError(file.string(), cut, "", cut_message);
  }
  std::sort(tasks.begin(), tasks.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["id"].get<std::uint64_t>() < b["id"].get<std::uint64_t>();
  });
  for (std::size_t k = 1; k < tasks.size(); ++k)
    if (tasks[k]["id"] == tasks[k - 1]["id"])
      throw InputError((first.dir / "tasks.jsonl").string(), 0, "id",
                       fmt::format("task {} is in two shards: the shards are not one run's",
                                   tasks[k]["id"].get<std::uint64_t>()));
  if (any_tasks) {
    JsonlWriter out_tasks(out / "tasks.jsonl", false);
    for (const auto& t : tasks) out_tasks.append_line(t.dump());
    out_tasks.close();
  }

  // run.json: the first shard's, with the union's summary and the shards said.
  nlohmann::json run = first.run;
  if (any_tasks) {
    const nlohmann::json first_tasks = first.run.value("tasks", nlohmann::json(nullptr));
    if (summarize_tasks && first_tasks.is_object()) {
      nlohmann::json merged;
      try {
        merged = summarize_tasks(first_tasks, tasks);
      } catch (const nlohmann::json::exception& e) {  // a field no reader checks, of the wrong type
        throw InputError((first.dir / "tasks.jsonl").string(), 0, "tasks",
                         fmt::format("a task record the summary cannot read: {}", e.what()));
      } catch (const std::invalid_argument& e) {  // the classes' SLOs of the first shard's run.json
        throw InputError((first.dir / "run.json").string(), 0, "tasks", e.what());
      }
      // The judge's settings are the run's; the mock tools' faults are each shard's, summed.
      if (const auto it = first_tasks.find("judge"); it != first_tasks.end() && it->is_object())
        for (const char* k : {"configured", "steps", "target", "model"})
          if (it->contains(k)) merged["judge"][k] = (*it)[k];
      nlohmann::json injected = nlohmann::json::object();
      for (const auto& sh : shards)
        if (const auto* ti = json_path(sh.run, {"tasks", "tools_injected"}); ti && ti->is_object())
          for (const auto& [tool, counts] : ti->items())
            for (const auto& [k, v] : counts.items())
              if (v.is_number_unsigned()) {
                nlohmann::json& slot = injected[tool][k];
                slot = (slot.is_number_unsigned() ? slot.get<std::uint64_t>() : 0) + v.get<std::uint64_t>();
              }
      if (!injected.empty()) merged["tools_injected"] = injected;
      run["tasks"] = merged;
    } else {
      run["tasks"] = nullptr;
      run["tasks_note"] = "the task records are merged in tasks.jsonl; no summary was rebuilt";
    }
  }
  run.erase("shard");
  run.erase("kv_locality");
  if (!tags.empty()) {
    if (!run.contains("tags") || !run["tags"].is_array()) run["tags"] = nlohmann::json::array();
    for (const auto& t : tags) run["tags"].push_back(t);
  }
  if (run.contains("server") && run["server"].is_object()) run["server"].erase("hidden_queue");
  const nlohmann::json s = summary.build();
  run["summary"] = s;
  // The load planned is the shards' together: each shard's effective load is its share.
  if (const auto* load = json_path(first.run, {"settings", "effective", "load"});
      load && load->is_object() && load->contains("mode") && (*load)["mode"] == "open") {
    std::uint64_t planned = 0;
    double last_s = 0;
    for (const auto& sh : shards) {
      planned += sh.info.planned_requests;
      if (const auto* l = json_path(sh.run, {"settings", "effective", "load", "last_offset_s"});
          l && l->is_number())
        last_s = std::max(last_s, l->get<double>());
    }
    auto& merged_load = run["settings"]["effective"]["load"];
    merged_load["planned_requests"] = planned;
    merged_load["last_offset_s"] = last_s;
    if (const auto it = load->find("rate_is_offered_average"); it != load->end() && *it == true)
      merged_load["rate_rps"] =
          last_s > 0 ? nlohmann::json(static_cast<double>(planned - 1) / last_s) : nlohmann::json("inf");
  }
  nlohmann::json client = nlohmann::json::object();
  for (const auto& sh : shards)
    if (const auto it = sh.run.find("client"); it != sh.run.end() && it->is_object())
      for (const auto& [k, v] : it->items()) {
        if (!v.is_number()) continue;
        if (v.is_number_unsigned() && (!client.contains(k) || client[k].is_number_unsigned()))
          client[k] = client.value(k, std::uint64_t{0}) + v.get<std::uint64_t>();
        else
          client[k] = (client.contains(k) ? client[k].get<double>() : 0.0) + v.get<double>();
      }
  run["client"] = client;
  const auto* url = json_path(first.run, {"settings", "requested", "target", "url"});
  const auto* max_error_rate = json_path(first.run, {"settings", "requested", "load", "max_error_rate"});
  const std::string failure = error_rate_failure(
      s, max_error_rate && max_error_rate->is_number() ? max_error_rate->get<double>() : 1.0,
      url && url->is_string() ? url->get<std::string>() : "the target", "");
  run["verdict"] = {{"failed", !failure.empty()},
                    {"reason", failure.empty() ? nlohmann::json(nullptr) : nlohmann::json(failure)}};
  run["partial"] = !outcome.complete();
  nlohmann::json list = nlohmann::json::array();
  double clock_error_us = 0;
  bool clocks_known = true;
  // Offsets measured to rank 0 (bench --mpi): two shards' starts differ by
  // at most the sum of their bounds, whatever NTP says.
  bool offsets_measured = true;
  std::vector<std::int64_t> offset_errors;
  for (const auto& sh : shards) {
    clocks_known = clocks_known && sh.info.clock_sync.available && sh.info.clock_sync.synchronized;
    clock_error_us = std::max(clock_error_us, sh.info.clock_sync.max_error_us);
    offsets_measured = offsets_measured && sh.info.clock_offset.has_value();
    if (sh.info.clock_offset) offset_errors.push_back(sh.info.clock_offset->error_ns);
    list.push_back({{"index", sh.info.index},
                    {"dir", sh.dir.string()},
                    {"source", sh.info.source},
                    {"planned_requests", sh.info.planned_requests},
                    {"users", sh.info.users ? nlohmann::json(*sh.info.users) : nlohmann::json(nullptr)},
                    {"records", sh.records},
                    {"lines_skipped", sh.skipped},
                    {"partial", sh.partial},
                    {"ready_late_ms", nanos_to_ms(sh.info.ready_late_ns)},
                    {"shift_ns", sh.shift},
                    {"clock_sync", to_json(sh.info).at("clock_sync")},
                    {"clock_offset", to_json(sh.info).value("clock_offset", nlohmann::json(nullptr))}});
  }
  nlohmann::json alignment_us = clocks_known ? nlohmann::json(2 * clock_error_us) : nlohmann::json(nullptr);
  if (offsets_measured && !offset_errors.empty()) {
    std::sort(offset_errors.rbegin(), offset_errors.rend());
    const double two = static_cast<double>(offset_errors[0]) +
                       (offset_errors.size() > 1 ? static_cast<double>(offset_errors[1]) : 0.0);
    alignment_us = two / 1000.0;
  }
  run["shards"] = {
      {"count", outcome.count},
      {"merged", list},
      {"missing", outcome.missing},
      {"partial", outcome.partial},
      {"late", outcome.late},
      {"start_at_unix_ns", first.info.start_at_unix_ns},
      {"clock",
       "the first shard's monotonic clock; each shard's times moved by the difference of its epoch "
       "(the agreed start on its own clock)"},
      // Two hosts' starts differ by at most the sum of their clocks' errors.
      {"start_alignment_error_us", alignment_us},
      {"start_alignment_from", offsets_measured ? "the clock offsets measured to rank 0 (MPI round trips)"
                                                : "the hosts' clock discipline (adjtimex)"},
      {"observed_by", observed ? nlohmann::json(0) : nlohmann::json(nullptr)},
      {"server_counters",
       !counters_kept ? "not merged: shard 0's scrapes end with its own share"
       : outcome.missing.empty()
           ? "shard 0's: its last scrape came after every shard's last response"
           : "shard 0's: its last scrape came after every shard's last response; they also count the "
             "requests of the missing shards that reached the server"},
      {"not_merged", "the hidden queue and the KV-cache locality fit (computed on one shard's records)"}};
  if (!launcher.is_null()) run["shards"]["launcher"] = launcher;
  dir.write_run_json(run);
  dir.close();

  log << fmt::format("merge: {} records from {} of {} shards into {}\n", written, shards.size(),
                     outcome.count, out.string());
  if (!outcome.missing.empty())
    log << fmt::format("merge: shards missing: {} (their share of the schedule is not in the run)\n",
                       fmt::join(outcome.missing, ", "));
  if (!outcome.partial.empty())
    log << fmt::format("merge: shards cut short: {} (their records so far are in the run)\n",
                       fmt::join(outcome.partial, ", "));
  for (const auto& sh : shards)
    if (sh.info.ready_late_ns > 0)
      log << fmt::format(
          "merge: shard {} was ready {:.1f} ms after the agreed start: its requests due before then went "
          "late "
          "(their send lag shows it)\n",
          sh.info.index, nanos_to_ms(sh.info.ready_late_ns));
  if (!clocks_known && !offsets_measured)
    log << "merge: a shard's host clock is not known to be synchronized (NTP): the shards' starts may differ "
           "by "
           "its error\n";
  return outcome;
}

}  // namespace tokenscope::rundir
