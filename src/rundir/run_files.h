// What a run directory's JSONL files hold, in memory (docs/bench.md
// "Output", docs/metrics.md, docs/observe.md): requests.jsonl and
// samples.jsonl streamed line by line (readers.h) into the few numbers a
// report draws and a check reads: per request its times, outcome, tenant,
// class and an inter-token summary (about 60 bytes a request); per sampled
// series its points; sim's steps reduced per pixel column. Statistics are
// computed on these full arrays; only what is drawn is downsampled
// (downsample.h). The same content comes from a read of the files
// (read_run_files), from the records as a run writes them
// (RunFilesBuilder) or from the run cache (run_cache.h).
//
// A run directory is read as it is: a run cut by Ctrl-C or a crash (a
// truncated last line of requests.jsonl), or one without samples.jsonl,
// reads with a note saying what is missing; it never throws for that.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/histogram.h"
#include "core/logprob.h"
#include "core/record.h"
#include "core/step_record.h"
#include "rundir/kernels.h"

namespace tokenscope::observe {
struct Observation;
}

namespace tokenscope::rundir {

// Which of two halves a request falls in for a split-half baseline (check
// item 11): bit 0 of a hash of the request id with a fixed seed, so the
// split is random across requests and the same on every read (whatever the
// order or the byte ranges the file is read in).
unsigned split_half(std::uint64_t request_id);

// The output-token logprobs of a run's counted requests (bench --logprobs,
// core/logprob.h): pooled, and per half of split_half().
struct LogprobPool {
  std::uint64_t requests = 0;              // counted requests whose record has logprobs (n may be 0)
  std::uint64_t requests_with_tokens = 0;  // of those, with at least one logprob
  LogprobHistogram pooled;
  std::array<LogprobHistogram, 2> halves;
  std::array<std::uint64_t, 2> half_requests{};  // requests with at least one logprob, per half
  void add(std::uint64_t request_id, const LogprobHistogram& h);
  void merge(const LogprobPool& other);
};

// The prompt tokens a request found in the server's cache: what the server
// reported (usage.prompt_tokens_details.cached_tokens: vLLM, sim, the
// built-in server), else, from llama.cpp's timings, the prompt tokens it did
// not evaluate (prompt_tokens - server_prompt_evaluated: llama-server reuses
// its slot's cached prefix and evaluates the rest); -1 when neither tells.
std::int64_t cached_prompt_tokens(const RequestRecord& e);

// One array per field, one entry per request line read (warm-up requests
// included and flagged). Times are monotonic ns on the run's clock, -1 when
// the request did not get there.
inline constexpr std::size_t kItlChunks = 64;
inline constexpr unsigned kItlChunkShiftMin = 4;

struct RequestArrays {
  std::vector<Nanos> t_sched, t_dispatch, t_send, t_first_token, t_last_token, t_close;
  // The first answer token (RequestRecord::first_answer: t_first_token for a
  // response without reasoning), and the reasoning tokens (-1: none).
  std::vector<Nanos> t_first_answer;
  std::vector<std::int32_t> reasoning_tokens;
  std::vector<std::int32_t> output_tokens;  // -1: unknown
  std::vector<std::int32_t> prompt_tokens;  // -1: unknown
  // Prompt tokens the server found cached (cached_prompt_tokens); -1: not reported.
  std::vector<std::int32_t> cached_tokens;
  std::vector<float> itl_mean_ms;  // mean gap between output events per token; NaN: fewer than 2 events
  std::vector<float> itl_max_ms;   // the longest gap per token; NaN as above
  std::vector<Outcome> outcome;
  std::vector<std::uint8_t> warmup;               // 1: in the warm-up window (left out of statistics)
  std::vector<std::uint8_t> cancel_planned;       // 1: cancelled on purpose (bench --cancel): no failure
  std::vector<std::uint16_t> tenant, task_class;  // indexes into the names below
  std::vector<std::string> tenant_names, class_names;
  // The request's mean output-token logprob (nats); NaN: none (no
  // --logprobs, or the server sent none).
  std::vector<float> logprob_mean;
  // The server's own prefill time of the request (llama.cpp's timings
  // prompt_ms: queueing excluded), ms; NaN: not sent.
  std::vector<float> server_prompt_ms;
  // Every token gap of the completed, non-warm-up requests (ns per token,
  // as the summary's itl_ms counts them).
  LogLinearHistogram itl_ns;
  // The same gaps by request id, in chunks of 2^itl_chunk_shift consecutive
  // ids (key: id >> itl_chunk_shift), at most kItlChunks chunks: the shift
  // is the smallest from kItlChunkShiftMin that keeps them so few, whatever
  // the order the requests were read in. Ids follow the schedule, so a
  // chunk is a stretch of the run: the time blocks of the headline's ITL
  // interval (analyze/checklist_headline.cpp). itl_ns is their merge.
  std::map<std::uint64_t, LogLinearHistogram> itl_chunks;
  unsigned itl_chunk_shift = kItlChunkShiftMin;
  // The logprobs of the completed, non-warm-up requests.
  LogprobPool logprobs;

