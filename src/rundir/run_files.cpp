#include "rundir/run_files.h"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <simdjson.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_out.h"
#include "core/random.h"
#include "core/step_record.h"
#include "core/summary.h"
#include "core/text_reader.h"
#include "observe/canonical.h"
#include "rundir/downsample.h"
#include "rundir/readers.h"

namespace tokenscope::rundir {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// requests.jsonl smaller than this is read by one thread.
constexpr std::uint64_t kParallelReadBytes = 8u << 20;

}  // namespace

nlohmann::json read_json_file(const fs::path& file) {
  const std::string text = read_regular_file(file.string(), "JSON file tokenscope wrote", kMaxRunJsonBytes);
  require_json_depth(text, file.string());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw InputError(file.string(), 0, "", "not a JSON object (is this a tokenscope run directory?)");
  return j;
}

namespace {

std::uint16_t name_index(std::vector<std::string>& names,
                         std::unordered_map<std::string, std::uint16_t>& index, const std::string& name) {
  const auto it = index.find(name);
  if (it != index.end()) return it->second;
  const auto i = static_cast<std::uint16_t>(std::min<std::size_t>(names.size(), UINT16_MAX));
  if (names.size() < UINT16_MAX) {
    names.push_back(name);
    index.emplace(name, i);
  }
  return i;
}

}  // namespace

std::int64_t cached_prompt_tokens(const RequestRecord& e) {
  if (e.cached_tokens >= 0) return e.cached_tokens;
  if (e.server_prompt_evaluated >= 0 && e.prompt_tokens >= e.server_prompt_evaluated)
    return e.prompt_tokens - e.server_prompt_evaluated;
  return -1;
}

unsigned split_half(std::uint64_t request_id) {
  constexpr std::uint64_t kSplitSeed = 0x6c6f6770726f6273ULL;  // "logprobs"
  return static_cast<unsigned>(hash_combine64(kSplitSeed, request_id) & 1u);
}

void LogprobPool::add(std::uint64_t request_id, const LogprobHistogram& h) {
  ++requests;
  if (h.count == 0) return;
  ++requests_with_tokens;
  pooled.merge(h);
  const unsigned half = split_half(request_id);
  halves[half].merge(h);
  ++half_requests[half];
}

void LogprobPool::merge(const LogprobPool& other) {
  requests += other.requests;
  requests_with_tokens += other.requests_with_tokens;
  pooled.merge(other.pooled);
  for (unsigned k = 0; k < 2; ++k) {
    halves[k].merge(other.halves[k]);
    half_requests[k] += other.half_requests[k];
  }
}

