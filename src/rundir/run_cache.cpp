#include "rundir/run_cache.h"

#include <mutex>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/run_dir.h"

namespace tokenscope::rundir {

namespace fs = std::filesystem;

namespace {

// The first bytes of a cache, and its format: a change to what is kept or
// how bumps kFormat (an older cache is then ignored and rewritten).
constexpr char kMagic[8] = {'T', 'S', 'C', 'A', 'C', 'H', 'E', '\n'};
// 4: cached_tokens also from llama.cpp's timings; 5: step durations summed
// in ns (exact in any order), not ms; 6: the first answer token and the
// reasoning tokens per request, and planned cancels; 7: the token gaps by
// chunks of request ids (itl_chunks); 8: the server's prompt time per
// request (server_prompt_ms).
constexpr std::uint32_t kFormat = 8;
// The build's layout of what is copied as bytes: a cache made by a build
// with other sizes is not read.
constexpr std::uint32_t kLayout = static_cast<std::uint32_t>(
    sizeof(RequestArrays) * 7 + sizeof(LogprobHistogram) * 5 + sizeof(StepWindow) * 3 +
    sizeof(ShapeSightings) * 2 + sizeof(StepShape) + sizeof(Outcome));

const char* const kSourceFiles[4] = {"run.json", "requests.jsonl", "samples.jsonl", "steps.jsonl"};

class Writer {
 public:
  explicit Writer(std::string start = {}) : out_(std::move(start)) {}
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  // A count, padding to a multiple of 8 bytes, the elements (so that they
  // lie aligned in a mapped file and are copied out as they are).
  template <class T>
  void vec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 8);
    pod<std::uint64_t>(v.size());
    out_.append((8 - out_.size() % 8) % 8, '\0');
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void str(std::string_view s) {
    pod<std::uint64_t>(s.size());
    out_.append(s);
  }
  void strings(const std::vector<std::string>& v) {
    pod<std::uint64_t>(v.size());
    for (const auto& s : v) str(s);
  }
  template <class K, class V>
  void map(const std::map<K, V>& m) {
    pod<std::uint64_t>(m.size());
    for (const auto& [k, v] : m) {
      pod(k);
      pod(v);
    }
  }
  void reserve(std::size_t n) { out_.reserve(n); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Writer wrote; the first shortfall or bad value makes ok()
// false for good, and every read after it yields nothing.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && pos_ == in_.size(); }
  template <class T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v{};
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, in_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  bool vec(std::vector<T>& v) {
    const auto n = pod<std::uint64_t>();
    if (!take((8 - pos_ % 8) % 8)) return false;
    if (n > (in_.size() - pos_) / sizeof(T)) return fail();
    const char* p = in_.data() + pos_;
    if (reinterpret_cast<std::uintptr_t>(p) % alignof(T) == 0) {
      // Copied as they lie (no zeroing first): the input is aligned as the
      // writer padded it when it starts on an 8-byte boundary (a mapped file).
      const T* first = reinterpret_cast<const T*>(p);
      v.assign(first, first + n);
    } else {
      v.resize(n);
      if (n > 0) std::memcpy(v.data(), p, n * sizeof(T));
    }
    pos_ += n * sizeof(T);
    return true;
  }
  bool str(std::string& s) {
    const auto n = count(1);
    if (!ok_) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool strings(std::vector<std::string>& v) {
    const auto n = count(sizeof(std::uint64_t));  // each at least its length
    v.assign(ok_ ? n : 0, std::string());
    for (auto& s : v)
      if (!str(s)) return false;
    return ok_;
  }
  template <class K, class V>
  bool map(std::map<K, V>& m) {
    const auto n = count(sizeof(K) + sizeof(V));
    m.clear();
    for (std::uint64_t i = 0; i < n && ok_; ++i) {
      const K k = pod<K>();
      const V v = pod<V>();
      if (ok_) m.emplace_hint(m.end(), k, v);
    }
    return ok_;
  }
  bool fail() { return ok_ = false; }

 private:
  bool take(std::size_t n) {
    if (!ok_ || in_.size() - pos_ < n) return fail();
    pos_ += n;
    return true;
  }
  // A count of items of at least `each` bytes, checked against what is left
  // (a bad count never allocates).
  std::uint64_t count(std::size_t each) {
    const auto n = pod<std::uint64_t>();
    if (!ok_) return 0;
    if (each > 0 && n > (in_.size() - pos_) / each) {
      fail();
      return 0;
    }
    return n;
  }
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

template <class Arrays>  // RequestArrays, const or not
auto request_columns(Arrays& a) {
  return std::tie(a.t_sched, a.t_dispatch, a.t_send, a.t_first_token, a.t_last_token, a.t_close,
                  a.t_first_answer, a.reasoning_tokens, a.output_tokens, a.prompt_tokens, a.cached_tokens,
                  a.itl_mean_ms, a.itl_max_ms, a.logprob_mean, a.server_prompt_ms, a.outcome, a.warmup,
                  a.cancel_planned, a.tenant, a.task_class);
}

void put_key(Writer& w, const RunFilesKey& key) {
  for (const auto& f : key.files) {
    w.pod<std::uint8_t>(f.exists ? 1 : 0);
    w.pod(f.size);
    w.pod(f.mtime_ns);
  }
}

void put_steps(Writer& w, const StepsData& s) {
  w.pod<std::uint8_t>(s.present ? 1 : 0);
  w.pod(s.steps);
  w.pod(s.lines_skipped);
  w.pod(s.first_t_s);
  w.pod(s.last_t_s);
  w.pod<std::uint64_t>(s.series.size());
  for (const auto& series : s.series) {
    w.str(series.name);
    w.vec(series.t_s);
    w.vec(series.v);
  }
  w.map(s.stats.seqs_histogram);
  w.map(s.stats.shapes);
  w.pod(s.stats.busy_ns);
  w.pod(s.stats.steps_with_duration);
  w.map(s.stats.windows);
}

bool get_steps(Reader& r, StepsData& s) {
  s.present = r.pod<std::uint8_t>() != 0;
  s.steps = r.pod<std::uint64_t>();
  s.lines_skipped = r.pod<std::uint64_t>();
  s.first_t_s = r.pod<double>();
  s.last_t_s = r.pod<double>();
  const auto n = r.pod<std::uint64_t>();
  for (std::uint64_t i = 0; i < n && r.ok(); ++i) {
    StepSeries series;
    if (!r.str(series.name) || !r.vec(series.t_s) || !r.vec(series.v)) return false;
    if (series.t_s.size() != series.v.size()) return r.fail();
    s.series.push_back(std::move(series));
  }
  r.map(s.stats.seqs_histogram);
  r.map(s.stats.shapes);
  s.stats.busy_ns = r.pod<double>();
  s.stats.steps_with_duration = r.pod<std::uint64_t>();
  r.map(s.stats.windows);
  return r.ok();
}

void put_slow(Writer& w, const SlowRequest& q) {
  w.pod(q.id);
  w.str(q.tenant);
  w.str(q.task_class);
  for (const Nanos t :
       {q.t_sched, q.t_dispatch, q.t_send, q.t_first_scheduled, q.t_first_token, q.t_last_token, q.t_close})
    w.pod(t);
  w.pod(q.prompt_tokens);
  w.pod(q.cached_tokens);
  w.pod(q.output_tokens);
  w.pod(q.preemptions);
  w.pod(q.server_prompt_ms);
  w.vec(q.event_times);
}

bool get_slow(Reader& r, SlowRequest& q) {
  q.id = r.pod<std::uint64_t>();
  if (!r.str(q.tenant) || !r.str(q.task_class)) return false;
  for (Nanos* t : {&q.t_sched, &q.t_dispatch, &q.t_send, &q.t_first_scheduled, &q.t_first_token,
                   &q.t_last_token, &q.t_close})
    *t = r.pod<Nanos>();
  q.prompt_tokens = r.pod<std::int64_t>();
  q.cached_tokens = r.pod<std::int64_t>();
  q.output_tokens = r.pod<std::int64_t>();
  q.preemptions = r.pod<std::uint32_t>();
  q.server_prompt_ms = r.pod<double>();
  return r.vec(q.event_times);
}

void put_kernels(Writer& w, const KernelInventory& k) {
  w.str(k.source);
  w.str(k.format);
  w.pod(k.launches);
  w.pod(k.total_ns);
  w.pod(k.passed_over);
  w.pod<std::uint64_t>(k.kernels.size());
  for (const auto& s : k.kernels) {
    w.str(s.name);
    w.str(s.label);
    w.pod(s.launches);
    w.pod(s.total_ns);
    w.pod(s.median_ns);
    w.pod(s.first_start_ns);
    w.pod(s.first_duration_ns);
  }
}

// What the kernel reader makes (kernels.h): names ascending and unique,
// every kernel launched, its median a whole number of ns and its first
// launch within its total, the totals adding up.
bool get_kernels(Reader& r, KernelInventory& k) {
  if (!r.str(k.source) || !r.str(k.format)) return false;
  k.launches = r.pod<std::uint64_t>();
  k.total_ns = r.pod<std::int64_t>();
  k.passed_over = r.pod<std::uint64_t>();
  const auto n = r.pod<std::uint64_t>();
  std::uint64_t launches = 0;
  std::int64_t total = 0;
  for (std::uint64_t i = 0; i < n && r.ok(); ++i) {
    KernelStats s;
    if (!r.str(s.name) || !r.str(s.label)) return false;
    s.launches = r.pod<std::uint64_t>();
    s.total_ns = r.pod<std::int64_t>();
    s.median_ns = r.pod<double>();
    s.first_start_ns = r.pod<Nanos>();
    s.first_duration_ns = r.pod<std::int64_t>();
    if (!r.ok() || (!k.kernels.empty() && !(k.kernels.back().name < s.name)) || s.launches == 0 ||
        s.total_ns < 0 || !(s.median_ns >= 0 && s.median_ns <= static_cast<double>(s.total_ns)) ||
        s.median_ns != std::floor(s.median_ns) || s.first_duration_ns < 0 ||
        s.first_duration_ns > s.total_ns || __builtin_add_overflow(launches, s.launches, &launches) ||
        __builtin_add_overflow(total, s.total_ns, &total))
      return r.fail();
    k.kernels.push_back(std::move(s));
  }
  return r.ok() && launches == k.launches && total == k.total_ns;
}

std::int64_t mtime_ns(const struct stat& st) {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

RunFilesKey run_files_key(const fs::path& dir) {
  RunFilesKey key;
  for (std::size_t i = 0; i < key.files.size(); ++i) {
    struct stat st {};
    if (::stat((dir / kSourceFiles[i]).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      key.files[i].exists = true;
      key.files[i].size = static_cast<std::uint64_t>(st.st_size);
      key.files[i].mtime_ns = mtime_ns(st);
    }
  }
  return key;
}

std::string run_cache_header(const RunFilesKey& key) {
  Writer w;
  for (const char c : kMagic) w.pod(c);
  w.pod(kFormat);
  w.pod(kLayout);
  put_key(w, key);
  return w.take();
}

std::string encode_run_cache(const RunFilesKey& key, const RunFilesRead& read) {
  Writer w(run_cache_header(key));
  // The requests: every column, then what is kept whole. The buffer sized
  // for the columns at once (not doubled and copied as it grows).
  const RequestArrays& a = read.requests;
  std::size_t column_bytes = 0;
  std::apply([&](const auto&... column) { ((column_bytes += column.size() * sizeof(column[0]) + 16), ...); },
             request_columns(a));
  w.reserve(column_bytes + (std::size_t{8} << 20));
  w.pod<std::uint64_t>(a.size());
  std::apply([&](const auto&... column) { (w.vec(column), ...); }, request_columns(a));
  w.strings(a.tenant_names);
  w.strings(a.class_names);
  {
    nlohmann::json chunks = nlohmann::json::array();
    for (const auto& [key, h] : a.itl_chunks) chunks.push_back({key, h.to_json()});
    w.str(nlohmann::json{{"shift", a.itl_chunk_shift}, {"chunks", std::move(chunks)}}.dump());
  }
  w.pod(a.logprobs.requests);
  w.pod(a.logprobs.requests_with_tokens);
  w.pod(a.logprobs.pooled);
  w.pod(a.logprobs.halves);
  w.pod(a.logprobs.half_requests);
  w.pod<std::uint64_t>(read.slowest.size());
  for (const auto& q : read.slowest) put_slow(w, q);
  w.pod(read.request_lines_skipped);
  w.str(read.recomputed_summary.is_null() ? std::string() : read.recomputed_summary.dump());
  // The samples.
  w.pod<std::uint8_t>(read.has_samples ? 1 : 0);
  w.pod<std::uint64_t>(read.series.size());
  for (const auto& s : read.series) {
    w.str(s.source);
    w.str(s.kind);
    w.str(s.name);
    w.str(s.labels);
    w.vec(s.t);
    w.vec(s.v);
  }
  w.pod(read.sample_lines);
  w.pod(read.sample_lines_skipped);
  w.pod(read.sample_lines_without_series);
  put_kernels(w, read.kernels);
  put_steps(w, read.steps);
  w.strings(read.notes);
  return w.take();
}

std::optional<RunFilesRead> decode_run_cache(std::string_view bytes, const RunFilesKey& key) {
  Reader r(bytes);
  for (const char c : kMagic)
    if (r.pod<char>() != c) return std::nullopt;
  if (r.pod<std::uint32_t>() != kFormat || r.pod<std::uint32_t>() != kLayout) return std::nullopt;
  RunFilesKey made;
  for (auto& f : made.files) {
    f.exists = r.pod<std::uint8_t>() != 0;
    f.size = r.pod<std::uint64_t>();
    f.mtime_ns = r.pod<std::int64_t>();
  }
  if (!r.ok() || !(made == key)) return std::nullopt;

  RunFilesRead read;
  RequestArrays& a = read.requests;
  const auto n = r.pod<std::uint64_t>();
  bool columns_ok = true;
  std::apply(
      [&](auto&... column) { ((columns_ok = columns_ok && r.vec(column) && column.size() == n), ...); },
      request_columns(a));
  if (!columns_ok || !r.strings(a.tenant_names) || !r.strings(a.class_names)) return std::nullopt;
  // What the reader of the JSONL files never makes: an outcome out of the
  // enum, a flag other than 0/1, a name index past the names (other than
  // the one past the last that stands for names beyond UINT16_MAX).
  const auto name_ok = [](std::uint16_t k, const std::vector<std::string>& names) {
    return k < names.size() || k == UINT16_MAX;
  };
  for (std::size_t i = 0; i < n; ++i)
    if (static_cast<unsigned>(a.outcome[i]) > static_cast<unsigned>(Outcome::kRejected) || a.warmup[i] > 1 ||
        !name_ok(a.tenant[i], a.tenant_names) || !name_ok(a.task_class[i], a.class_names))
      return std::nullopt;
  std::string text;
  if (!r.str(text)) return std::nullopt;
  if (json_too_deep_at(text) != std::string_view::npos) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("shift") || !j["shift"].is_number_unsigned() || !j.contains("chunks"))
      return std::nullopt;
    const auto shift = j["shift"].get<std::uint64_t>();
    const auto& chunks = j["chunks"];
    if (shift < kItlChunkShiftMin || shift > 63 || !chunks.is_array() || chunks.size() > kItlChunks)
      return std::nullopt;
    a.itl_chunk_shift = static_cast<unsigned>(shift);
    for (const auto& c : chunks) {
      if (!c.is_array() || c.size() != 2 || !c[0].is_number_unsigned()) return std::nullopt;
      a.itl_chunks[c[0].get<std::uint64_t>()] = LogLinearHistogram::from_json(c[1]);
    }
    merge_itl_chunks(a);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  a.logprobs.requests = r.pod<std::uint64_t>();
  a.logprobs.requests_with_tokens = r.pod<std::uint64_t>();
  a.logprobs.pooled = r.pod<LogprobHistogram>();
  a.logprobs.halves = r.pod<std::array<LogprobHistogram, 2>>();
  a.logprobs.half_requests = r.pod<std::array<std::uint64_t, 2>>();
  const auto slow = r.pod<std::uint64_t>();
  for (std::uint64_t i = 0; i < slow && r.ok(); ++i) {
    SlowRequest q;
    if (!get_slow(r, q)) return std::nullopt;
    read.slowest.push_back(std::move(q));
  }
  read.request_lines_skipped = r.pod<std::uint64_t>();
  if (!r.str(text)) return std::nullopt;
  if (!text.empty()) {
    if (json_too_deep_at(text) != std::string_view::npos) return std::nullopt;
    read.recomputed_summary = nlohmann::json::parse(text, nullptr, false);
    if (read.recomputed_summary.is_discarded() || !read.recomputed_summary.is_object()) return std::nullopt;
  }
  read.has_samples = r.pod<std::uint8_t>() != 0;
  const auto series = r.pod<std::uint64_t>();
  for (std::uint64_t i = 0; i < series && r.ok(); ++i) {
    SampledSeries s;
    if (!r.str(s.source) || !r.str(s.kind) || !r.str(s.name) || !r.str(s.labels) || !r.vec(s.t) ||
        !r.vec(s.v))
      return std::nullopt;
    if (s.t.size() != s.v.size()) return std::nullopt;
    read.series.push_back(std::move(s));
  }
  read.sample_lines = r.pod<std::uint64_t>();
  read.sample_lines_skipped = r.pod<std::uint64_t>();
  read.sample_lines_without_series = r.pod<std::uint64_t>();
  if (!get_kernels(r, read.kernels)) return std::nullopt;
  if (!get_steps(r, read.steps) || !r.strings(read.notes) || !r.at_end()) return std::nullopt;
  return read;
}

std::optional<RunFilesRead> load_run_cache(const fs::path& dir, const RunFilesKey& key) {
  // Mapped, not read: the columns are copied once, from the page cache.
  const int fd = ::open((dir / kRunCacheFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return std::nullopt;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  // Populated at once: the pages are in the page cache (a run read before),
  // and one call maps them all faster than a fault per page.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  auto read = decode_run_cache(std::string_view(static_cast<const char*>(map), size), key);
  ::munmap(map, size);
  return read;
}

bool save_run_cache(const fs::path& dir, const RunFilesKey& key, const RunFilesRead& read) {
  // Files that changed while they were read (a run still being written) make
  // a cache that would not be valid: none is written.
  if (!(run_files_key(dir) == key)) return false;
  const std::string bytes = encode_run_cache(key, read);
  // A temporary name of its own (two readers of one run may write at once;
  // never through a planted link: core/run_dir.h), renamed into place
  // whole; on any failure removed.
  const fs::path path = dir / kRunCacheFile;
  TempFile temp;
  try {
    temp = create_temp_beside(path);
  } catch (const IoError&) {
    return false;
  }
  const int fd = temp.fd;
  const fs::path& tmp = temp.path;
  const char* data = bytes.data();
  std::size_t left = bytes.size();
  bool ok = true;
  while (left > 0 && ok) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) {
      data += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  ok = ::close(fd) == 0 && ok;
  std::error_code ec;
  if (ok) fs::rename(tmp, path, ec);
  if (!ok || ec) {
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

namespace {

class RunCacheWriter final : public observe::RunListener {
 public:
  void add_request(const RequestRecord& r) override {
    std::lock_guard lock(mutex_);
    builder_.add_request(r);
  }
  void add_observation(const observe::Observation& o) override {
    std::lock_guard lock(mutex_);
    builder_.add_observation(o);
  }
  void add_step(const StepRecord& s) override {
    std::lock_guard lock(mutex_);
    builder_.add_step(s);
  }
  void finish(const std::filesystem::path& dir) override {
    std::lock_guard lock(mutex_);
    // Best effort, as a reader's write of the cache is: a run that cannot
    // have one is read without it next time.
    try {
      save_run_cache(dir, run_files_key(dir), builder_.finish(dir));
    } catch (const std::exception&) {
    }
  }

 private:
  std::mutex mutex_;
  RunFilesBuilder builder_;
};

}  // namespace

std::unique_ptr<observe::RunListener> run_cache_writer() {
  return std::make_unique<RunCacheWriter>();
}

}  // namespace tokenscope::rundir