  std::size_t size() const { return t_send.size(); }
  // Derived per-request latencies in ms; NaN when the request has no such value
  // (failed, warm-up, no first token). TPOT needs two output tokens.
  double ttft_ms(std::size_t i) const;
  double ttft_sched_ms(std::size_t i) const;  // from t_sched (open loop: client lag counts)
  double tpot_ms(std::size_t i) const;
  double e2e_ms(std::size_t i) const;
  // Time to the first answer token, and TPOT over the answer's tokens
  // (core/metrics.h ttfo_ms, tpot_answer_ms); NaN as above, and when the
  // request has no answer token.
  double ttfo_ms(std::size_t i) const;
  double tpot_answer_ms(std::size_t i) const;
  bool has_reasoning(std::size_t i) const { return i < reasoning_tokens.size() && reasoning_tokens[i] >= 0; }
  bool any_reasoning() const;  // a counted request has reasoning
  // How late the client sent a request it could send: t_send - t_sched, or
  // t_send - t_dispatch under a concurrency cap (the wait for a free slot
  // is the cap's, not the client's lag), for every sent request.
  double send_lag_ms(std::size_t i) const;
  // The wait for a free slot under a concurrency cap (t_dispatch - t_sched);
  // NaN without a cap.
  double slot_wait_ms(std::size_t i) const;
  bool counted(std::size_t i) const { return !warmup[i] && outcome[i] == Outcome::kOk; }
};

// Raises the chunk shift of a's itl_chunks to at least `shift`, then until
// at most kItlChunks chunks are left (neighbours merged).
void coarsen_itl_chunks(RequestArrays& a, unsigned shift = 0);
// itl_ns as the merge of a's itl_chunks.
void merge_itl_chunks(RequestArrays& a);

// One sampled series of samples.jsonl: a canonical or derived series of one
// source with one label set. Points in file order (time order per source).
struct SampledSeries {
  std::string source;  // "server", "gpu", "host", "sim", ...
  std::string kind;    // "canonical" or "derived"
  std::string name;
  std::string labels;  // "k=v,k=v" in the file's order, "" when none
  std::vector<Nanos> t;
  std::vector<double> v;
};

// One of the slowest requests (by E2E), kept whole for the waterfall: its
// times and every output event. Times as in RequestArrays.
struct SlowRequest {
  std::uint64_t id = 0;
  std::string tenant, task_class;
  Nanos t_sched = -1, t_dispatch = -1, t_send = -1, t_first_scheduled = -1, t_first_token = -1,
        t_last_token = -1, t_close = -1;
  std::int64_t prompt_tokens = -1, cached_tokens = -1, output_tokens = -1;
  std::uint32_t preemptions = 0;
  double server_prompt_ms = -1;  // the server's own prefill time (llama.cpp's timings), -1: not sent
  std::vector<Nanos> event_times;
  Nanos e2e() const { return t_last_token - t_send; }
};

// How many of the slowest requests the waterfall shows.
inline constexpr std::size_t kSlowestKept = 20;

// Keeps the n slowest counted requests by E2E (ties: the lower id first), in
// descending order of E2E.
class SlowestRequests {
 public:
  explicit SlowestRequests(std::size_t n = kSlowestKept) : n_(n) {}
  // Whether a request with this E2E and id would be kept (checked before
  // copying its events).
  bool wants(Nanos e2e, std::uint64_t id) const;
  void add(SlowRequest r);
  void merge(SlowestRequests&& other);
  // Sorted slowest first.
  std::vector<SlowRequest> take();