namespace {

// A reader's message about a file of the run, with the run directory left
// out of the file's path ("requests.jsonl:4: ..."): the report names the run.
std::string within_run(const fs::path& dir, const std::string& message) {
  const std::string prefix = (dir / "").string();
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

std::string labels_text(const observe::Labels& labels) {
  std::string s;
  for (const auto& l : labels) {
    if (!s.empty()) s += ',';
    s += l.name;
    s += '=';
    s += l.value;
  }
  return s;
}

// What one reader of requests.jsonl makes of its lines (the whole file, or
// one byte range of it): the arrays, with the tenant and class names indexed
// in the order the reader met them, and its line counts.
struct Partial {
  RequestArrays a;
  std::unordered_map<std::string, std::uint16_t> tenants, classes;
  SummaryBuilder* builder = nullptr;  // the summary recomputed: a read of the whole file only
  rundir::ReadStats stats;
  SlowestRequests slowest;  // the slowest of the range, whole (merged when ranges are joined)
};

// One request of requests.jsonl into the arrays: what the report keeps of
// each request is taken here, and only here.
void absorb(const RequestRecord& e, Partial& p) {
  auto& a = p.a;
  a.t_sched.push_back(e.t_sched);
  a.t_dispatch.push_back(e.t_dispatch);
  a.t_send.push_back(e.t_send);
  a.t_first_token.push_back(e.first_token());
  a.t_first_answer.push_back(e.first_answer());
  a.reasoning_tokens.push_back(
      static_cast<std::int32_t>(std::clamp<std::int64_t>(e.reasoning_tokens, -1, INT32_MAX)));
  a.t_last_token.push_back(e.last_token());
  a.t_close.push_back(e.t_close);
  a.output_tokens.push_back(
      static_cast<std::int32_t>(std::clamp<std::int64_t>(e.output_tokens, -1, INT32_MAX)));
  a.prompt_tokens.push_back(
      static_cast<std::int32_t>(std::clamp<std::int64_t>(e.prompt_tokens, -1, INT32_MAX)));
  a.cached_tokens.push_back(
      static_cast<std::int32_t>(std::clamp<std::int64_t>(cached_prompt_tokens(e), -1, INT32_MAX)));
  a.outcome.push_back(e.outcome);
  a.warmup.push_back(e.warmup ? 1 : 0);
  a.cancel_planned.push_back(e.cancel_planned ? 1 : 0);
  a.tenant.push_back(name_index(a.tenant_names, p.tenants, e.tenant));
  a.task_class.push_back(name_index(a.class_names, p.classes, e.task_class));
  // Inter-token gaps per token, as core/summary.cpp counts them.
  double sum_ms = 0, max_ms = 0;
  std::uint64_t tokens = 0;
  const bool keep = !e.warmup && e.outcome == Outcome::kOk;
  LogLinearHistogram* chunk =
      keep && e.event_times.size() > 1 ? &a.itl_chunks[e.id >> a.itl_chunk_shift] : nullptr;
  for (std::size_t i = 1; i < e.event_times.size(); ++i) {
    const Nanos gap = std::max<Nanos>(0, e.event_times[i] - e.event_times[i - 1]);
    const std::uint32_t k = i < e.event_tokens.size() ? std::max<std::uint32_t>(1, e.event_tokens[i]) : 1;
    const double gap_ms = nanos_to_ms(gap);
    sum_ms += gap_ms;
    tokens += k;
    if (k == 1) {  // one token an event, the common case: no division
      max_ms = std::max(max_ms, gap_ms);
      if (chunk) chunk->record_one(static_cast<std::uint64_t>(gap));
    } else {
      max_ms = std::max(max_ms, gap_ms / k);
      if (chunk) chunk->record(static_cast<std::uint64_t>(gap) / k, k);
    }
  }
  if (a.itl_chunks.size() > kItlChunks) coarsen_itl_chunks(a);
  a.itl_mean_ms.push_back(tokens ? static_cast<float>(sum_ms / static_cast<double>(tokens))
                                 : std::numeric_limits<float>::quiet_NaN());
  a.itl_max_ms.push_back(tokens ? static_cast<float>(max_ms) : std::numeric_limits<float>::quiet_NaN());
  a.logprob_mean.push_back(e.logprobs && e.logprobs->count > 0 ? static_cast<float>(e.logprobs->mean())
                                                               : std::numeric_limits<float>::quiet_NaN());
  a.server_prompt_ms.push_back(e.server_prompt_ms >= 0 ? static_cast<float>(e.server_prompt_ms)
                                                       : std::numeric_limits<float>::quiet_NaN());
  if (keep && e.logprobs) a.logprobs.add(e.id, *e.logprobs);
  if (keep && e.first_token() >= 0 && e.last_token() >= 0 && e.t_send >= 0 &&
      p.slowest.wants(e.last_token() - e.t_send, e.id)) {
    SlowRequest r;
    r.id = e.id;
    r.tenant = e.tenant;
    r.task_class = e.task_class;
    r.t_sched = e.t_sched;
    r.t_dispatch = e.t_dispatch;
    r.t_send = e.t_send;
    r.t_first_scheduled = e.t_first_scheduled;
    r.t_first_token = e.first_token();
    r.t_last_token = e.last_token();
    r.t_close = e.t_close;
    r.prompt_tokens = e.prompt_tokens;
    r.cached_tokens = cached_prompt_tokens(e);
    r.output_tokens = e.output_tokens;
    r.preemptions = e.preemptions;
    r.server_prompt_ms = e.server_prompt_ms;
    r.event_times = e.event_times;
    p.slowest.add(std::move(r));
  }
  if (p.builder) {
    // The summary counts the first and last token from the event list when
    // a record has no t_first_token / t_last_token.
    if ((e.t_first_token >= 0 && e.t_last_token >= 0) || e.event_times.empty()) {
      p.builder->add(e);
    } else {
      RequestRecord r = e;
      r.t_first_token = e.first_token();
      r.t_last_token = e.last_token();
      p.builder->add(r);
    }
  }
}

}  // namespace

void coarsen_itl_chunks(RequestArrays& a, unsigned shift) {
  while (a.itl_chunk_shift < 63 && (a.itl_chunk_shift < shift || a.itl_chunks.size() > kItlChunks)) {
    std::map<std::uint64_t, LogLinearHistogram> next;
    for (auto& [key, h] : a.itl_chunks) next[key >> 1].merge(h);
    a.itl_chunks = std::move(next);
    ++a.itl_chunk_shift;
  }
}

void merge_itl_chunks(RequestArrays& a) {
  a.itl_ns.clear();
  for (const auto& [key, h] : a.itl_chunks) a.itl_ns.merge(h);
}

namespace {

// The per-request arrays that a read in byte ranges concatenates as they
// are (tenant and task_class are renumbered, itl_ns merged).
auto columns(RequestArrays& a) {
  return std::tie(a.t_sched, a.t_dispatch, a.t_send, a.t_first_token, a.t_last_token, a.t_close,
                  a.t_first_answer, a.reasoning_tokens, a.output_tokens, a.prompt_tokens, a.cached_tokens,
                  a.itl_mean_ms, a.itl_max_ms, a.logprob_mean, a.server_prompt_ms, a.outcome, a.warmup,
                  a.cancel_planned);
}
// A field added to RequestArrays is to be concatenated too: this says so at
// build time (the size on x86-64 with libstdc++, the platform built for).
constexpr std::size_t kRequestArraysSize = 2688;
static_assert(sizeof(RequestArrays) == kRequestArraysSize,
              "RequestArrays has changed: add a new per-request array to columns() (or concatenate it "
              "in append()), then update kRequestArraysSize");

// Appends the requests of `from` (the range after `into`'s) to `into`.
void append(Partial& into, Partial& from) {
  auto& a = into.a;
  auto& b = from.a;
  std::apply(
      [&](auto&... to) {
        std::apply([&](auto&... add) { (to.insert(to.end(), add.begin(), add.end()), ...); }, columns(b));
      },
      columns(a));
  // Names renumbered as one reader of the whole file numbers them: in the
  // order they first appear. An index past the last name (more than
  // UINT16_MAX names) stays past the last name.
  const auto renumber = [](const std::vector<std::string>& names, std::vector<std::string>& into_names,
                           std::unordered_map<std::string, std::uint16_t>& index) {
    std::vector<std::uint16_t> to;
    to.reserve(names.size());
    for (const auto& n : names) to.push_back(name_index(into_names, index, n));
    return to;
  };
  const auto tenants = renumber(b.tenant_names, a.tenant_names, into.tenants);
  const auto classes = renumber(b.class_names, a.class_names, into.classes);
  for (const std::uint16_t t : b.tenant) a.tenant.push_back(t < tenants.size() ? tenants[t] : UINT16_MAX);
  for (const std::uint16_t c : b.task_class)
    a.task_class.push_back(c < classes.size() ? classes[c] : UINT16_MAX);
  coarsen_itl_chunks(a, b.itl_chunk_shift);
  coarsen_itl_chunks(b, a.itl_chunk_shift);
  for (auto& [key, h] : b.itl_chunks) a.itl_chunks[key].merge(h);
  coarsen_itl_chunks(a);
  a.logprobs.merge(b.logprobs);
  into.slowest.merge(std::move(from.slowest));
}

// requests.jsonl read in `ranges` byte ranges at the same time (0: one per
// hardware thread, at most 8; one for a small file), each into its own
// Partial, concatenated in file order: the same arrays, counts and first bad
// line as one read of the whole file. With a builder it is that one read.
Partial read_requests(const fs::path& file, unsigned ranges, SummaryBuilder* builder) {
  std::error_code ec;
  const std::uint64_t size = fs::file_size(file, ec);  // 0 when not a regular file: one read
  if (ranges == 0)
    ranges = size < kParallelReadBytes ? 1 : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  if (builder != nullptr || size == 0) ranges = 1;
  // Each range's arrays sized once from the length of its first 1,024
  // lines (the first range's for the whole file, which the others are
  // appended to), so that they are not copied as they grow: on a VM every
  // fresh page a copy lands on costs the kernel a page clear.
  const auto read = [&file, size](std::uint64_t begin, std::uint64_t end, SummaryBuilder* b) {
    Partial p;
    p.builder = b;
    rundir::RequestsReader reader(file, begin, end);
    RequestRecord e;
    constexpr std::size_t kSizingLines = 1024;
    while (reader.next(e)) {
      absorb(e, p);
      if (p.a.size() == kSizingLines && reader.offset() > begin) {
        const double per_line = static_cast<double>(reader.offset() - begin) / kSizingLines;
        const std::uint64_t span = begin == 0 ? size : std::min<std::uint64_t>(end, size) - begin;
        const auto n = static_cast<std::size_t>(
            std::min(static_cast<double>(span) / per_line * 1.05 + 64, static_cast<double>(size)));
        std::apply([n](auto&... v) { (v.reserve(n), ...); }, columns(p.a));
        p.a.tenant.reserve(n);
        p.a.task_class.reserve(n);
      }
    }
    p.stats = reader.stats();
    return p;
  };
  const auto bound = [&](unsigned k) {
    return k == ranges ? UINT64_MAX
                       : static_cast<std::uint64_t>(static_cast<unsigned __int128>(size) * k / ranges);
  };
  std::vector<std::future<Partial>> later;
  for (unsigned k = 1; k < ranges; ++k)
    later.push_back(std::async(std::launch::async, read, bound(k), bound(k + 1), nullptr));
  Partial all = read(0, bound(1), builder);
  std::vector<Partial> parts;
  for (auto& f : later) parts.push_back(f.get());
  std::vector<rundir::ReadStats> stats = {all.stats};
  std::size_t n = all.a.size();
  for (const auto& p : parts) n += p.a.size();
  std::apply([n](auto&... v) { (v.reserve(n), ...); }, columns(all.a));
  all.a.tenant.reserve(n);
  all.a.task_class.reserve(n);
  for (auto& p : parts) {
    stats.push_back(p.stats);
    append(all, p);
    p = Partial();  // its memory back before the next one is copied
  }
  all.stats = rundir::join_range_stats(stats, file.string());
  return all;
}

class SeriesSink {
 public:
  explicit SeriesSink(std::vector<SampledSeries>& out) : out_(out) {}
  void add(const observe::Observation& o, const char* kind, const std::vector<observe::Sample>& samples,
           bool skip_histogram_members) {
    for (const auto& s : samples) {
      if (!std::isfinite(s.value)) continue;
      if (skip_histogram_members &&
          observe::resolve_canonical(s.name).member != observe::CanonicalName::Member::kSeries)
        continue;
      key_.assign(o.source);
      key_ += '\0';
      key_ += kind;
      key_ += '\0';
      key_ += s.name;
      key_ += '\0';
      const std::string labels = labels_text(s.labels);
      key_ += labels;
      auto it = index_.find(key_);
      if (it == index_.end()) {
        it = index_.emplace(key_, out_.size()).first;
        out_.push_back(SampledSeries{o.source, kind, s.name, labels, {}, {}});
      }
      auto& series = out_[it->second];
      series.t.push_back(o.t_ns);
      series.v.push_back(s.value);
    }
  }

