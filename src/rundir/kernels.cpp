#include "rundir/kernels.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <simdjson.h>
#include <sqlite3.h>

#include "core/error.h"
#include "core/stats.h"
#include "core/text_reader.h"
#include "rundir/json_number.h"
#include "rundir/readers.h"

namespace tokenscope::rundir {

namespace dom = simdjson::dom;

// ------------------------------------------------------------ inventory

std::optional<double> KernelStats::first_excess() const {
  if (launches < kMinLaunchesForExcess || !(median_ns > 0)) return std::nullopt;
  return static_cast<double>(first_duration_ns) / median_ns - 1;
}

const KernelStats* KernelInventory::find(std::string_view name) const {
  const auto it = std::lower_bound(kernels.begin(), kernels.end(), name,
                                   [](const KernelStats& k, std::string_view n) { return k.name < n; });
  return it != kernels.end() && it->name == name ? &*it : nullptr;
}

bool KernelCollector::add(std::string_view name, std::string_view label, Nanos start_ns,
                          std::int64_t duration_ns) {
  std::int64_t total = 0;
  if (__builtin_add_overflow(total_ns_, duration_ns, &total)) return false;
  total_ns_ = total;  // every kernel's total is at most this: none overflows
  auto it = index_.find(name);
  if (it == index_.end()) {
    it = index_.emplace(std::string(name), kernels_.size()).first;
    Kernel k;
    k.name.assign(name);
    k.label.assign(label.empty() ? name : label);
    k.first_start_ns = start_ns;
    k.first_duration_ns = duration_ns;
    kernels_.push_back(std::move(k));
  }
  Kernel& k = kernels_[it->second];
  if (start_ns < k.first_start_ns) {
    k.first_start_ns = start_ns;
    k.first_duration_ns = duration_ns;
  }
  k.durations.push_back(duration_ns);
  k.total_ns += duration_ns;
  ++launches_;
  return true;
}

KernelInventory KernelCollector::finish(std::string source, std::string format) {
  KernelInventory inv;
  inv.source = std::move(source);
  inv.format = std::move(format);
  inv.launches = launches_;
  inv.passed_over = passed_over_;
  inv.kernels.reserve(kernels_.size());
  for (Kernel& k : kernels_) {
    KernelStats s;
    s.name = std::move(k.name);
    s.label = std::move(k.label);
    s.launches = k.durations.size();
    s.total_ns = k.total_ns;
    s.first_start_ns = k.first_start_ns;
    s.first_duration_ns = k.first_duration_ns;
    const auto mid =
        k.durations.begin() + static_cast<std::ptrdiff_t>(nearest_rank_index(k.durations.size(), 0.5));
    std::nth_element(k.durations.begin(), mid, k.durations.end());
    s.median_ns = static_cast<double>(*mid);
    inv.total_ns += s.total_ns;
    std::vector<std::int64_t>().swap(k.durations);  // its memory back now
    inv.kernels.push_back(std::move(s));
  }
  std::sort(inv.kernels.begin(), inv.kernels.end(),
            [](const KernelStats& a, const KernelStats& b) { return a.name < b.name; });
  kernels_.clear();
  index_.clear();
  launches_ = passed_over_ = 0;
  total_ns_ = 0;
  return inv;
}

// ------------------------------------------------------------ JSON lines

namespace {

constexpr std::string_view kKernelName = "kernel_duration_ns";
constexpr double kMaxStartS = 9.2e9;     // int64 ns
constexpr double kMaxDurationNs = 1e15;  // 11.6 days: sums of launches stay exact in an int64
constexpr std::string_view kSqliteMagic{"SQLite format 3\0", 16};
constexpr const char* kPastTheSum = "the launches' durations add up past 2^63 ns";

using detail::number_of;

}  // namespace

struct KernelLineParser::Impl {
  dom::parser parser;
  std::string buffer;
};

KernelLineParser::KernelLineParser() : impl_(std::make_unique<Impl>()) {}
KernelLineParser::~KernelLineParser() = default;

KernelLineKind KernelLineParser::parse(std::string_view line, KernelRecord& rec) {
  Impl& p = *impl_;
  p.buffer.assign(line);
  p.buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  dom::element doc;
  if (const auto err = p.parser.parse(p.buffer.data(), line.size(), false).get(doc);
      err != simdjson::SUCCESS) {
    why_ = fmt::format("not JSON ({})", simdjson::error_message(err));
    return KernelLineKind::kNotOneOfOurs;
  }
  dom::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) {
    why_ = "not a JSON object";
    return KernelLineKind::kNotOneOfOurs;
  }
  // One pass over the keys; of a key given twice the last one counts.
  std::optional<dom::element> t, t_ns, source, name, labels, value;
  for (const dom::key_value_pair kv : root) {
    const std::string_view k = kv.key;
    std::optional<dom::element>* slot = k == "t"        ? &t
                                        : k == "t_ns"   ? &t_ns
                                        : k == "source" ? &source
                                        : k == "name"   ? &name
                                        : k == "labels" ? &labels
                                        : k == "value"  ? &value
                                                        : nullptr;
    if (slot != nullptr) *slot = kv.value;
  }
  if (t_ns) return KernelLineKind::kOther;  // an observation of a run's samples.jsonl
  std::string_view text;
  if (!source || source->get_string().get(text) != simdjson::SUCCESS) {
    why_ = "an object without a \"source\" string";
    return KernelLineKind::kNotOneOfOurs;
  }
  if (text != "cupti") {
    if (t) return KernelLineKind::kOther;  // another probe reading (NVML)
    why_ = "an object with neither \"t\" nor \"t_ns\"";
    return KernelLineKind::kNotOneOfOurs;
  }
  if (!name || name->get_string().get(text) != simdjson::SUCCESS)
    throw rundir::LineError("name",
                            "expected the record's name, a string (\"kernel_duration_ns\" for a kernel)");
  if (text != kKernelName) return KernelLineKind::kCuptiOther;
  double start_s = 0, duration = 0;
  if (!t || !number_of(*t, start_s) || !(start_s >= 0 && start_s < kMaxStartS))
    throw rundir::LineError("t", "expected the launch's start in seconds, a number from 0 to 9.2e9");
  dom::object label_object;
  if (!labels || labels->get_object().get(label_object) != simdjson::SUCCESS)
    throw rundir::LineError("labels", "expected an object with the kernel's name in \"what\"");
  std::optional<dom::element> what;
  for (const dom::key_value_pair kv : label_object)
    if (kv.key == "what") what = kv.value;
  if (!what || what->get_string().get(text) != simdjson::SUCCESS || text.empty())
    throw rundir::LineError("labels.what", "expected the kernel's name, a non-empty string");
  if (!value || !number_of(*value, duration) || !(duration >= 0 && duration <= kMaxDurationNs))
    throw rundir::LineError("value", "expected the launch's duration in ns, a number from 0 to 1e15");
  rec.name = text;
  rec.start_ns = std::llround(start_s * 1e9);
  rec.duration_ns = std::llround(duration);
  return KernelLineKind::kKernel;
}