 private:
  std::size_t n_;
  std::vector<SlowRequest> heap_;  // a min-heap on (e2e, -id): the fastest kept is on top
};

// sim's steps.jsonl reduced for display as it is read: per engine step
// quantity, a line of at most 4 points per pixel column (ColumnReducer), on
// the run's time axis. Never held whole (a long run has millions of steps).
struct StepSeries {
  std::string name;  // "seqs", "running", "waiting", "kv_usage", "batch_tokens", ...
  std::vector<double> t_s;
  std::vector<double> v;
};
// The shape of an engine step as a compiler of per-shape kernels or CUDA
// graphs sees it: the number of sequences in the batch and the batch's
// scheduled tokens (prefill + decode), each rounded up to a power of two
// (the padded sizes graph captures are keyed by; docs/engine.md).
struct StepShape {
  std::uint32_t seqs = 0;
  std::uint32_t tokens_bucket = 0;
  auto operator<=>(const StepShape&) const = default;
};
// The first two steps of one shape (by time): the step that met the shape
// first, and the next one of the same shape, to compare with it.
struct ShapeSightings {
  Nanos first_t = -1, second_t = -1;
  double first_ms = 0, second_ms = 0;
  void add(Nanos t, double ms);
  void merge(const ShapeSightings& other);
};

// The steps of one second of the run (by step start), summed: the rows of
// the attribution (analyze/attribution.h). Every sum is of whole numbers
// (durations in ns), so it is exact whatever the order the steps are added
// in (a file read in byte ranges, or in one).
struct StepWindow {
  double steps = 0, busy_ns = 0, seqs = 0, waiting = 0;
  double prefill_tokens = 0, decode_tokens = 0, query_tokens = 0, hit_tokens = 0;
  double preemptions = 0, tenant_switches = 0, swap_bytes = 0;
  void add(const StepWindow& o);
};

// What the checklist reads of every step (kept whole: a few numbers per
// distinct value or per second, never per step).
struct StepStats {
  // Steps per batch size (sequences in the step), and per batch size the
  // sum of step durations in ms.
  std::map<std::uint32_t, std::uint64_t> seqs_histogram;
  std::map<StepShape, ShapeSightings> shapes;
  double busy_ns = 0;  // the sum of every step's duration (whole ns: exact)
  std::uint64_t steps_with_duration = 0;
  // Per second of the run's clock (floor(t_ns / 1e9)).
  std::map<std::int64_t, StepWindow> windows;
};

struct StepsData {
  bool present = false;
  std::uint64_t steps = 0;
  std::uint64_t lines_skipped = 0;
  double first_t_s = 0, last_t_s = 0;
  std::vector<StepSeries> series;
  StepStats stats;
};

// What load_run derives from a run's JSONL files (requests.jsonl,
// samples.jsonl, steps.jsonl), before it is put on the run's time axis:
// the heavy part of a RunData, the part run_cache.h keeps.
struct RunFilesRead {
  RequestArrays requests;
  std::vector<SlowRequest> slowest;  // the slowest requests, for the waterfall (slowest first)
  std::uint64_t request_lines_skipped = 0;
  // The summary recomputed from requests.jsonl when run.json has none; null
  // otherwise.
  nlohmann::json recomputed_summary;
  bool has_samples = false;
  std::vector<SampledSeries> series;
  std::uint64_t sample_lines = 0, sample_lines_skipped = 0, sample_lines_without_series = 0;
  // CUPTI kernel launches among the samples (`probe gpu-context` lines in
  // samples.jsonl; rundir/kernels.h), for check item 9; empty when none.
  KernelInventory kernels;
  // sim's per-step series (steps.jsonl), reduced: on the steps' own clock
  // (origin 0) here, on the run's in a RunData.
  StepsData steps;
  // Things the reader of the report should know: what is missing or cut, in
  // plain words (in a RunData, run.json's first, then the files').
  std::vector<std::string> notes;
};

// Whether load_run uses the run's cache file (run_cache.h).
enum class RunCache {
  kOff,        // read the JSONL files; leave any cache file alone
  kReadWrite,  // use a valid cache; after a read of the JSONL files, write one
};

struct LoadOptions {
  // requests.jsonl and steps.jsonl are each read in this many byte ranges at
  // the same time; 0: one per hardware thread (at most 8), one for a file
  // under 8 MiB. The result is the same for any number.
  unsigned request_ranges = 0;
  // requests.jsonl, samples.jsonl and steps.jsonl are read at the same time;
  // false: one after the other. The result is the same.
  bool concurrent = true;
  // Off by default: `check` and `report` turn it on (their --no-cache turns
  // it off).
  RunCache cache = RunCache::kOff;
};

// For a process that analyses large runs (check, report): large blocks are
// taken from the heap and kept there when freed, instead of mapped and
// unmapped each time (glibc's default above 32 MB): a million-request run's
// arrays and matrices are allocated and freed many times over, and each
// fresh mapping costs page faults and zeroing by the kernel. The memory
// stays with the process until it exits.
void keep_freed_memory();

// What read_run_files derives from requests.jsonl and samples.jsonl, built
// from the records themselves as a run writes them, in memory: the run
// cache of a run that has just ended, without reading its files back
// (docs/architecture.md "A run's data path"). Fed every request record and
// every observation in the order they are written to their files, it gives
// the same RunFilesRead as a read of those files (the same bytes of cache:
// run_cache_test). For runs whose run.json has a summary (a run that
// reached its end): it recomputes none.
class RunFilesBuilder {
 public:
  RunFilesBuilder();
  ~RunFilesBuilder();
  RunFilesBuilder(const RunFilesBuilder&) = delete;
  RunFilesBuilder& operator=(const RunFilesBuilder&) = delete;