 private:
  std::vector<SampledSeries>& out_;
  std::unordered_map<std::string, std::size_t> index_;
  std::string key_;
};

// The t_ns of the last whole line of steps.jsonl that parses (steps are
// written in time order): read from the file's tail, so that the reducer's
// range is known before the one pass over the file. nullopt when no line in
// the last 1 MiB parses.
std::optional<Nanos> last_step_time(const fs::path& file) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in) return std::nullopt;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - (1 << 20));
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<std::size_t>(in.gcount()));
  simdjson::dom::parser parser;
  std::size_t end = tail.size();
  while (end > 0) {
    const std::size_t nl = tail.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && from > 0) break;  // the line may start before the tail
    const std::string_view line(tail.data() + begin, end - begin);
    simdjson::dom::element doc;
    std::int64_t t = 0;
    if (!line.empty() && parser.parse(line.data(), line.size()).get(doc) == simdjson::SUCCESS &&
        doc["t_ns"].get_int64().get(t) == simdjson::SUCCESS)
      return t;
    if (nl == std::string::npos) break;
    end = nl;
  }
  return std::nullopt;
}

// steps.jsonl: each step's quantities, the engine's own and the running
// totals of what happens per step (preemptions, tenant switches, swapped
// bytes).
struct StepField {
  const char* key;
  const char* name;
  bool cumulative;
};
constexpr StepField kStepFields[] = {
    {"seqs", "batch_seqs", false},
    {"running", "running", false},
    {"waiting", "waiting", false},
    {"kv_usage", "kv_usage", false},
    {"prefill_tokens", "prefill_tokens", false},
    {"decode_tokens", "decode_tokens", false},
    {"preemptions", "preemptions_total", true},
    {"tenant_switches", "tenant_switches_total", true},
    {"swap_out_bytes", "swap_out_bytes_total", true},
    {"swap_in_bytes", "swap_in_bytes_total", true},
    {"host_kv_blocks", "host_kv_blocks", false},
};
constexpr std::size_t kStepFieldCount = std::size(kStepFields);

// One step line: its t_ns and quantities (NaN where the line has no such
// field: an older or other writer). False when it is not a step record.
// Fields the checklist reads beside kStepFields (not drawn).
struct StepExtra {
  double dur_ns = kNaN, query_tokens = kNaN, hit_tokens = kNaN;
};

bool parse_step(simdjson::dom::parser& parser, std::string_view line, Nanos& t,
                double (&values)[kStepFieldCount], StepExtra* extra = nullptr) {
  simdjson::dom::element doc;
  std::int64_t ns = 0;
  if (parser.parse(line.data(), line.size()).get(doc) != simdjson::SUCCESS ||
      doc["t_ns"].get_int64().get(ns) != simdjson::SUCCESS)
    return false;
  t = ns;
  if (extra) {
    std::int64_t d = 0;
    extra->dur_ns =
        doc["dur_ns"].get_int64().get(d) == simdjson::SUCCESS && d >= 0 ? static_cast<double>(d) : kNaN;
    extra->query_tokens =
        doc["query_tokens"].get_int64().get(d) == simdjson::SUCCESS ? static_cast<double>(d) : kNaN;
    extra->hit_tokens =
        doc["hit_tokens"].get_int64().get(d) == simdjson::SUCCESS ? static_cast<double>(d) : kNaN;
  }
  for (std::size_t i = 0; i < kStepFieldCount; ++i) {
    const auto v = doc[kStepFields[i].key];
    if (v.error() == simdjson::NO_SUCH_FIELD) {
      values[i] = kNaN;
      continue;
    }
    double d = 0;
    if (v.get_double().get(d) != simdjson::SUCCESS) {
      std::int64_t n = 0;
      if (v.get_int64().get(n) != simdjson::SUCCESS) return false;
      d = static_cast<double>(n);
    }
    values[i] = d;
  }
  return true;
}

// A JSON number at p (a NUL-padded buffer): an integer of at most 18 digits
// (is_int, n), or a number with a fraction or exponent (d, correctly
// rounded, as simdjson reads it). False for anything else, "-0" included.
bool plain_number(const char*& p, bool& is_int, std::int64_t& n, double& d) {
  const char* const first = p;
  const auto digit = [](char c) { return static_cast<unsigned>(c - '0') <= 9; };
  if (*p == '-') ++p;
  if (!digit(*p)) return false;
  if (*p == '0') {
    ++p;
    if (digit(*p)) return false;
  } else {
    while (digit(*p)) ++p;
  }
  const char* const int_end = p;
  is_int = true;
  if (*p == '.') {
    is_int = false;
    ++p;
    if (!digit(*p)) return false;
    while (digit(*p)) ++p;
  }
  if (*p == 'e' || *p == 'E') {
    is_int = false;
    ++p;
    if (*p == '+' || *p == '-') ++p;
    if (!digit(*p)) return false;
    while (digit(*p)) ++p;
  }
  if (is_int) {
    const char* q = first + (*first == '-');
    if (int_end - q > 18 || (int_end - first == 2 && first[0] == '-' && first[1] == '0')) return false;
    std::int64_t v = 0;
    for (; q < int_end; ++q) v = v * 10 + (*q - '0');
    n = *first == '-' ? -v : v;
    return true;
  }
  const auto [end, ec] = std::from_chars(first, p, d);
  return ec == std::errc() && end == p;
}

