#include "analyze/history.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <variant>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/text_reader.h"
#include "rundir/readers.h"

namespace tokenscope::analyze {

namespace {

namespace fs = std::filesystem;

// The schema's migrations: kMigrations[v] brings a database from version v
// to v + 1. A new version appends one (never edits a published one).
constexpr const char* kMigrations[] = {
    // 0 -> 1: the runs and their headline metrics.
    R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  path TEXT NOT NULL,
  command TEXT NOT NULL,
  started_unix REAL,
  finished_unix REAL NOT NULL,
  partial INTEGER NOT NULL,
  workload_hash TEXT NOT NULL,
  target TEXT NOT NULL,
  target_version TEXT NOT NULL,
  settings_hash TEXT NOT NULL,
  tags TEXT NOT NULL,
  settings TEXT NOT NULL,
  summary TEXT NOT NULL,
  environment TEXT NOT NULL
);
-- Covers listing: the small columns in time order, so that a list never
-- reads the rows' JSON documents.
CREATE INDEX runs_by_time ON runs (finished_unix, id, partial, command, target, workload_hash, settings_hash,
                                   path, started_unix, target_version, tags);
CREATE INDEX runs_by_path ON runs (path);
CREATE INDEX runs_comparable ON runs (settings_hash, workload_hash, target, finished_unix);
CREATE TABLE metrics (
  run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  value REAL NOT NULL,
  PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE INDEX metrics_by_name ON metrics (name, run_id);
)sql",
};
static_assert(std::size(kMigrations) == kHistorySchemaVersion);

// How long a writer waits for another process's transaction, ms: a run is
// registered once at its end, so waiting a minute on a loaded machine (two
// benches and a build on two cores) is better than failing.
constexpr int kBusyTimeoutMs = 60000;

// The member of j at the path of keys, or nullptr when a step is missing or
// not an object.
const nlohmann::json* at(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const nlohmann::json* p = &j;
  for (const char* k : keys) {
    if (!p->is_object()) return nullptr;
    const auto it = p->find(k);
    if (it == p->end()) return nullptr;
    p = &*it;
  }
  return p;
}

std::string string_at(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const auto* p = at(j, keys);
  return p && p->is_string() ? p->get<std::string>() : std::string();
}

// Whether a settings key names a seed: "seed", "seed_*" or "*_seed".
bool is_seed_key(std::string_view k) {
  return k == "seed" || k.starts_with("seed_") || k.ends_with("_seed");
}

// Settings without their seeds, at any depth of objects.
nlohmann::json without_seeds(nlohmann::json settings) {
  if (!settings.is_object()) return settings;
  for (auto it = settings.begin(); it != settings.end();) {
    if (is_seed_key(it.key())) {
      it = settings.erase(it);
    } else {
      *it = without_seeds(std::move(*it));
      ++it;
    }
  }
  return settings;
}

const nlohmann::json& requested_of(const nlohmann::json& run) {
  const auto* r = at(run, {"settings", "requested"});
  if (!r || !r->is_object())
    throw InputError("run.json", 0, "settings.requested", "missing: not a run directory of bench or sim");
  return *r;
}

std::string command_of(const nlohmann::json& run) {
  const std::string c = string_at(run, {"tool", "command"});
  if (c != "bench" && c != "sim")
    throw InputError("run.json", 0, "tool.command",
                     fmt::format("expected bench or sim, got {}", c.empty() ? "none" : quote_input(c)));
  return c;
}

// bench's effective open-loop rate (a number, "inf", or null in the closed
// loop); null for sim, whose rate is in its requested workload.
nlohmann::json rate_of(const nlohmann::json& run) {
  const auto* r = at(run, {"settings", "effective", "load", "rate_rps"});
  return r ? *r : nlohmann::json(nullptr);
}

// "id VERSION (owned_by X)" of the first model of bench's /v1/models record.
std::string model_version(const nlohmann::json& models) {
  const auto* list = at(models, {"models"});
  if (!list || !list->is_array() || list->empty() || !(*list)[0].is_object()) return {};
  const auto& m = (*list)[0];
  std::string s = m.value("id", "");
  if (m.contains("version") && m["version"].is_string()) s += " " + m["version"].get<std::string>();
  if (m.contains("owned_by") && m["owned_by"].is_string())
    s += " (owned_by " + m["owned_by"].get<std::string>() + ")";
  return s;
}

// ---- SQLite ----------------------------------------------------------

// A statement with its bound parameters; finalised on destruction.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql, const fs::path& path) : db_(db), path_(path) {
    const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), 0, &s_, nullptr);
    if (rc != SQLITE_OK) fail(rc, "prepare");
  }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind(int i, std::string_view v) {
    check(sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  void bind(int i, double v) { check(sqlite3_bind_double(s_, i, v)); }
  void bind(int i, std::int64_t v) { check(sqlite3_bind_int64(s_, i, v)); }
  void bind_null(int i) { check(sqlite3_bind_null(s_, i)); }
  // Steps once: true when a row is there.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(rc, "step");
  }
  void reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::int64_t int64(int c) const { return sqlite3_column_int64(s_, c); }
  double real(int c) const { return sqlite3_column_double(s_, c); }
  bool is_null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }

  [[noreturn]] void fail(int rc, std::string_view what) const;

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail(rc, "bind");
  }
  sqlite3* db_;
  const fs::path& path_;
  sqlite3_stmt* s_ = nullptr;
};