  // A line of requests.jsonl, as RequestRecord::append_json writes it.
  void add_request(const RequestRecord& r);
  // A line of samples.jsonl, as observe::append_observation_json writes it.
  void add_observation(const observe::Observation& o);
  // A line of steps.jsonl (sim), as StepRecord::append_json writes it. Kept
  // in a temporary file until finish() (a long run has millions).
  void add_step(const StepRecord& r);
  // The result, once the run directory's files are whole and closed. The
  // steps are reduced from their spool when dir holds a steps.jsonl (when
  // the spool could not be written, steps.jsonl is read). Call once.
  RunFilesRead finish(const std::filesystem::path& dir, const LoadOptions& options = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What read_run_files derives from the JSONL files of dir (requests.jsonl,
// samples.jsonl, steps.jsonl), the steps on their own clock (origin 0).
// has_run_json: whether dir holds a run.json (its absence is noted).
// need_summary: run.json has no summary, so it is recomputed from
// requests.jsonl (recomputed_summary).
RunFilesRead read_run_files(const std::filesystem::path& dir, bool has_run_json, bool need_summary,
                            const LoadOptions& options);

// A JSON object file that tokenscope wrote (run.json, a probe's result):
// UsageError when it cannot be read, InputError when it is too large for
// one or not a JSON object.
nlohmann::json read_json_file(const std::filesystem::path& file);

// phases.json of a run directory (written by `check`): its phases as
// [{"phase", "start_ns", "end_ns"}]; a file that is not that is said in a
// note and gives none.
nlohmann::json load_phases(const std::filesystem::path& file, std::vector<std::string>& notes);

// The bounds of the files a run directory holds that are read whole
// (docs/reliability.md "Files read"); run.json's is readers.h
// kMaxRunJsonBytes. A file over its bound, or one that is not a regular
// file, is an InputError naming it.
inline constexpr std::uint64_t kMaxPhasesJsonBytes = 16u << 20;
inline constexpr std::uint64_t kMaxCheckJsonBytes = 64u << 20;

}  // namespace tokenscope::rundir