// The plain form sim and bench write of a step line — one flat object of
// numbers, keys without escapes — read in one pass: the values parse_step's
// DOM read gives (the first of a repeated key; an integer where one is
// expected, else NaN). 0 when the line is not of that form (parse_step's
// DOM then reads it), 1 when read. `buf` is scratch.
int fast_parse_step(std::string& buf, std::string_view line, Nanos& t, double (&values)[kStepFieldCount],
                    StepExtra* extra) {
  buf.assign(line);
  buf.append(32, '\0');
  const char* p = buf.data();
  const char* const end = p + line.size();
  const auto space = [&p] {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') ++p;
  };
  bool seen[kStepFieldCount] = {};
  bool seen_t = false, seen_dur = false, seen_query = false, seen_hit = false;
  double dur = kNaN, query = kNaN, hit = kNaN;
  for (double& v : values) v = kNaN;
  space();
  if (*p != '{') return 0;
  ++p;
  space();
  if (*p == '}') return 0;
  while (true) {
    if (*p != '"') return 0;
    const char* const key = ++p;
    while (true) {
      const auto c = static_cast<unsigned char>(*p);
      if (c == '"') break;
      if (c < 0x20 || c == '\\' || c >= 0x80) return 0;
      ++p;
    }
    const std::string_view k(key, static_cast<std::size_t>(p - key));
    ++p;
    space();
    if (*p != ':') return 0;
    ++p;
    space();
    bool is_int = false;
    std::int64_t n = 0;
    double d = 0;
    if (!plain_number(p, is_int, n, d)) return 0;
    const double as_double = is_int ? static_cast<double>(n) : d;
    if (k == "t_ns") {
      if (!seen_t) {
        if (!is_int) return 0;
        t = n;
        seen_t = true;
      }
    } else if (k == "dur_ns") {
      if (!seen_dur) dur = is_int && n >= 0 ? as_double : kNaN, seen_dur = true;
    } else if (k == "query_tokens") {
      if (!seen_query) query = is_int ? as_double : kNaN, seen_query = true;
    } else if (k == "hit_tokens") {
      if (!seen_hit) hit = is_int ? as_double : kNaN, seen_hit = true;
    } else {
      static const auto kKeys = [] {
        std::array<std::string_view, kStepFieldCount> keys;
        for (std::size_t i = 0; i < kStepFieldCount; ++i) keys[i] = kStepFields[i].key;
        return keys;
      }();
      for (std::size_t i = 0; i < kStepFieldCount; ++i)
        if (k.size() == kKeys[i].size() && k == kKeys[i]) {
          if (!seen[i]) values[i] = as_double, seen[i] = true;
          break;
        }
    }
    space();
    if (*p == ',') {
      ++p;
      space();
      continue;
    }
    if (*p != '}') return 0;
    ++p;
    break;
  }
  space();
  if (p != end || !seen_t) return 0;
  if (extra) {
    extra->dur_ns = dur;
    extra->query_tokens = query;
    extra->hit_tokens = hit;
  }
  return 1;
}

// The t_ns of the first line of steps.jsonl that parses, nullopt when none
// of the first 1,000 lines does.
std::optional<Nanos> first_step_time(const fs::path& file) {
  TextReader reader = TextReader::open_regular(file.string(), "steps file");
  simdjson::dom::parser parser;
  std::string_view line;
  double values[kStepFieldCount];
  Nanos t = 0;
  for (int i = 0; i < 1000 && reader.next_line(line); ++i)
    if (reader.flaw() == TextReader::Flaw::kNone && parse_step(parser, line, t, values)) return t;
  return std::nullopt;
}

// What one byte range of steps.jsonl gives: its reducers (running totals
// counted from 0 in the range), the totals it adds, its lines and its
// first bad line (numbered within the range).
struct StepsPart {
  std::vector<ColumnReducer> reducers;
  double totals[kStepFieldCount] = {};
  std::uint64_t steps = 0, lines = 0, skipped = 0, first_bad_line = 0, outside = 0;
  std::string first_bad;
  bool any = false;
  double first_t_s = 0, last_t_s = 0;
  StepStats stats;
};

// The pixel columns a run's step series are reduced to.
constexpr std::size_t kStepColumns = 1000;

// The field indexes the step statistics read.
constexpr std::size_t step_field(std::string_view key) {
  for (std::size_t i = 0; i < kStepFieldCount; ++i)
    if (std::string_view(kStepFields[i].key) == key) return i;
  return kStepFieldCount;
}
constexpr std::size_t kFieldSeqs = step_field("seqs"), kFieldPrefill = step_field("prefill_tokens"),
                      kFieldDecode = step_field("decode_tokens"), kFieldWaiting = step_field("waiting"),
                      kFieldPreemptions = step_field("preemptions"),
                      kFieldSwitches = step_field("tenant_switches"),
                      kFieldSwapOut = step_field("swap_out_bytes"),
                      kFieldSwapIn = step_field("swap_in_bytes"), kFieldRunning = step_field("running"),
                      kFieldKvUsage = step_field("kv_usage"), kFieldHostKv = step_field("host_kv_blocks");

std::uint32_t pow2_ceil(double v) {
  std::uint32_t b = 1;
  while (b < v && b < (1u << 31)) b <<= 1;
  return b;
}

double or0(double v) {
  return std::isnan(v) ? 0.0 : v;
}