// The error of a failed SQLite call: a file that is not a (sound) history is
// the user's to fix (UsageError, exit 2); a lock held too long or a failed
// write is the environment's (IoError).
[[noreturn]] void sqlite_fail(sqlite3* db, const fs::path& path, int rc, std::string_view what) {
  const std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw UsageError(
          fmt::format("history {}: not a readable tokenscope history database ({}); give "
                      "another --history PATH or move this file away",
                      path.string(), msg));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      throw UsageError(fmt::format("history {}: cannot open it for writing ({})", path.string(), msg));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw IoError(fmt::format("history {}: still locked by another process after {} s ({})", path.string(),
                                kBusyTimeoutMs / 1000, msg));
    default:
      throw IoError(fmt::format("history {}: {} failed: {}", path.string(), what, msg));
  }
}

void Statement::fail(int rc, std::string_view what) const {
  sqlite_fail(db_, path_, rc, what);
}

using Param = std::variant<std::string, double, std::int64_t>;

// The WHERE clause of a filter over `runs r`, and its parameters in order.
std::string where_clause(const HistoryFilter& f, std::vector<Param>& params) {
  std::string sql = " WHERE 1";
  const auto eq = [&](const char* column, const std::optional<std::string>& v) {
    if (!v) return;
    sql += fmt::format(" AND r.{} = ?", column);
    params.emplace_back(*v);
  };
  eq("command", f.command);
  eq("target", f.target);
  eq("workload_hash", f.workload_hash);
  eq("settings_hash", f.settings_hash);
  if (f.tag) {
    sql += " AND EXISTS (SELECT 1 FROM json_each(r.tags) WHERE json_each.value = ?)";
    params.emplace_back(*f.tag);
  }
  if (f.since_unix) {
    sql += " AND r.finished_unix >= ?";
    params.emplace_back(*f.since_unix);
  }
  if (!f.include_partial) sql += " AND r.partial = 0";
  return sql;
}

void bind_all(Statement& st, const std::vector<Param>& params, int first = 1) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int k = first + static_cast<int>(i);
    std::visit([&](const auto& v) { st.bind(k, v); }, params[i]);
  }
}

constexpr const char* kRunColumns =
    "r.id, r.path, r.command, r.started_unix, r.finished_unix, r.partial, r.workload_hash, r.target, "
    "r.target_version, r.settings_hash, r.tags";
constexpr const char* kDocumentColumns = ", r.settings, r.summary, r.environment";