namespace {

KernelInventory parse_lines(TextReader& reader, const std::string& file) {
  KernelCollector collector;
  KernelLineParser parser;
  KernelRecord rec;
  std::string_view line;
  while (reader.next_line(line)) {
    const std::size_t n = reader.line_number();
    if (const auto flaw = reader.flaw_message()) throw InputError(file, n, "", *flaw);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    KernelLineKind kind = KernelLineKind::kNotOneOfOurs;
    try {
      kind = parser.parse(line, rec);
    } catch (const rundir::LineError& e) {
      throw InputError(file, n, e.field(), e.what());
    }
    switch (kind) {
      case KernelLineKind::kKernel:
        if (!collector.add(rec.name, "", rec.start_ns, rec.duration_ns))
          throw InputError(file, n, "value", kPastTheSum);
        break;
      case KernelLineKind::kCuptiOther:
      case KernelLineKind::kOther:
        collector.pass_over();
        break;
      case KernelLineKind::kNotOneOfOurs:
        throw InputError(file, n, "",
                         parser.why() +
                             ": expected a CUPTI kernel record {\"t\", \"source\": \"cupti\", \"name\": "
                             "\"kernel_duration_ns\", \"labels\": {\"what\"}, \"value\"} or another line of "
                             "a samples.jsonl");
    }
  }
  if (collector.launches() == 0)
    throw InputError(file, 0, "",
                     "holds no CUPTI kernel record (lines with \"source\": \"cupti\" and \"name\": "
                     "\"kernel_duration_ns\", as tokenscope probe gpu-context --out DIR writes them)");
  return collector.finish(file, "cupti-jsonl");
}

}  // namespace

KernelInventory parse_kernel_lines(std::string_view text, const std::string& file) {
  TextReader reader(text);
  return parse_lines(reader, file);
}

// ---------------------------------------------------------------- SQLite

namespace {

constexpr const char* kTable = "CUPTI_ACTIVITY_KIND_KERNEL";

struct Database {
  sqlite3* db = nullptr;
  ~Database() { sqlite3_close_v2(db); }
};

// A statement, finalised on destruction; a failed call is bad input (the
// file is not a sound SQLite database).
class Query {
 public:
  Query(sqlite3* db, const std::string& sql, const std::string& file) : db_(db), file_(file) {
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s_, nullptr) != SQLITE_OK) fail();
  }
  ~Query() { sqlite3_finalize(s_); }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail();
    return false;
  }
  int type(int c) const { return sqlite3_column_type(s_, c); }
  std::int64_t int64(int c) const { return sqlite3_column_int64(s_, c); }
  std::string_view text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, c));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, c)))
             : std::string_view();
  }

 private:
  [[noreturn]] void fail() const {
    throw InputError(file_, 0, "", fmt::format("not a readable SQLite export ({})", sqlite3_errmsg(db_)));
  }
  sqlite3* db_;
  const std::string& file_;
  sqlite3_stmt* s_ = nullptr;
};