void count_step(StepStats& s, Nanos t, const double (&values)[kStepFieldCount], const StepExtra& extra) {
  constexpr std::size_t kSeqs = kFieldSeqs, kPrefill = kFieldPrefill, kDecode = kFieldDecode,
                        kWaiting = kFieldWaiting, kPreempt = kFieldPreemptions, kSwitch = kFieldSwitches,
                        kSwapOut = kFieldSwapOut, kSwapIn = kFieldSwapIn;
  const double dur_ns = extra.dur_ns;
  const double seqs = values[kSeqs];
  if (std::isnan(seqs) || seqs < 0) return;
  const auto n = static_cast<std::uint32_t>(std::min(seqs, 4e9));
  ++s.seqs_histogram[n];
  StepWindow& w = s.windows[t >= 0 ? t / 1'000'000'000 : -1 - (-t - 1) / 1'000'000'000];
  w.steps += 1;
  w.busy_ns += or0(dur_ns);
  w.seqs += seqs;
  w.waiting += or0(values[kWaiting]);
  w.prefill_tokens += or0(values[kPrefill]);
  w.decode_tokens += or0(values[kDecode]);
  w.query_tokens += or0(extra.query_tokens);
  w.hit_tokens += or0(extra.hit_tokens);
  w.preemptions += or0(values[kPreempt]);
  w.tenant_switches += or0(values[kSwitch]);
  w.swap_bytes += or0(values[kSwapOut]) + or0(values[kSwapIn]);
  if (std::isnan(dur_ns)) return;
  s.busy_ns += dur_ns;
  ++s.steps_with_duration;
  const double tokens = (std::isnan(values[kPrefill]) ? 0 : values[kPrefill]) +
                        (std::isnan(values[kDecode]) ? 0 : values[kDecode]);
  s.shapes[StepShape{pow2_ceil(seqs), pow2_ceil(tokens)}].add(t, dur_ns / 1e6);
}

void merge_step_stats(StepStats& into, const StepStats& from) {
  for (const auto& [k, v] : from.seqs_histogram) into.seqs_histogram[k] += v;
  for (const auto& [k, v] : from.shapes) into.shapes[k].merge(v);
  into.busy_ns += from.busy_ns;
  into.steps_with_duration += from.steps_with_duration;
  for (const auto& [k, v] : from.windows) into.windows[k].add(v);
}

StepsPart new_steps_part(double x0, double x1, std::size_t columns) {
  StepsPart part;
  for (std::size_t i = 0; i < kStepFieldCount; ++i) part.reducers.emplace_back(x0, x1, columns);
  return part;
}

// One step into a part, reduced on [x0, x1] (seconds from `origin`).
void take_step(StepsPart& part, Nanos t, const double (&values)[kStepFieldCount], const StepExtra& extra,
               Nanos origin, double x0, double x1) {
  const double t_s = nanos_to_s(t - origin);
  if (t_s < x0 || t_s > x1) ++part.outside;  // out of time order: drawn at an edge of the axis
  if (!part.any) part.first_t_s = t_s;
  part.any = true;
  part.last_t_s = t_s;
  for (std::size_t i = 0; i < kStepFieldCount; ++i) {
    const double v =
        kStepFields[i].cumulative && !std::isnan(values[i]) ? (part.totals[i] += values[i]) : values[i];
    part.reducers[i].add(t_s, v);
  }
  count_step(part.stats, t, values, extra);
  ++part.steps;
}

// The lines of steps.jsonl that start in [begin, end), reduced on [x0, x1]
// (seconds from `origin`).
StepsPart read_steps_range(const fs::path& file, std::uint64_t begin, std::uint64_t end, Nanos origin,
                           double x0, double x1, std::size_t columns) {
  StepsPart part = new_steps_part(x0, x1, columns);
  TextReader reader = TextReader::open_regular(file.string(), "steps file", TextReader::kDefaultMaxLineBytes,
                                               begin > 0 ? begin - 1 : 0);
  std::string_view line;
  if (begin > 0) reader.next_line(line);  // the end of a line the range before reads
  simdjson::dom::parser parser;
  std::string scratch;
  double values[kStepFieldCount];
  StepExtra extra;
  while (reader.next_line(line)) {
    if (reader.line_offset() >= end) break;
    ++part.lines;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    Nanos t = 0;
    if (reader.flaw() != TextReader::Flaw::kNone || (fast_parse_step(scratch, line, t, values, &extra) == 0 &&
                                                     !parse_step(parser, line, t, values, &extra))) {
      if (part.skipped++ == 0) {
        part.first_bad_line = part.lines;
        part.first_bad =
            reader.flaw() != TextReader::Flaw::kNone ? "too long or binary" : "not a step record";
      }
      continue;
    }
    take_step(part, t, values, extra, origin, x0, x1);
  }
  return part;
}

void join_steps(std::vector<StepsPart>& parts, StepsData& out, std::vector<std::string>& notes);

// steps.jsonl, read once in byte ranges at the same time (as requests.jsonl
// is) and reduced per pixel column as it is read; the ranges' columns are
// joined in file order, each range's running totals carried on by the
// totals before it. The time axis runs from the first step to the last
// whole one (read from the file's two ends).
void load_steps(const fs::path& file, Nanos origin, std::size_t columns, unsigned ranges, StepsData& out,
                std::vector<std::string>& notes) {
  out.present = true;
  const auto first = first_step_time(file);
  const auto last = last_step_time(file);
  const double x0 = first ? nanos_to_s(*first - origin) : 0;
  const double x1 = last ? std::max(x0, nanos_to_s(*last - origin)) : x0;
  std::error_code ec;
  const std::uint64_t size = fs::file_size(file, ec);
  if (ranges == 0)
    ranges = size < kParallelReadBytes ? 1 : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  if (size == 0) ranges = 1;
  const auto bound = [&](unsigned k) {
    return k == ranges ? UINT64_MAX
                       : static_cast<std::uint64_t>(static_cast<unsigned __int128>(size) * k / ranges);
  };
  std::vector<std::future<StepsPart>> later;
  for (unsigned k = 1; k < ranges; ++k)
    later.push_back(std::async(std::launch::async, read_steps_range, file, bound(k), bound(k + 1), origin, x0,
                               x1, columns));
  std::vector<StepsPart> parts;
  parts.push_back(read_steps_range(file, 0, bound(1), origin, x0, x1, columns));
  for (auto& f : later) parts.push_back(f.get());
  join_steps(parts, out, notes);
}

// The parts of steps.jsonl (its byte ranges in file order) joined into out.
void join_steps(std::vector<StepsPart>& parts, StepsData& out, std::vector<std::string>& notes) {
  out.present = true;
  StepsPart& all = parts.front();
  std::uint64_t lines_before = all.lines;
  for (std::size_t k = 1; k < parts.size(); ++k) {
    StepsPart& p = parts[k];
    for (std::size_t i = 0; i < kStepFieldCount; ++i) {
      all.reducers[i].append(p.reducers[i], kStepFields[i].cumulative ? all.totals[i] : 0.0);
      all.totals[i] += p.totals[i];
    }
    if (p.skipped > 0 && all.skipped == 0) {
      all.first_bad_line = lines_before + p.first_bad_line;
      all.first_bad = p.first_bad;
    }
    all.skipped += p.skipped;
    all.outside += p.outside;
    all.steps += p.steps;
    merge_step_stats(all.stats, p.stats);
    if (p.any) {
      if (!all.any) all.first_t_s = p.first_t_s;
      all.last_t_s = p.last_t_s;
      all.any = true;
    }
    lines_before += p.lines;
  }
  out.steps = all.steps;
  out.stats = std::move(all.stats);
  out.lines_skipped = all.skipped;
  out.first_t_s = all.first_t_s;
  out.last_t_s = all.last_t_s;
  for (std::size_t i = 0; i < kStepFieldCount && all.any; ++i) {
    XY xy = all.reducers[i].result();
    if (std::all_of(xy.y.begin(), xy.y.end(), [](double v) { return std::isnan(v); })) continue;
    out.series.push_back(StepSeries{kStepFields[i].name, std::move(xy.x), std::move(xy.y)});
  }
  if (all.outside > 0)
    notes.push_back(
        fmt::format("steps.jsonl: {} step{} outside the time between the first and the last line "
                    "(the file is not in time order): drawn at the edges of the time axis",
                    all.outside, all.outside == 1 ? "" : "s"));
  if (out.lines_skipped > 0)
    notes.push_back(fmt::format("steps.jsonl: {} bad line{} skipped; the first: line {}: {}",
                                out.lines_skipped, out.lines_skipped == 1 ? "" : "s", all.first_bad_line,
                                all.first_bad));
}

}  // namespace