nlohmann::json parse_document(const std::string& text) {
  // A document of the history file: tokenscope wrote it, but the file is
  // outside input (a deeper one is taken as damaged, as a malformed one is).
  if (json_too_deep_at(text) != std::string_view::npos)
    return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

HistoryRun run_from_row(const Statement& st, bool with_documents) {
  HistoryRun r;
  r.id = st.int64(0);
  r.path = st.text(1);
  r.command = st.text(2);
  if (!st.is_null(3)) r.started_unix = st.real(3);
  r.finished_unix = st.real(4);
  r.partial = st.int64(5) != 0;
  r.workload_hash = st.text(6);
  r.target = st.text(7);
  r.target_version = st.text(8);
  r.settings_hash = st.text(9);
  const std::string tags_text = st.text(10);
  const auto tags = tags_text == "[]" ? nlohmann::json::array() : parse_document(tags_text);
  if (tags.is_array())
    for (const auto& t : tags)
      if (t.is_string()) r.tags.push_back(t.get<std::string>());
  if (with_documents) {
    r.settings = parse_document(st.text(11));
    r.summary = parse_document(st.text(12));
    r.environment = parse_document(st.text(13));
  }
  return r;
}

std::size_t metric_index(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kHistoryMetrics); ++i)
    if (kHistoryMetrics[i].name == name) return i;
  return std::size(kHistoryMetrics);
}

// A number with nothing after it (from_chars: no locale, no leading '+').
std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

// ---- pure parts --------------------------------------------------------

const HistoryMetric* find_history_metric(std::string_view name) {
  const std::size_t i = metric_index(name);
  return i < std::size(kHistoryMetrics) ? &kHistoryMetrics[i] : nullptr;
}

std::vector<std::pair<std::string, double>> headline_metrics(const nlohmann::json& summary) {
  std::vector<std::pair<std::string, double>> out;
  if (!summary.is_object()) return out;
  const auto* reasoning = at(summary, {"requests_with_reasoning"});
  const bool with_reasoning = reasoning && reasoning->is_number() && reasoning->get<double>() > 0;
  for (const auto& m : kHistoryMetrics) {
    if (!with_reasoning && (m.name.starts_with("ttfo_ms.") || m.name.starts_with("tpot_answer_ms.")))
      continue;
    std::optional<double> v;
    if (m.name == "error_rate") {
      const auto* total = at(summary, {"requests_total"});
      const auto* failed = at(summary, {"requests_failed"});
      if (total && failed && total->is_number() && failed->is_number() && total->get<double>() > 0)
        v = failed->get<double>() / total->get<double>();
    } else {
      const std::string name(m.name);
      const auto dot = name.find('.');
      const auto* p = dot == std::string::npos
                          ? at(summary, {name.c_str()})
                          : at(summary, {name.substr(0, dot).c_str(), name.substr(dot + 1).c_str()});
      if (p && p->is_number()) v = p->get<double>();
    }
    if (v && std::isfinite(*v)) out.emplace_back(std::string(m.name), *v);
  }
  return out;
}

std::string fnv1a64_hex(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return fmt::format("{:016x}", h);
}

nlohmann::json comparable_settings(const nlohmann::json& run) {
  const std::string command = command_of(run);
  nlohmann::json requested = without_seeds(requested_of(run));
  if (requested.contains("target") && requested["target"].is_object()) requested["target"].erase("url");
  if (requested.contains("load") && requested["load"].is_object()) requested["load"].erase("max_error_rate");
  requested.erase("output");
  return {{"command", command}, {"requested", requested}, {"rate_rps", rate_of(run)}};
}

nlohmann::json comparable_workload(const nlohmann::json& run) {
  command_of(run);
  const nlohmann::json& requested = requested_of(run);
  const auto* w = at(requested, {"workload"});
  const auto* file = at(requested, {"workload_file"});
  return {{"workload", w ? without_seeds(*w) : nlohmann::json(nullptr)},
          {"workload_file", file ? *file : nlohmann::json(nullptr)},
          {"rate_rps", rate_of(run)}};
}

std::string settings_hash(const nlohmann::json& run) {
  return fnv1a64_hex(comparable_settings(run).dump());
}

std::string workload_hash(const nlohmann::json& run) {
  return fnv1a64_hex(comparable_workload(run).dump());
}