bool has_table(sqlite3* db, const std::string& file, const char* table) {
  Query q(db,
          fmt::format("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = '{}'", table),
          file);
  return q.step();
}

}  // namespace

KernelInventory load_nsys_sqlite(const std::filesystem::path& path) {
  const std::string file = path.string();
  Database d;
  if (const int rc =
          sqlite3_open_v2(file.c_str(), &d.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
      rc != SQLITE_OK)
    throw UsageError(fmt::format("{}: cannot open the kernel records file: {}", file,
                                 d.db ? sqlite3_errmsg(d.db) : sqlite3_errstr(rc)));
  if (!has_table(d.db, file, kTable))
    throw InputError(file, 0, kTable,
                     "no such table: the export holds no CUDA kernel launch (nsys profile --trace=cuda, then "
                     "nsys export --type sqlite)");
  std::set<std::string, std::less<>> columns;
  {
    Query q(d.db, fmt::format("PRAGMA table_info('{}')", kTable), file);
    while (q.step()) columns.emplace(q.text(1));
  }
  for (const char* c : {"start", "end"})
    if (!columns.count(c))
      throw InputError(file, 0, fmt::format("{}.{}", kTable, c),
                       "no such column (expected start and end in ns)");
  // The name columns the export has, each an id into StringIds.
  std::vector<std::string> names;
  for (const char* c : {"mangledName", "demangledName", "shortName"})
    if (columns.count(c)) names.emplace_back(c);
  if (names.empty())
    throw InputError(file, 0, fmt::format("{}.demangledName", kTable),
                     "no kernel name column (expected demangledName, shortName or mangledName: ids into "
                     "StringIds)");
  if (!has_table(d.db, file, "StringIds"))
    throw InputError(file, 0, "StringIds", "no such table (the strings the kernel names are ids of)");
  // The key: mangledName, else demangledName, else shortName; the label:
  // demangledName, else shortName, else mangledName.
  std::string joins, key = "COALESCE(", label = "COALESCE(";
  for (const std::string& c : names) {
    joins += fmt::format(" LEFT JOIN StringIds AS s_{0} ON s_{0}.id = k.{0}", c);
    key += fmt::format("s_{}.value, ", c);
  }
  for (const char* c : {"demangledName", "shortName", "mangledName"})
    if (columns.count(c)) label += fmt::format("s_{}.value, ", c);
  key += "NULL)";
  label += "NULL)";
  Query q(d.db, fmt::format("SELECT k.start, k.\"end\", {}, {} FROM {} AS k{}", key, label, kTable, joins),
          file);
  KernelCollector collector;
  std::uint64_t row = 0;
  while (q.step()) {
    ++row;
    for (int c : {0, 1})
      if (q.type(c) != SQLITE_INTEGER)
        throw InputError(file, 0, fmt::format("{}.{}", kTable, c == 0 ? "start" : "end"),
                         fmt::format("row {}: expected an integer (ns)", row));
    const std::int64_t start = q.int64(0), end = q.int64(1);
    if (end < start)
      throw InputError(file, 0, fmt::format("{}.end", kTable),
                       fmt::format("row {}: {} is before the start {}", row, end, start));
    if (static_cast<double>(end) - static_cast<double>(start) > kMaxDurationNs)
      throw InputError(file, 0, fmt::format("{}.end", kTable),
                       fmt::format("row {}: a launch longer than 1e15 ns", row));
    const std::string_view name = q.text(2);
    if (name.empty())
      throw InputError(file, 0, fmt::format("{}.{}", kTable, names.front()),
                       fmt::format("row {}: the kernel's name is not in StringIds", row));
    if (!collector.add(name, q.text(3), start, end - start))
      throw InputError(file, 0, fmt::format("{}.end", kTable), fmt::format("row {}: {}", row, kPastTheSum));
  }
  if (collector.launches() == 0) throw InputError(file, 0, kTable, "holds no kernel launch (an empty table)");
  return collector.finish(file, "nsys-sqlite");
}

KernelInventory load_kernels(const std::filesystem::path& file) {
  TextReader reader = TextReader::open(file.string(), "kernel records file");
  if (reader.peek(kSqliteMagic.size()) == kSqliteMagic) return load_nsys_sqlite(file);
  return parse_lines(reader, file.string());
}

}  // namespace tokenscope::rundir