// phases.json of the run directory (written by `check`): {"phases": [{"phase",
// "start_ns", "end_ns"}]}. A file that is not that is said in a note.
nlohmann::json load_phases(const fs::path& file, std::vector<std::string>& notes) {
  nlohmann::json out = nlohmann::json::array();
  const std::string text = read_regular_file(file.string(), "phases.json", kMaxPhasesJsonBytes);
  require_json_depth(text, file.string());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const auto bad = [&](const std::string& why) {
    notes.push_back(fmt::format("phases.json: {}; no lifecycle phases shown", why));
    return nlohmann::json::array();
  };
  if (j.is_discarded() || !j.is_object() || !j.contains("phases") || !j["phases"].is_array())
    return bad("expected an object with a \"phases\" array");
  for (std::size_t i = 0; i < j["phases"].size(); ++i) {
    const auto& p = j["phases"][i];
    if (!p.is_object() || !p.contains("phase") || !p["phase"].is_string() || !p.contains("start_ns") ||
        !p["start_ns"].is_number_integer() || !p.contains("end_ns") || !p["end_ns"].is_number_integer() ||
        p["end_ns"].get<Nanos>() < p["start_ns"].get<Nanos>())
      return bad(
          fmt::format("phases[{}]: expected {{\"phase\": name, \"start_ns\": integer, \"end_ns\": "
                      "integer not before start_ns}}",
                      i));
    out.push_back({{"phase", p["phase"]}, {"start_ns", p["start_ns"]}, {"end_ns", p["end_ns"]}});
  }
  return out;
}

namespace {

// What samples.jsonl gives a run (read on a thread of its own while
// requests.jsonl is read): canonical and derived series streamed into
// per-series arrays (raw series stay in the file).
struct SamplesRead {
  bool present = false;
  std::vector<SampledSeries> series;
  std::uint64_t lines = 0, skipped = 0, without_series = 0;
  std::vector<std::string> notes;
  KernelInventory kernels;
};

constexpr const char* kNoSamplesNote =
    "no samples.jsonl: no server, GPU or host series (bench samples them unless --no-scrape, "
    "--no-gpu and --no-host; sim unless --no-samples)";

SamplesRead read_samples(const fs::path& dir) {
  SamplesRead read;
  rundir::RunSource source;
  source.dir = dir;
  if (auto samples = source.open_samples(rundir::BadLines::kSkip)) {
    read.present = true;
    SeriesSink sink(read.series);
    // CUPTI lines of `probe gpu-context` (rundir/kernels.h): kernel
    // launches summed up per kernel, other CUPTI records passed over. Only
    // lines that are not observations get here.
    KernelCollector kernels;
    KernelLineParser kernel_lines;
    KernelRecord launch;
    samples->take_other_lines([&](std::string_view line) {
      switch (kernel_lines.parse(line, launch)) {
        case KernelLineKind::kKernel:
          if (!kernels.add(launch.name, "", launch.start_ns, launch.duration_ns))
            throw rundir::LineError("value", "the launches' durations add up past 2^63 ns");
          return true;
        case KernelLineKind::kCuptiOther:
          kernels.pass_over();
          return true;
        case KernelLineKind::kOther:
        case KernelLineKind::kNotOneOfOurs:
          break;
      }
      return false;
    });
    observe::Observation o;
    while (samples->next(o)) {
      sink.add(o, "canonical", o.canonical, true);
      sink.add(o, "derived", o.derived, false);
    }
    read.lines = samples->stats().records;
    read.skipped = samples->stats().skipped;
    read.without_series = samples->without_series();
    if (kernels.launches() > 0) read.kernels = kernels.finish(source.samples_name(), "cupti-jsonl");
    if (samples->stats().skipped > 0)
      read.notes.push_back(fmt::format("samples.jsonl: {} bad line{} skipped; the first: {}",
                                       samples->stats().skipped, samples->stats().skipped == 1 ? "" : "s",
                                       within_run(dir, samples->stats().first_skipped)));
  } else {
    read.notes.push_back(kNoSamplesNote);
  }
  return read;
}

// What read_run_files and RunFilesBuilder say of requests.jsonl, and what
// they keep of it (`read`: the whole file's Partial).
void take_requests(RunFilesRead& out, Partial& read, bool has_requests, const fs::path& dir) {
  if (has_requests) {
    out.requests = std::move(read.a);
    merge_itl_chunks(out.requests);
    out.slowest = read.slowest.take();
    const auto& stats = read.stats;
    out.request_lines_skipped = stats.skipped;
    if (stats.skipped > 0)
      out.notes.push_back(
          fmt::format("requests.jsonl: {} bad line{} skipped (a run cut by a crash leaves its last "
                      "line incomplete); the first: {}",
                      stats.skipped, stats.skipped == 1 ? "" : "s", within_run(dir, stats.first_skipped)));
  } else {
    out.notes.push_back(
        "no requests.jsonl: no per-request data (latency distributions and timelines are empty)");
  }
  if (has_requests && out.requests.size() == 0 && out.request_lines_skipped == 0)
    out.notes.push_back("requests.jsonl holds no request: no latency distribution or timeline");
}

void take_samples(RunFilesRead& out, SamplesRead& samples) {
  out.has_samples = samples.present;
  out.series = std::move(samples.series);
  out.sample_lines = samples.lines;
  out.sample_lines_skipped = samples.skipped;
  out.sample_lines_without_series = samples.without_series;
  out.kernels = std::move(samples.kernels);
  out.notes.insert(out.notes.end(), samples.notes.begin(), samples.notes.end());
}

// sim's steps.jsonl (sim --no-steps leaves it out; bench has none).
struct StepsRead {
  StepsData steps;
  std::vector<std::string> notes;
};
StepsRead read_steps(const fs::path& dir, const LoadOptions& options) {
  StepsRead r;
  std::error_code ec;
  if (fs::exists(dir / "steps.jsonl", ec))
    load_steps(dir / "steps.jsonl", 0, kStepColumns, options.request_ranges, r.steps, r.notes);
  return r;
}

void take_steps(RunFilesRead& out, StepsRead& steps) {
  out.steps = std::move(steps.steps);
  out.notes.insert(out.notes.end(), steps.notes.begin(), steps.notes.end());
}

}  // namespace