std::optional<double> HistoryRun::metric(std::string_view name) const {
  for (const auto& [n, v] : metrics)
    if (n == name) return v;
  return std::nullopt;
}

HistoryRun history_run_from_json(const nlohmann::json& run, std::string path,
                                 const RegisterOptions& options) {
  HistoryRun r;
  r.path = std::move(path);
  r.command = command_of(run);
  r.settings_hash = settings_hash(run);
  r.workload_hash = workload_hash(run);
  r.settings = run.at("settings");
  r.partial = run.contains("partial") && run["partial"].is_boolean() && run["partial"].get<bool>();
  r.summary = run.contains("summary") ? run["summary"] : nlohmann::json(nullptr);
  r.metrics = headline_metrics(r.summary);
  const auto add_tag = [&](const std::string& t) {
    if (std::find(r.tags.begin(), r.tags.end(), t) == r.tags.end()) r.tags.push_back(t);
  };
  if (const auto* tags = at(run, {"tags"}); tags && tags->is_array())
    for (const auto& t : *tags)
      if (t.is_string()) add_tag(t.get<std::string>());
  for (const auto& t : options.tags) add_tag(t);

  const auto* models = at(run, {"settings", "effective", "target", "models"});
  if (r.command == "sim") {
    r.target = "sim";
    r.target_version = "tokenscope " + string_at(run, {"tool", "version"});
  } else {
    const std::string url = string_at(run, {"settings", "requested", "target", "url"});
    r.target = url.empty() ? "in-process" : url;
    r.target_version = models ? model_version(*models) : std::string();
    // What the server says of its build (run.json settings.effective.target.server_info) comes first.
    if (const auto* si = at(run, {"settings", "effective", "target", "server_info"});
        si && si->is_object() && si->contains("version") && (*si)["version"].is_string())
      r.target_version =
          (si->contains("engine") && (*si)["engine"].is_string() ? (*si)["engine"].get<std::string>() + " "
                                                                 : std::string()) +
          (*si)["version"].get<std::string>();
    if (r.target_version.empty())
      r.target_version = string_at(run, {"settings", "effective", "target", "model"});
  }
  for (const auto& t : r.tags)
    if (t.rfind("version=", 0) == 0) {
      r.target_version = t.substr(8);
      break;
    }

  if (options.started_unix) {
    r.started_unix = options.started_unix;
  } else if (const auto* ns = at(run, {"clock", "unix_ns"}); ns && ns->is_number()) {
    r.started_unix = ns->get<double>() / 1e9;
  }
  r.finished_unix = options.finished_unix.value_or(0.0);

  nlohmann::json env = nlohmann::json::object();
  if (const auto* tool = at(run, {"tool"})) env["tool"] = *tool;
  if (const auto* e = at(run, {"environment"})) env["environment"] = *e;
  if (const auto* ip = at(run, {"settings", "effective", "target", "in_process"})) env["in_process"] = *ip;
  if (models) env["models"] = *models;
  if (const auto* engines = at(run, {"server", "engines"})) env["engines"] = *engines;
  if (const auto* eng = at(run, {"settings", "effective", "engine"}); eng && eng->is_object()) {
    nlohmann::json e = nlohmann::json::object();
    if (const auto* m = at(*eng, {"model", "name"})) e["model"] = *m;
    if (const auto* g = at(*eng, {"gpu", "name"})) e["gpu"] = *g;
    if (const auto* tp = at(*eng, {"tensor_parallel"})) e["tensor_parallel"] = *tp;
    env["simulated_engine"] = e;
  }
  r.environment = env;
  return r;
}