// The run's JSONL files read: requests.jsonl here, samples.jsonl and
// steps.jsonl on threads of their own meanwhile. Steps are reduced on their
// own clock; load_run moves them onto the run's time axis once its origin is
// known (the columns do not move with it). need_summary: run.json has no
// summary, so it is recomputed from requests.jsonl.
RunFilesRead read_run_files(const fs::path& dir, bool has_run_json, bool need_summary,
                            const LoadOptions& options) {
  std::error_code ec;
  RunFilesRead out;
  const auto launch = options.concurrent ? std::launch::async : std::launch::deferred;
  auto samples_read = std::async(launch, read_samples, dir);
  auto steps_read = std::async(launch, read_steps, dir, options);

  // requests.jsonl, streamed. A bad line (a last line cut by a crash) is
  // skipped and counted, never fatal.
  const bool has_requests = fs::exists(dir / "requests.jsonl", ec);
  std::optional<SummaryBuilder> builder;
  if (need_summary) builder.emplace();
  Partial read;
  if (has_requests)
    read = read_requests(dir / "requests.jsonl", options.request_ranges, builder ? &*builder : nullptr);
  take_requests(out, read, has_requests, dir);
  if (builder) {
    if (out.requests.size() > 0) {
      out.recomputed_summary = builder->build();
      out.notes.push_back(has_run_json
                              ? "run.json has no summary (the run did not reach its end): the summary "
                                "was recomputed from requests.jsonl, without server counters or SLOs"
                              : "the summary was recomputed from requests.jsonl, without server "
                                "counters or SLOs");
    } else if (has_run_json) {
      out.notes.push_back("no summary: run.json has none and requests.jsonl holds no request");
    }
  }

  // samples.jsonl, read meanwhile.
  SamplesRead samples = samples_read.get();
  take_samples(out, samples);
  // steps.jsonl, read meanwhile.
  StepsRead steps = steps_read.get();
  take_steps(out, steps);
  return out;
}

namespace {

// The text of a number as a file of the run holds it, read back: what a
// reader of the file gets (RequestRecord::append_json writes these with a
// fixed number of decimals).
double as_written(double v, int decimals) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, v, std::chars_format::fixed, decimals).ptr;
  double out = v;
  std::from_chars(text, end, out);  // correctly rounded, as the JSON parsers read it
  return out;
}

}  // namespace

bool SlowestRequests::wants(Nanos e2e, std::uint64_t id) const {
  if (n_ == 0) return false;
  if (heap_.size() < n_) return true;
  const SlowRequest& top = heap_.front();
  return e2e > top.e2e() || (e2e == top.e2e() && id < top.id);
}

namespace {
// The heap's order: the request that leaves first (fastest; among equals the
// higher id) on top.
bool leaves_later(const SlowRequest& a, const SlowRequest& b) {
  return a.e2e() > b.e2e() || (a.e2e() == b.e2e() && a.id < b.id);
}
}  // namespace

void SlowestRequests::add(SlowRequest r) {
  if (!wants(r.e2e(), r.id)) return;
  if (heap_.size() == n_) {
    std::pop_heap(heap_.begin(), heap_.end(), leaves_later);
    heap_.pop_back();
  }
  heap_.push_back(std::move(r));
  std::push_heap(heap_.begin(), heap_.end(), leaves_later);
}

void SlowestRequests::merge(SlowestRequests&& other) {
  for (auto& r : other.heap_) add(std::move(r));
  other.heap_.clear();
}

std::vector<SlowRequest> SlowestRequests::take() {
  std::vector<SlowRequest> out = std::move(heap_);
  heap_.clear();
  std::sort(out.begin(), out.end(), leaves_later);
  return out;
}

double RequestArrays::ttft_ms(std::size_t i) const {
  if (!counted(i) || t_first_token[i] < 0 || t_send[i] < 0) return kNaN;
  return nanos_to_ms(t_first_token[i] - t_send[i]);
}
double RequestArrays::ttft_sched_ms(std::size_t i) const {
  if (!counted(i) || t_first_token[i] < 0 || t_sched[i] < 0) return kNaN;
  return nanos_to_ms(t_first_token[i] - t_sched[i]);
}
double RequestArrays::e2e_ms(std::size_t i) const {
  if (!counted(i) || t_last_token[i] < 0 || t_send[i] < 0) return kNaN;
  return nanos_to_ms(t_last_token[i] - t_send[i]);
}
double RequestArrays::tpot_ms(std::size_t i) const {
  if (!counted(i) || output_tokens[i] < 2 || t_first_token[i] < 0 || t_last_token[i] < 0) return kNaN;
  return nanos_to_ms(t_last_token[i] - t_first_token[i]) / static_cast<double>(output_tokens[i] - 1);
}
double RequestArrays::ttfo_ms(std::size_t i) const {
  if (i >= t_first_answer.size()) return ttft_ms(i);  // arrays made without the column
  if (!counted(i) || t_first_answer[i] < 0 || t_send[i] < 0) return kNaN;
  return nanos_to_ms(t_first_answer[i] - t_send[i]);
}
double RequestArrays::tpot_answer_ms(std::size_t i) const {
  if (i >= t_first_answer.size()) return tpot_ms(i);
  const std::int64_t reasoning = has_reasoning(i) ? reasoning_tokens[i] : 0;
  const std::int64_t answer = output_tokens[i] - reasoning;
  if (!counted(i) || answer < 2 || t_first_answer[i] < 0 || t_last_token[i] < 0) return kNaN;
  return nanos_to_ms(t_last_token[i] - t_first_answer[i]) / static_cast<double>(answer - 1);
}
bool RequestArrays::any_reasoning() const {
  for (std::size_t i = 0; i < reasoning_tokens.size(); ++i)
    if (reasoning_tokens[i] >= 0 && counted(i)) return true;
  return false;
}
double RequestArrays::send_lag_ms(std::size_t i) const {
  if (warmup[i] || t_send[i] < 0 || t_sched[i] < 0) return kNaN;
  return nanos_to_ms(t_send[i] - std::max(t_sched[i], t_dispatch[i]));
}
double RequestArrays::slot_wait_ms(std::size_t i) const {
  if (warmup[i] || t_dispatch[i] < 0 || t_sched[i] < 0) return kNaN;
  return nanos_to_ms(t_dispatch[i] - t_sched[i]);
}