HistoryRun history_run_from_directory(const fs::path& dir, const RegisterOptions& options) {
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) throw UsageError(fmt::format("{}: cannot be resolved: {}", dir.string(), ec.message()));
  const fs::path file = abs / "run.json";
  if (std::error_code ec2; !fs::exists(file, ec2))
    throw UsageError(fmt::format("{}: no run.json there (not a run directory)", dir.string()));
  const std::string text = read_regular_file(file.string(), "run.json", rundir::kMaxRunJsonBytes);
  require_json_depth(text, file.string());
  nlohmann::json run = nlohmann::json::parse(text, nullptr, false);
  if (run.is_discarded() || !run.is_object())
    throw InputError(file.string(), 0, "run.json", "not a JSON object");
  RegisterOptions o = options;
  if (!o.finished_unix) {
    const auto mtime = fs::last_write_time(file, ec);
    if (!ec) {
      const auto sys = std::chrono::file_clock::to_sys(mtime);
      o.finished_unix = std::chrono::duration<double>(sys.time_since_epoch()).count();
    }
  }
  try {
    return history_run_from_json(run, abs.string(), o);
  } catch (const InputError& e) {
    throw InputError(file.string(), 0, e.field(), e.problem());
  }
}

fs::path history_path_for(const char* xdg_data_home, const char* home) {
  if (xdg_data_home && xdg_data_home[0] == '/') return fs::path(xdg_data_home) / "tokenscope" / "history.db";
  if (home && home[0] == '/') return fs::path(home) / ".local" / "share" / "tokenscope" / "history.db";
  throw UsageError(
      "cannot place the history of runs: neither XDG_DATA_HOME nor HOME is an absolute directory; give "
      "--history PATH (or --no-history)");
}

fs::path default_history_path() {
  return history_path_for(std::getenv("XDG_DATA_HOME"), std::getenv("HOME"));
}

double parse_since(std::string_view text, double now_unix, std::string_view option) {
  const auto bad = [&] {
    return UsageError(fmt::format(
        "{} {}: expected a duration before now (7d, 12h, 30m), a UTC date YYYY-MM-DD[THH:MM[:SS]] or seconds "
        "since the epoch",
        option, quote_input(text)));
  };
  if (text.empty()) throw bad();
  if (const char unit = text.back(); unit == 'd' || unit == 'h' || unit == 'm') {
    const auto n = parse_number(text.substr(0, text.size() - 1));
    if (!n || *n < 0) throw bad();
    const double scale = unit == 'd' ? 86400.0 : unit == 'h' ? 3600.0 : 60.0;
    return now_unix - *n * scale;
  }
  if (text.size() >= 10 && text[4] == '-' && text[7] == '-') {
    std::string s(text);
    if (!s.empty() && s.back() == 'Z') s.pop_back();
    std::tm tm{};
    int sec = 0;
    int used = 0;
    const int n = std::sscanf(s.c_str(), "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &used);
    if (n != 3) throw bad();
    std::size_t pos = static_cast<std::size_t>(used);
    if (pos < s.size()) {
      int used2 = 0;
      if (std::sscanf(s.c_str() + pos, "T%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &used2) != 2) throw bad();
      pos += static_cast<std::size_t>(used2);
      if (pos < s.size()) {
        int used3 = 0;
        if (std::sscanf(s.c_str() + pos, ":%2d%n", &sec, &used3) != 1) throw bad();
        pos += static_cast<std::size_t>(used3);
      }
      if (pos != s.size()) throw bad();
    }
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || sec > 60 || tm.tm_hour < 0 || tm.tm_min < 0 || sec < 0)
      throw bad();
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = sec;
    return static_cast<double>(timegm(&tm));
  }
  if (const auto n = parse_number(text)) return *n;
  throw bad();
}

// ---- the database --------------------------------------------------------

struct History::Db {
  sqlite3* db = nullptr;
  ~Db() { sqlite3_close_v2(db); }
};

namespace {

// Runs SQL without results (several statements allowed).
void exec(sqlite3* db, const fs::path& path, const std::string& sql) {
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) sqlite_fail(db, path, rc, "exec");
}

std::int64_t query_int(sqlite3* db, const fs::path& path, std::string_view sql) {
  Statement st(db, sql, path);
  return st.step() ? st.int64(0) : 0;
}

// A write transaction (BEGIN IMMEDIATE: the write lock at once, so that the
// busy timeout applies and two writers never deadlock on an upgrade); rolled
// back unless committed.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, const fs::path& path) : db_(db), path_(path) {
    exec(db_, path_, "BEGIN IMMEDIATE");
  }
  ~WriteTransaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(db_, path_, "COMMIT");
    done_ = true;
  }

 private:
  sqlite3* db_;
  const fs::path& path_;
  bool done_ = false;
};

// A read transaction: one snapshot (and one lock) for several statements.
class ReadTransaction {
 public:
  ReadTransaction(sqlite3* db, const fs::path& path) : db_(db) { exec(db, path, "BEGIN"); }
  ~ReadTransaction() { sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;

 private:
  sqlite3* db_;
};

// Orders a run's metrics as kHistoryMetrics lists them.
void sort_metrics(std::vector<std::pair<std::string, double>>& metrics) {
  std::vector<std::pair<std::size_t, std::pair<std::string, double>>> keyed;
  keyed.reserve(metrics.size());
  for (auto& m : metrics) keyed.emplace_back(metric_index(m.first), std::move(m));
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < keyed.size(); ++i) metrics[i] = std::move(keyed[i].second);
}

}  // namespace

History::History(const fs::path& path, bool create) : path_(path), db_(std::make_unique<Db>()) {
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  // fs::exists is false with an error for a link loop or an unreadable
  // parent: that is no "no such file".
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw UsageError(fmt::format("history {}: cannot be opened: {}", path.string(), ec.message()));
  if (!exists && !create)
    throw UsageError(
        fmt::format("history {}: no such file (no run has been registered there)", path.string()));
  if (exists && fs::is_directory(path, ec))
    throw UsageError(fmt::format("history {}: is a directory (name the database file)", path.string()));
  // A FIFO or a device is no database: SQLite would block reading it.
  if (exists && !fs::is_regular_file(path, ec))
    throw UsageError(fmt::format("history {}: is not a regular file (a history is an SQLite database file)",
                                 path.string()));
  if (!exists && path.has_parent_path()) {
    fs::create_directories(path.parent_path(), ec);
    if (ec)
      throw IoError(fmt::format("history {}: cannot create {}: {}", path.string(),
                                path.parent_path().string(), ec.message()));
  }
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db_->db, flags, nullptr);
  if (rc != SQLITE_OK) sqlite_fail(db_->db, path_, rc, "open");
  sqlite3_extended_result_codes(db_->db, 1);
  sqlite3_busy_timeout(db_->db, kBusyTimeoutMs);
  {
    // The first read of the file: where a file that is not a database says
    // so. Switching a new database to WAL takes an exclusive lock for which
    // SQLite does not always call the busy handler (two processes creating
    // the database at once): a busy answer is retried here for as long as
    // the busy timeout.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    for (;;) {
      sqlite3_stmt* st = nullptr;
      int rc = sqlite3_prepare_v2(db_->db, "PRAGMA journal_mode = WAL", -1, &st, nullptr);
      if (rc == SQLITE_OK) rc = sqlite3_step(st);
      sqlite3_finalize(st);
      if (rc == SQLITE_ROW || rc == SQLITE_DONE) break;
      const bool busy = (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
      if (!busy || std::chrono::steady_clock::now() >= deadline) sqlite_fail(db_->db, path_, rc, "open");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  exec(db_->db, path_, "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL");
  const auto version_now = [&] { return static_cast<int>(query_int(db_->db, path_, "PRAGMA user_version")); };
  const auto newer = [&](int v) {
    return UsageError(fmt::format(
        "history {}: schema version {} is newer than this tokenscope's ({}): written by a later version; "
        "upgrade tokenscope or give another --history PATH",
        path_.string(), v, kHistorySchemaVersion));
  };
  int version = version_now();
  if (version > kHistorySchemaVersion) throw newer(version);
  if (version < kHistorySchemaVersion) {
    WriteTransaction tx(db_->db, path_);
    version = version_now();  // another process may have migrated meanwhile
    if (version > kHistorySchemaVersion) throw newer(version);
    if (version == 0 && query_int(db_->db, path_, "SELECT count(*) FROM sqlite_schema") > 0)
      throw UsageError(fmt::format(
          "history {}: a SQLite database of another program (it has tables but no tokenscope schema "
          "version); give another --history PATH",
          path_.string()));
    for (int v = version; v < kHistorySchemaVersion; ++v) exec(db_->db, path_, kMigrations[v]);
    exec(db_->db, path_, fmt::format("PRAGMA user_version = {}", kHistorySchemaVersion));
    tx.commit();
  }
}

History::~History() = default;

int History::schema_version() const {
  return static_cast<int>(query_int(db_->db, path_, "PRAGMA user_version"));
}

std::int64_t History::add(const HistoryRun& run) {
  WriteTransaction tx(db_->db, path_);
  std::int64_t id = 0;
  {
    Statement st(
        db_->db,
        "INSERT INTO runs (path, command, started_unix, finished_unix, partial, workload_hash, target, "
        "target_version, settings_hash, tags, settings, summary, environment) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        path_);
    const auto dump = [](const nlohmann::json& j) {
      return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    st.bind(1, run.path);
    st.bind(2, run.command);
    if (run.started_unix)
      st.bind(3, *run.started_unix);
    else
      st.bind_null(3);
    st.bind(4, run.finished_unix);
    st.bind(5, static_cast<std::int64_t>(run.partial));
    st.bind(6, run.workload_hash);
    st.bind(7, run.target);
    st.bind(8, run.target_version);
    st.bind(9, run.settings_hash);
    st.bind(10, dump(nlohmann::json(run.tags)));
    st.bind(11, dump(run.settings));
    st.bind(12, dump(run.summary));
    st.bind(13, dump(run.environment));
    st.step();
    id = sqlite3_last_insert_rowid(db_->db);
  }
  Statement m(db_->db, "INSERT OR REPLACE INTO metrics (run_id, name, value) VALUES (?, ?, ?)", path_);
  for (const auto& [name, value] : run.metrics) {
    m.reset();
    m.bind(1, id);
    m.bind(2, name);
    m.bind(3, value);
    m.step();
  }
  tx.commit();
  return id;
}

std::int64_t History::register_run(const fs::path& dir, const RegisterOptions& options) {
  return add(history_run_from_directory(dir, options));
}

std::vector<HistoryRun> History::list(const HistoryFilter& filter, bool with_documents) const {
  const ReadTransaction tx(db_->db, path_);
  std::vector<Param> params;
  std::string sql =
      fmt::format("SELECT {}{} FROM runs r{} ORDER BY r.finished_unix DESC, r.id DESC", kRunColumns,
                  with_documents ? kDocumentColumns : "", where_clause(filter, params));
  if (filter.limit > 0) sql += fmt::format(" LIMIT {}", filter.limit);
  std::vector<HistoryRun> out;
  {
    Statement st(db_->db, sql, path_);
    bind_all(st, params);
    while (st.step()) out.push_back(run_from_row(st, with_documents));
  }
  if (out.empty()) return out;
  // The metrics: one scan of the id range when the runs fill most of it (a
  // long list), else one lookup per run.
  std::int64_t lo = out.front().id, hi = lo;
  for (const auto& r : out) lo = std::min(lo, r.id), hi = std::max(hi, r.id);
  if (static_cast<double>(hi - lo + 1) <= 4.0 * static_cast<double>(out.size())) {
    std::unordered_map<std::int64_t, std::size_t> index;
    index.reserve(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) index.emplace(out[i].id, i);
    Statement m(db_->db, "SELECT run_id, name, value FROM metrics WHERE run_id BETWEEN ? AND ?", path_);
    m.bind(1, lo);
    m.bind(2, hi);
    while (m.step())
      if (const auto it = index.find(m.int64(0)); it != index.end())
        out[it->second].metrics.emplace_back(m.text(1), m.real(2));
  } else {
    Statement m(db_->db, "SELECT name, value FROM metrics WHERE run_id = ?", path_);
    for (auto& r : out) {
      m.reset();
      m.bind(1, r.id);
      while (m.step()) r.metrics.emplace_back(m.text(0), m.real(1));
    }
  }
  for (auto& r : out) sort_metrics(r.metrics);
  return out;
}

namespace {

std::optional<HistoryRun> one_run(sqlite3* db, const fs::path& path, const std::string& where,
                                  const std::vector<Param>& params) {
  const ReadTransaction tx(db, path);
  Statement st(db,
               fmt::format("SELECT {}{} FROM runs r {} ORDER BY r.finished_unix DESC, r.id DESC LIMIT 1",
                           kRunColumns, kDocumentColumns, where),
               path);
  bind_all(st, params);
  if (!st.step()) return std::nullopt;
  HistoryRun r = run_from_row(st, true);
  Statement m(db, "SELECT name, value FROM metrics WHERE run_id = ?", path);
  m.bind(1, r.id);
  while (m.step()) r.metrics.emplace_back(m.text(0), m.real(1));
  sort_metrics(r.metrics);
  return r;
}

}  // namespace

std::optional<HistoryRun> History::get(std::int64_t id) const {
  return one_run(db_->db, path_, "WHERE r.id = ?", {id});
}

std::optional<HistoryRun> History::find_by_path(const std::string& path) const {
  return one_run(db_->db, path_, "WHERE r.path = ?", {path});
}

std::optional<HistoryRun> History::latest_comparable(const HistoryRun& run,
                                                     const HistoryFilter& filter) const {
  HistoryFilter f = filter;
  const std::string target = f.target.value_or(run.target);
  f.target.reset();
  f.include_partial = false;
  std::vector<Param> params{run.settings_hash, run.workload_hash, target, run.id,
                            run.path,          run.finished_unix};
  std::string narrower = where_clause(f, params);  // " WHERE 1 AND ...": its conditions
  narrower.erase(0, std::string_view(" WHERE 1").size());
  return one_run(
      db_->db, path_,
      "WHERE r.settings_hash = ? AND r.workload_hash = ? AND r.target = ? AND r.id <> ? AND r.path <> ? "
      "AND r.finished_unix < ?" +
          narrower,
      params);
}

std::vector<MetricPoint> History::metric_series(std::string_view metric, const HistoryFilter& filter) const {
  HistoryFilter f = filter;
  f.include_partial = false;
  std::vector<Param> params{std::string(metric)};
  std::string sql = fmt::format(
      "SELECT r.id, r.finished_unix, r.path, m.value FROM runs r JOIN metrics m ON m.run_id = r.id "
      "AND m.name = ?{} ORDER BY r.finished_unix DESC, r.id DESC",
      where_clause(f, params));
  if (f.limit > 0) sql += fmt::format(" LIMIT {}", f.limit);
  Statement st(db_->db, sql, path_);
  bind_all(st, params);
  std::vector<MetricPoint> out;
  while (st.step()) out.push_back({st.int64(0), st.real(1), st.text(2), st.real(3)});
  std::reverse(out.begin(), out.end());
  return out;
}

std::string History::integrity_check() const {
  Statement st(db_->db, "PRAGMA integrity_check", path_);
  std::string out;
  while (st.step()) out += (out.empty() ? "" : "\n") + st.text(0);
  return out;
}

// ---- the trend ------------------------------------------------------------

Trend find_trend(std::string_view metric, std::vector<MetricPoint> points,
                 const ChangePointSettings& settings) {
  const HistoryMetric* m = find_history_metric(metric);
  if (!m) {
    std::string names;
    for (const auto& k : kHistoryMetrics) names += (names.empty() ? "" : ", ") + std::string(k.name);
    throw UsageError(fmt::format("--trend {}: unknown metric; one of {}", quote_input(metric), names));
  }
  Trend t;
  t.metric = std::string(metric);
  t.points = std::move(points);
  if (t.points.size() < 3) return t;
  std::vector<double> values;
  values.reserve(t.points.size());
  for (const auto& p : t.points) values.push_back(p.value);
  for (const ChangePoint& cp : find_change_points(values, settings)) {
    TrendChange c;
    c.change = cp;
    c.at = t.points[cp.index];
    c.regression =
        m->worse == Worse::kHigher ? cp.mean_after > cp.mean_before : cp.mean_after < cp.mean_before;
    t.changes.push_back(std::move(c));
  }
  return t;
}

}  // namespace tokenscope::analyze