void keep_freed_memory() {
  ::mallopt(M_MMAP_MAX, 0);
  ::mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

void ShapeSightings::add(Nanos t, double ms) {
  if (first_t < 0 || t < first_t) {
    second_t = first_t;
    second_ms = first_ms;
    first_t = t;
    first_ms = ms;
  } else if (second_t < 0 || t < second_t) {
    second_t = t;
    second_ms = ms;
  }
}

void ShapeSightings::merge(const ShapeSightings& other) {
  if (other.first_t >= 0) add(other.first_t, other.first_ms);
  if (other.second_t >= 0) add(other.second_t, other.second_ms);
}

void StepWindow::add(const StepWindow& o) {
  steps += o.steps;
  busy_ns += o.busy_ns;
  seqs += o.seqs;
  waiting += o.waiting;
  prefill_tokens += o.prefill_tokens;
  decode_tokens += o.decode_tokens;
  query_tokens += o.query_tokens;
  hit_tokens += o.hit_tokens;
  preemptions += o.preemptions;
  tenant_switches += o.tenant_switches;
  swap_bytes += o.swap_bytes;
}

// A step as take_step takes it, spooled to a temporary file while the run
// lasts: its reduction needs the time span of every step before it takes
// the first, and a long run has millions of steps (120 bytes each here, a
// few hundred in JSON), more than the run's memory budget.
struct SpooledStep {
  Nanos t = 0;
  double values[kStepFieldCount];
  StepExtra extra;
};
static_assert(std::is_trivially_copyable_v<SpooledStep>);

struct RunFilesBuilder::Impl {
  Partial requests;
  SamplesRead samples;
  SeriesSink sink{samples.series};
  // Steps: in a temporary file (tmpfile(): gone when closed or when the
  // process ends); a spool that failed leaves the steps to a read of steps.jsonl.
  std::FILE* spool = nullptr;
  bool spool_failed = false;
  std::uint64_t steps = 0;
  Nanos first_t = 0, last_t = 0;
  ~Impl() {
    if (spool) std::fclose(spool);
  }
};

RunFilesBuilder::RunFilesBuilder() : impl_(std::make_unique<Impl>()) {}
RunFilesBuilder::~RunFilesBuilder() = default;

void RunFilesBuilder::add_request(const RequestRecord& r) {
  ++impl_->requests.stats.lines;
  ++impl_->requests.stats.records;
  if (!r.logprobs && r.server_prompt_ms < 0) return absorb(r, impl_->requests);
  // The numbers a line holds with fewer digits than the record: as read back.
  RequestRecord e = r;
  if (e.logprobs) e.logprobs->sum = as_written(e.logprobs->sum, 4);
  if (e.server_prompt_ms >= 0) e.server_prompt_ms = as_written(e.server_prompt_ms, 3);
  absorb(e, impl_->requests);
}

void RunFilesBuilder::add_observation(const observe::Observation& o) {
  auto& s = impl_->samples;
  if (!o.error.empty() || !o.unavailable.empty()) {
    ++s.without_series;
    return;
  }
  ++s.lines;
  impl_->sink.add(o, "canonical", o.canonical, true);
  impl_->sink.add(o, "derived", o.derived, false);
}

void RunFilesBuilder::add_step(const StepRecord& r) {
  auto& im = *impl_;
  if (im.spool_failed) return;
  if (im.spool == nullptr && (im.spool = std::tmpfile()) == nullptr) {
    im.spool_failed = true;
    return;
  }
  // The numbers as parse_step reads them from the line r.append_json writes.
  SpooledStep p;
  p.t = r.t;
  const auto set = [&p](std::size_t field, double v) { p.values[field] = v; };
  static_assert(kStepFieldCount == 11, "a field of steps.jsonl added to kStepFields is to be set here");
  set(kFieldSeqs, r.seqs);
  set(kFieldRunning, r.running);
  set(kFieldWaiting, r.waiting);
  set(kFieldKvUsage, as_written(r.kv_usage, 6));
  set(kFieldPrefill, r.prefill_tokens);
  set(kFieldDecode, r.decode_tokens);
  set(kFieldPreemptions, r.preemptions);
  set(kFieldSwitches, r.tenant_switches);
  set(kFieldSwapOut, static_cast<double>(r.swap_out_bytes));
  set(kFieldSwapIn, static_cast<double>(r.swap_in_bytes));
  set(kFieldHostKv, static_cast<double>(r.host_kv_blocks));
  p.extra.dur_ns = r.dur >= 0 ? static_cast<double>(r.dur) : kNaN;
  p.extra.query_tokens = static_cast<double>(r.query_tokens);
  p.extra.hit_tokens = static_cast<double>(r.hit_tokens);
  if (std::fwrite(&p, sizeof p, 1, im.spool) != 1) {
    im.spool_failed = true;
    return;
  }
  if (im.steps++ == 0) im.first_t = r.t;
  im.last_t = r.t;
}

RunFilesRead RunFilesBuilder::finish(const fs::path& dir, const LoadOptions& options) {
  std::error_code ec;
  RunFilesRead out;
  take_requests(out, impl_->requests, fs::exists(dir / "requests.jsonl", ec), dir);
  SamplesRead& samples = impl_->samples;
  samples.present = fs::exists(dir / "samples.jsonl", ec);
  if (!samples.present) {
    samples = SamplesRead{};
    samples.notes.push_back(kNoSamplesNote);
  }
  take_samples(out, samples);
  StepsRead steps;
  auto& im = *impl_;
  if (!fs::exists(dir / "steps.jsonl", ec)) {
    // sim --no-steps: none
  } else if (im.spool_failed || (im.spool != nullptr && std::fflush(im.spool) != 0) ||
             (im.spool != nullptr && std::fseek(im.spool, 0, SEEK_SET) != 0)) {
    steps = read_steps(dir, options);
  } else {
    // As load_steps reduces the file: on [first, last] of the steps' own clock.
    const double x0 = im.steps > 0 ? nanos_to_s(im.first_t) : 0;
    const double x1 = im.steps > 0 ? std::max(x0, nanos_to_s(im.last_t)) : x0;
    std::vector<StepsPart> parts;
    parts.push_back(new_steps_part(x0, x1, kStepColumns));
    std::vector<SpooledStep> chunk(4096);
    std::uint64_t left = im.steps;
    while (left > 0) {
      const std::size_t n =
          std::fread(chunk.data(), sizeof(SpooledStep),
                     static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size())), im.spool);
      if (n == 0) break;
      for (std::size_t i = 0; i < n; ++i)
        take_step(parts.front(), chunk[i].t, chunk[i].values, chunk[i].extra, 0, x0, x1);
      left -= n;
    }
    if (left > 0) {  // the spool came back short: the file it copies is read instead
      steps = read_steps(dir, options);
    } else {
      join_steps(parts, steps.steps, steps.notes);
    }
  }
  take_steps(out, steps);
  return out;
}

}  // namespace tokenscope::rundir
