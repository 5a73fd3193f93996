#include "bench/runner.h"

#include "bench/media.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <fmt/format.h>
#include <pthread.h>
#include <sys/resource.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>

#include "bench/prompt_text.h"
#include "core/cpu_set.h"
#include "core/error.h"
#include "core/random.h"

namespace tokenscope::bench {

namespace asio = boost::asio;

namespace {
asio::steady_timer::time_point at(Nanos t) {
  return asio::steady_timer::time_point(std::chrono::nanoseconds(t));
}
constexpr std::size_t kPrepareAhead = 64;
// Open loop: idle connections are kept for the requests due this far ahead.
constexpr Nanos kIdleHorizon = kNanosPerSecond;
}  // namespace

void RecordQueue::set_limit(std::size_t limit) {
  std::lock_guard lock(mutex_);
  limit_ = limit;
  wake_at_ = (limit + 1) / 2;
}

void RecordQueue::push(RequestRecord&& r) {
  std::unique_lock lock(mutex_);
  if (limit_ > 0 && !closed_ && pending_.size() >= limit_) {
    ++waits_;
    full_.notify_one();
    drained_.wait(lock, [this] { return closed_ || pending_.size() < limit_; });
  }
  pending_.push_back(std::move(r));
  // The push that half fills the queue wakes the drainer: a client thread
  // never waits for it unless it takes longer than the other half's pushes
  // to come and drain (waking it only at the limit made the next push wait
  // for its wake-up whenever it came later than that push).
  if (limit_ > 0 && pending_.size() == wake_at_) full_.notify_one();
}

void RecordQueue::drain(std::vector<RequestRecord>& out) {
  {
    std::lock_guard lock(mutex_);
    if (out.empty()) {
      // The usual caller (the writer, with its emptied batch): the two
      // vectors trade places, each keeping its capacity, so that the lock a
      // client thread waits for is held for a swap, not for a batch's moves.
      out.swap(pending_);
    } else {
      for (auto& r : pending_) out.push_back(std::move(r));
      pending_.clear();
    }
  }
  drained_.notify_all();
}

bool RecordQueue::wait_half_full(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mutex_);
  const auto due = [this] { return closed_ || (limit_ > 0 && pending_.size() >= wake_at_); };
  ++pausing_;
  bool woken = true;
  while (woken && !due()) woken = full_.wait_until(lock, deadline) == std::cv_status::no_timeout;
  --pausing_;
  return woken;
}

void RecordQueue::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  drained_.notify_all();
  full_.notify_all();
}

std::uint64_t RecordQueue::waits() const {
  std::lock_guard lock(mutex_);
  return waits_;
}

unsigned RecordQueue::pausing() const {
  std::lock_guard lock(mutex_);
  return pausing_;
}

bool CancelPlan::chosen(std::uint64_t id) const {
  if (share <= 0) return false;
  const std::uint64_t h = mix64(hash_combine64(seed ^ 0x63616e63656c2121ULL, id));  // "cancel!!"
  return static_cast<double>(h >> 11) * 0x1.0p-53 < share;
}

Nanos CancelPlan::delay_ns(std::uint64_t id) const {
  if (!ms) return 0;
  Rng rng(hash_combine64(seed ^ 0x63616e63656c6d73ULL, id));  // "cancelms"
  return static_cast<Nanos>(ms->sample(rng)) * kNanosPerMilli;
}

std::optional<std::size_t> open_loop_idle_target(std::size_t jobs, std::size_t next, std::size_t horizon,
                                                 std::size_t followups, bool queued) {
  if (horizon < jobs) return horizon - next + followups;
  // The schedule ends within the horizon: the pool stays as it is while
  // anything remains to be sent. Closing it as the end neared put one close
  // after another on the sending core (hundreds in the run's last
  // milliseconds at a high rate).
  if (next < jobs || followups > 0 || queued) return std::nullopt;
  // Everything sent: no send waits for these closes, and a server with a
  // worker per connection gets its workers back for what still runs (its
  // metrics scrapes among them).
  return 0;
}

CancelPlan parse_cancel_plan(std::string_view spec, std::uint64_t seed) {
  CancelPlan p;
  p.spec = std::string(spec);
  p.seed = seed;
  const auto bad = [&](const std::string& why) {
    return UsageError(
        fmt::format("--cancel {}: {} (SHARE:before-first-token, SHARE:after-tokens=N or "
                    "SHARE:after-ms=SPEC, e.g. 0.1:after-tokens=20 or 0.05:after-ms=uniform:100:2000)",
                    quote_input(spec), why));
  };
  const std::size_t colon = spec.find(':');
  if (colon == std::string_view::npos) throw bad("expected SHARE:WHEN");
  const std::string share(spec.substr(0, colon));
  try {
    std::size_t used = 0;
    p.share = std::stod(share, &used);
    if (used != share.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw bad(fmt::format("the share {} is not a number", quote_input(share)));
  }
  if (!(p.share >= 0 && p.share <= 1)) throw bad(fmt::format("the share {} is outside [0, 1]", share));
  const std::string_view when = spec.substr(colon + 1);
  if (when == "before-first-token") {
    p.when = CancelPlan::When::kBeforeFirstToken;
  } else if (when.starts_with("after-tokens=")) {
    p.when = CancelPlan::When::kAfterTokens;
    const std::string n(when.substr(13));
    try {
      std::size_t used = 0;
      const long long v = std::stoll(n, &used);
      if (used != n.size() || v < 1 || v > 1'000'000) throw std::invalid_argument("range");
      p.tokens = static_cast<std::uint32_t>(v);
    } catch (const std::exception&) {
      throw bad(
          fmt::format("after-tokens={}: expected a whole number of output tokens from 1 to 1000000", n));
    }
  } else if (when.starts_with("after-ms=")) {
    p.when = CancelPlan::When::kAfterMs;
    p.ms = workload::parse_length_spec(when.substr(9), "--cancel after-ms", workload::LengthRole::kOutput);
  } else {
    throw bad(fmt::format("{} is not a point to cancel at", quote_input(when)));
  }
  return p;
}

BodiesAhead::BodiesAhead(std::size_t jobs, std::function<Body(std::size_t)> build, std::size_t max_items,
                         std::size_t max_bytes)
    : jobs_(jobs),
      build_(std::move(build)),
      max_items_(std::max<std::size_t>(1, max_items)),
      max_bytes_(max_bytes) {}

BodiesAhead::~BodiesAhead() {
  finish();
}

void BodiesAhead::finish() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void BodiesAhead::start() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ts-bodies");
    run();
    {
      std::lock_guard lock(mutex_);
      published_ = true;  // nothing more to wait for
    }
    first_.notify_all();
  });
}

void BodiesAhead::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  room_.notify_one();
  first_.notify_all();
}

bool BodiesAhead::wait_ready(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mutex_);
  return first_.wait_for(lock, timeout, [&] { return published_ || stop_; }) && !ready_.empty();
}

// Batches of up to 16 bodies (256 KB) are written without the lock and
// handed over under it. The thread starts no earlier than the job after
// the one the taker is at (that one it writes itself when it is missing).
void BodiesAhead::run() {
  constexpr std::size_t kBatch = 16, kBatchBytes = 256 * 1024;
  std::vector<Item> batch;
  std::size_t k = 0;
  for (;;) {
    k = std::max(k, asked_.load());
    if (k >= jobs_) return;
    std::size_t bytes = 0;
    while (k < jobs_ && batch.size() < kBatch && bytes < kBatchBytes) {
      Body b = build_(k);
      bytes += b ? b->size() : 0;
      batch.emplace_back(k++, std::move(b));
    }
    bool first = false;
    {
      std::unique_lock lock(mutex_);
      while (!stop_ && (ready_.size() >= max_items_ || ready_bytes_ >= max_bytes_)) {
        waiting_ = true;
        room_.wait(lock);
      }
      if (stop_) return;
      for (auto& item : batch) {
        ready_bytes_ += item.second ? item.second->size() : 0;
        ready_.push_back(std::move(item));
      }
      ready_count_.store(ready_.size());
      first = !std::exchange(published_, true);
    }
    if (first) first_.notify_all();
    batch.clear();
  }
}

// Everything written so far moves to the taker's side in one hold of the
// lock; the thread, if it waited for room, goes on.
void BodiesAhead::refill() {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    for (auto& item : ready_) {
      local_bytes_ += item.second ? item.second->size() : 0;
      local_.push_back(std::move(item));
    }
    ready_.clear();
    ready_bytes_ = 0;
    ready_count_.store(0);
    wake = std::exchange(waiting_, false);
  }
  if (wake) room_.notify_one();
}

void BodiesAhead::pop_local() {
  local_bytes_ -= local_.front().second ? local_.front().second->size() : 0;
  local_.pop_front();
}

BodiesAhead::Body BodiesAhead::take(std::size_t k) {
  // Sequentially consistent with the thread's load of it and its store of
  // ready_count_: either this take sees the bodies the thread published,
  // or the thread sees that it must start after k.
  asked_.store(k + 1);
  // Moved over once the taker's side is down to a quarter (of the items
  // and of the bytes), so that the thread writes on while these are sent:
  // at most max_items/max_bytes (and a batch) on each side.
  if (local_.size() <= max_items_ / 4 && local_bytes_ <= max_bytes_ / 4 && ready_count_.load() > 0) refill();
  for (int pass = 0; pass < 2; ++pass) {
    while (!local_.empty() && local_.front().first < k) pop_local();
    if (!local_.empty()) {
      if (local_.front().first != k) break;  // the thread was late for k and went past it
      Body b = std::move(local_.front().second);
      pop_local();
      if (!b) break;  // left to the taker (images, audio)
      ++taken_;
      return b;
    }
    if (pass > 0 || ready_count_.load() == 0) break;
    refill();
  }
  ++missed_;
  return nullptr;
}

struct Runner::Shard {
  struct User {
    explicit User(asio::io_context& ioc) : timer(ioc) {}
    asio::steady_timer timer;
    bool active = false;  // sending or thinking
    bool retire = false;  // stop after the current request
  };
  // What a request in flight needs once it ends.
  struct Context {
    std::uint32_t request = 0;
    std::uint64_t id_offset = 0;  // closed loop: the workload's size times its wraps (fresh ids)
    int user = -1;
    bool closed_loop_user() const { return user >= 0; }
    std::vector<ChatMessage> history;                  // chat: the conversation before this turn
    std::string prompt;                                // this turn's prompt (kept for multi-turn)
    std::shared_ptr<asio::steady_timer> cancel_timer;  // --cancel after-ms
  };

  Shard(Runner& runner, unsigned i, const net::ClientOptions& options)
      : r(runner),
        index(i),
        ioc(1),
        client(ioc, r.endpoint_, options, clock),
        parser(r.encoder_.settings().sampling.logprobs.has_value()),
        timer(ioc),
        think_rng(r.plan_.think_seed * 0x9e3779b97f4a7c15ULL + i + 1) {}

  Runner& r;
  unsigned index;
  SteadyClock clock;
  asio::io_context ioc;
  net::HttpClient client;
  ChunkParser parser;
  asio::steady_timer timer;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;  // until begin()
  std::thread thread;
  std::string cpus;  // where the thread ran (set on it before it runs anything; read after join)
  bool stopping = false;
  std::atomic<std::uint64_t> not_sent{0};
  std::uint32_t in_flight = 0;
  // Open loop.
  std::vector<std::pair<std::uint32_t, Nanos>> jobs;
  std::size_t next = 0;
  bool in_tick = false;
  std::deque<std::shared_ptr<const std::string>> prepared;  // encoded jobs[next ...]
  std::unique_ptr<BodiesAhead> ahead;  // LoadPlan::bodies_apart: bodies written on another thread
  // LoadPlan::bodies_apart: bodies sent as written apart, and written on
  // this thread (none was ready; images or audio; a request that waited
  // for a concurrency slot; a later turn).
  std::uint64_t bodies_taken = 0, bodies_written_here = 0;
  std::size_t horizon = 0;  // jobs[next, horizon) are due within kIdleHorizon
  // Follow-up turns waiting for their think time.
  std::vector<std::shared_ptr<asio::steady_timer>> followups;
  // Closed loop.
  std::vector<std::unique_ptr<User>> users;
  std::size_t active_users = 0;  // users active and not retiring, when !users_changed
  bool users_changed = true;
  std::size_t stage = 0;
  bool exhausted = false;  // closed loop: max_requests reached
  Rng think_rng;
  // Collectors, reused.
  std::vector<ResponseCollector*> free_collectors;
  std::unordered_map<ResponseCollector*, Context> contexts;
  // Nodes of `contexts` taken out by requests that ended, put back by the
  // next ones: no allocation per request.
  std::vector<decltype(contexts)::node_type> free_context_nodes;

  Nanos now() const { return clock.now_ns(); }
  bool warmup(Nanos t_sched) const {
    return r.plan_.warmup_s > 0 && t_sched - r.epoch_ < seconds_to_nanos(r.plan_.warmup_s);
  }

  std::shared_ptr<const std::string> encode(std::size_t index, const std::string& prompt,
                                            const std::vector<ChatMessage>* history, std::uint64_t id) {
    const RequestSettings& s = r.encoder_.settings();
    const workload::Request& req = r.w_.requests[index];
    const std::string_view model = model_of(req);
    if (is_pooling(s.api))
      return r.encoder_.encode_pooling(r.prompts_->inputs(index, s.inputs_per_request),
                                       s.api == Api::kRerank ? r.prompts_->query(index, s.query_tokens) : "",
                                       id, model);
    if (s.api == Api::kTranscriptions)  // the audio, uploaded (bench/media.h; its key as a chat part's)
      return r.encoder_.encode_transcription(
          media.wav(req.audio_ms,
                    hash_combine64(hash_combine64(r.w_.token_seed ^ 0x6d65646961ULL, req.id), 0xa0d10ULL)),
          id, model);
    if (req.images > 0 || req.audio_ms > 0) {
      // Images and audio after the text: generated, different per request (bench/media.h).
      const bool responses = s.api == Api::kResponses;
      std::vector<std::string> parts;
      const std::uint64_t key = hash_combine64(r.w_.token_seed ^ 0x6d65646961ULL, req.id);
      for (std::uint32_t k = 0; k < req.images; ++k) {
        const std::string url = media.png_data_url(req.image_width, req.image_height, hash_combine64(key, k));
        std::string part = responses ? "{\"type\":\"input_image\",\"image_url\":\""
                                     : "{\"type\":\"image_url\",\"image_url\":{\"url\":\"";
        part += url;  // base64 and the data URL's prefix: nothing to escape
        part += responses ? "\"}" : "\"}}";
        parts.push_back(std::move(part));
      }
      if (req.audio_ms > 0)
        parts.push_back("{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"" +
                        media.wav_base64(req.audio_ms, hash_combine64(key, 0xa0d10ULL)) +
                        "\",\"format\":\"wav\"}}");
      return r.encoder_.encode(prompt, std::max<std::uint32_t>(1, req.output_tokens), history, id, &parts,
                               model);
    }
    return r.encoder_.encode(prompt, std::max<std::uint32_t>(1, req.output_tokens), history, id, nullptr,
                             model);
  }
  // The model a request goes to: its own in a model mix, else the settings' (empty).
  std::string_view model_of(const workload::Request& req) const {
    return req.model > 0 && req.model <= r.w_.models.size() ? std::string_view(r.w_.models[req.model - 1])
                                                            : std::string_view();
  }
  MediaMaker media;  // this thread's images and audio
  bool pooling() const { return is_pooling(r.encoder_.settings().api); }
  bool transcription() const { return r.encoder_.settings().api == Api::kTranscriptions; }

  // How many connections this thread opens before the first send.
  std::size_t warm_connections() const {
    if (r.plan_.preconnect > 0) return (r.plan_.preconnect + r.shards_.size() - 1 - index) / r.shards_.size();
    if (r.plan_.closed_loop) {
      double users = 0;
      for (const auto& s : r.plan_.user_stages) users = std::max(users, s.value);
      return static_cast<std::size_t>(std::ceil(users / static_cast<double>(r.shards_.size())));
    }
    std::size_t busiest = 0;
    for (std::size_t a = 0, b = 0; b < jobs.size(); ++b) {
      while (jobs[b].second - jobs[a].second >= 10 * kNanosPerMilli) ++a;
      busiest = std::max(busiest, b - a + 1);
    }
    if (r.gate_.cap > 0)
      busiest = std::min<std::size_t>(busiest, (r.gate_.cap + r.shards_.size() - 1) / r.shards_.size());
    return std::min<std::size_t>(busiest, 1024);
  }

  // Starts the thread and opens the warm connections; warm() runs on this
  // thread once they are open (or failed). Nothing is sent before begin().
  void launch(std::function<void()> warm) {
    // Started from this thread (Runner::start's), so on its CPUs, not the
    // client thread's.
    if (r.plan_.bodies_apart && !r.plan_.closed_loop && !jobs.empty()) {
      ahead = std::make_unique<BodiesAhead>(jobs.size(), [this](std::size_t k) { return body_ahead(k); });
      ahead->start();
    }
    guard.emplace(ioc.get_executor());
    asio::post(ioc, [this, warm = std::move(warm)]() mutable {
      client.preconnect(warm_connections(), std::move(warm));
    });
    thread = std::thread([this] {
      // Named for top, perf and gdb: ts-client-N.
      pthread_setname_np(pthread_self(), fmt::format("ts-client-{}", index % 1000).c_str());
      if (!r.plan_.cpus.empty()) set_thread_cpus({r.plan_.cpus[index % r.plan_.cpus.size()]});
      cpus = format_cpu_list(tokenscope::thread_cpus());
      ioc.run();
      std::lock_guard lock(r.done_mutex_);
      --r.running_;
      r.done_cv_.notify_all();
    });
  }

  // Called on this thread once the epoch is set.
  void begin() {
    guard.reset();
    if (r.plan_.closed_loop) {
      // Users start at the epoch, when the preconnected pool is ready.
      timer.expires_at(at(r.epoch_));
      timer.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) enter_stage(0);
      });
    } else {
      prepare_ahead();
      update_idle_target();
      arm();
    }
  }

  // ---- open loop ----
  void arm() {
    if (stopping || next >= jobs.size()) return;
    timer.expires_at(at(r.epoch_ + jobs[next].second));
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) fire();
    });
  }

  void fire() {
    dispatch_due(now());
    prepare_ahead();
    update_idle_target();
    arm();
  }

  // Idle connections kept: as many as requests are due soon (open loop),
  // or one per user (closed loop); the others are closed, so that a
  // thread-per-connection server does not keep a worker on each.
  void update_idle_target() {
    if (r.plan_.closed_loop) {
      if (users_changed) {  // counted again only after a change, not per request
        users_changed = false;
        active_users = 0;
        for (const auto& u : users) active_users += u->active && !u->retire;
      }
      client.set_idle_target(active_users + followups.size());
      return;
    }
    // Before the epoch (an agreed start ahead): the pool kept for the first sends.
    const Nanos until = std::max(now(), r.epoch_) - r.epoch_ + kIdleHorizon;
    horizon = std::max(horizon, next);
    while (horizon < jobs.size() && jobs[horizon].second <= until) ++horizon;
    const auto target = open_loop_idle_target(jobs.size(), next, horizon, followups.size(),
                                              r.counters_.queued.load(std::memory_order_relaxed) > 0);
    if (target) client.set_idle_target(*target);
  }

  void dispatch_due(Nanos t) {
    while (!stopping && next < jobs.size() && r.epoch_ + jobs[next].second <= t) {
      const auto [request, offset] = jobs[next++];
      std::shared_ptr<const std::string> bytes;
      if (ahead) {
        bytes = ahead->take(next - 1);
      } else if (!prepared.empty()) {
        bytes = std::move(prepared.front());
        prepared.pop_front();
      }
      dispatch(request, r.epoch_ + offset, std::move(bytes));
    }
  }

  // After each read: sends that fell due while reads were being handled go
  // out now, not when the timer's turn comes (epoll hands over up to 128
  // ready sockets at once; their handlers run before the timer's).
  void tick() {
    if (in_tick || stopping || next >= jobs.size()) return;
    const Nanos t = now();
    if (r.epoch_ + jobs[next].second > t) return;
    in_tick = true;
    dispatch_due(t);
    in_tick = false;
  }

  // Job k's body as sent with no history: what prepare_ahead() holds
  // ahead, and what BodiesAhead's thread writes (there it reads nothing of
  // this shard that the client thread changes: the jobs, the workload, the
  // encoder and the prompts, all read-only by now).
  std::shared_ptr<const std::string> job_body(std::size_t k) {
    const std::uint32_t index = jobs[k].first;
    const auto& req = r.w_.requests[index];
    return encode(index, pooling() ? std::string() : r.prompts_->text(req), nullptr, req.id);
  }
  // A body with images or audio (megabytes, and this thread's MediaMaker)
  // is built when it is sent, not ahead.
  bool written_when_sent(std::size_t k) const {
    const auto& req = r.w_.requests[jobs[k].first];
    return req.images > 0 || req.audio_ms > 0;
  }
  std::shared_ptr<const std::string> body_ahead(std::size_t k) {
    return written_when_sent(k) || transcription() ? nullptr : job_body(k);
  }

  void prepare_ahead() {
    if (ahead) return;  // written on its own thread
    while (prepared.size() < kPrepareAhead && next + prepared.size() < jobs.size()) {
      if (written_when_sent(next + prepared.size())) break;
      prepared.push_back(job_body(next + prepared.size()));
    }
  }

  void dispatch(std::uint32_t request, Nanos t_sched, std::shared_ptr<const std::string> bytes) {
    if (r.gate_.cap > 0) {
      std::lock_guard lock(r.gate_.mutex);
      if (r.gate_.in_flight >= r.gate_.cap) {
        r.gate_.waiting.emplace_back(request, t_sched);
        ++r.counters_.queued;
        return;
      }
      ++r.gate_.in_flight;
    }
    Context ctx;
    ctx.request = request;
    send(std::move(ctx), t_sched, -1, std::move(bytes), r.w_.requests[request].id);
  }

  // ---- sending and completion ----
  void send(Context ctx, Nanos t_sched, Nanos t_dispatch, std::shared_ptr<const std::string> bytes,
            std::uint64_t id) {
    const workload::Request& req = r.w_.requests[ctx.request];
    const TurnLink* link = r.plan_.turns.empty() ? nullptr : &r.plan_.turns[ctx.request];
    const bool keep_text = link && link->next >= 0;
    if (!bytes) {
      if (ctx.prompt.empty() && !pooling() && !transcription()) ctx.prompt = r.prompts_->text(req);
      bytes = encode(ctx.request, ctx.prompt, ctx.history.empty() ? nullptr : &ctx.history, id);
      bodies_written_here += r.plan_.bodies_apart;
    } else {
      bodies_taken += r.plan_.bodies_apart;
    }
    if (keep_text && ctx.prompt.empty()) ctx.prompt = r.prompts_->text(req);
    ResponseCollector* c;
    if (free_collectors.empty()) {
      owned.push_back(std::make_unique<ResponseCollector>());
      c = owned.back().get();
      c->set_tick([](void* shard) { static_cast<Shard*>(shard)->tick(); }, this);
      c->set_output_counter(r.prompts_->tokenizer());
      c->set_max_events(r.plan_.max_events);
      c->set_canceller([](void* shard, ResponseCollector* x) { static_cast<Shard*>(shard)->cancel_later(x); },
                       this);
    } else {
      c = free_collectors.back();
      free_collectors.pop_back();
    }
    RequestRecord rec;
    rec.id = id;
    rec.tenant = req.tenant < r.w_.tenants.size() ? r.w_.tenants[req.tenant] : "default";
    rec.task_class = req.task_class < r.w_.classes.size() ? r.w_.classes[req.task_class] : "";
    if (!r.w_.models.empty()) {  // a model mix: every record names where it went
      const auto m = model_of(req);
      rec.model = m.empty() ? r.encoder_.settings().model : std::string(m);
    }
    rec.t_sched = t_sched;
    rec.t_dispatch = t_dispatch;
    rec.output_tokens_planned = std::max<std::uint32_t>(1, req.output_tokens);
    if (ctx.history.empty() && (!link || link->turn == 0)) {
      rec.prompt_tokens_planned = r.prompts_->planned_tokens(req);
      const std::int64_t media_tokens =
          r.prompts_->media_tokens(req);  // images and audio, as the model counts them
      rec.prompt_tokens_planned = media_tokens < 0 ? -1 : rec.prompt_tokens_planned + media_tokens;
    }
    const RequestSettings& rs = r.encoder_.settings();
    if (pooling()) {
      rec.output_tokens_planned = 0;
      rec.inputs = rs.inputs_per_request;
      // Rerank: the pairs' own tokens (BOS, separators) depend on the model's format: not planned.
      rec.prompt_tokens_planned = rs.api == Api::kEmbeddings
                                      ? r.prompts_->inputs_planned_tokens(ctx.request, rs.inputs_per_request)
                                      : -1;
    }
    if (req.audio_ms > 0) rec.audio_ms = req.audio_ms;
    if (transcription()) {  // the prompt is the audio, the output its transcript: neither planned
      rec.prompt_tokens_planned = -1;
      rec.output_tokens_planned = -1;
    }
    rec.warmup = warmup(t_sched);
    if (link && link->session >= 0) {
      rec.session = link->session;
      rec.turn = link->turn;
    }
    c->init(std::move(rec), r.encoder_.settings().stream, keep_text, &parser,
            [this](ResponseCollector& done) { on_done(done); });
    if (transcription()) c->expect_transcription(req.audio_ms / 1e3, rs.response_format);
    if (pooling())  // rerank with a top_n in the extra body: that many results
      c->expect_pooling(rs.api, rs.inputs_per_request,
                        rs.api == Api::kRerank && r.encoder_.top_n()
                            ? std::min(rs.inputs_per_request, *r.encoder_.top_n())
                            : rs.inputs_per_request);
    if (r.plan_.cancel && r.plan_.cancel->chosen(id)) {
      using When = CancelPlan::When;
      const CancelPlan& cp = *r.plan_.cancel;
      c->plan_cancel(cp.when == When::kBeforeFirstToken, cp.when == When::kAfterTokens ? cp.tokens : 0);
      if (cp.when == When::kAfterMs) {
        ctx.cancel_timer = std::make_shared<asio::steady_timer>(ioc, at(now() + cp.delay_ns(id)));
        ctx.cancel_timer->async_wait(
            [this, c, id, t = ctx.cancel_timer](const boost::system::error_code& ec) {
              if (!ec && still_running(c, id)) c->cancel_now();
            });
      }
    }
    if (free_context_nodes.empty()) {
      contexts.emplace(c, std::move(ctx));
    } else {
      auto node = std::move(free_context_nodes.back());
      free_context_nodes.pop_back();
      node.key() = c;
      node.mapped() = std::move(ctx);
      contexts.insert(std::move(node));
    }
    ++in_flight;
    ++r.counters_.in_flight;
    ++r.counters_.sent;
    const Nanos deadline = r.plan_.timeout_s > 0 ? now() + seconds_to_nanos(r.plan_.timeout_s) : 0;
    client.start(std::move(bytes), c, deadline);
  }

  // Whether the collector still carries the request of this id.
  bool still_running(ResponseCollector* c, std::uint64_t id) const {
    return contexts.count(c) > 0 && c->record().id == id;
  }
  // A planned cancel, from inside the collector's callbacks: the exchange is
  // ended from the io_context, after the callback returns.
  void cancel_later(ResponseCollector* c) {
    const std::uint64_t id = c->record().id;
    asio::post(ioc, [this, c, id] {
      if (still_running(c, id)) client.cancel(c);
    });
  }

  void on_done(ResponseCollector& c) {
    auto node = contexts.extract(&c);
    Context ctx = std::move(node.mapped());
    free_context_nodes.push_back(std::move(node));
    if (ctx.cancel_timer) ctx.cancel_timer->cancel();
    RequestRecord rec = std::move(c.record());
    // A follow-up turn of the session.
    const TurnLink* link = r.plan_.turns.empty() ? nullptr : &r.plan_.turns[ctx.request];
    std::string text;
    if (link && link->next >= 0) text = c.text();  // the next turn's history
    free_collectors.push_back(&c);
    --in_flight;
    --r.counters_.in_flight;
    if (rec.outcome == Outcome::kOk)
      ++r.counters_.completed;
    else if (!rec.cancel_planned)  // a planned cancel is no failure
      ++r.counters_.failed;
    const Nanos t_end = rec.t_close;
    const bool ok = rec.outcome == Outcome::kOk;
    r.out_.push(std::move(rec));

    bool session_goes_on = false;
    if (link && link->next >= 0) {
      if (ok && !stopping) {
        schedule_followup(ctx, std::move(text), *link, t_end);
        session_goes_on = true;
      } else {
        for (std::int32_t n = link->next; n >= 0; n = r.plan_.turns[n].next) ++not_sent;
      }
    }
    // The freed slot goes to the oldest queued request, whichever thread it came from.
    if (r.gate_.cap > 0 && !ctx.closed_loop_user()) {
      std::optional<std::pair<std::uint32_t, Nanos>> queued;
      {
        std::lock_guard lock(r.gate_.mutex);
        if (!r.gate_.waiting.empty() && !r.gate_.closed && r.gate_.in_flight <= r.gate_.cap) {
          queued = r.gate_.waiting.front();
          r.gate_.waiting.pop_front();
        } else {
          --r.gate_.in_flight;
        }
      }
      if (queued) {
        --r.counters_.queued;
        Context next_ctx;
        next_ctx.request = queued->first;
        send(std::move(next_ctx), queued->second, now(), nullptr, r.w_.requests[queued->first].id);
      }
    }
    // A closed-loop user thinks, then sends again (after the whole session).
    if (ctx.user >= 0 && !session_goes_on) user_after_request(ctx.user);
    update_idle_target();
  }

  void schedule_followup(const Context& ctx, std::string output, const TurnLink& link, Nanos t_end) {
    Context next_ctx;
    next_ctx.request = static_cast<std::uint32_t>(link.next);
    next_ctx.id_offset = ctx.id_offset;
    next_ctx.user = ctx.user;
    const workload::Request& next_req = r.w_.requests[next_ctx.request];
    const std::string next_prompt = r.prompts_->text(next_req);
    if (is_chat_like(r.encoder_.settings().api)) {
      next_ctx.history = ctx.history;
      next_ctx.history.push_back({"user", ctx.prompt});
      next_ctx.history.push_back({"assistant", std::move(output)});
      next_ctx.prompt = next_prompt;
    } else {
      // Completions: the conversation so far is the prefix of the next prompt.
      next_ctx.prompt = ctx.prompt + output + "\n" + next_prompt;
    }
    const Nanos t_sched = t_end + link.think_ns;
    auto t = std::make_shared<asio::steady_timer>(ioc, at(t_sched));
    followups.push_back(t);
    t->async_wait([this, t, t_sched,
                   next_ctx = std::move(next_ctx)](const boost::system::error_code& ec) mutable {
      std::erase(followups, t);
      if (ec || stopping) {
        for (std::int32_t n = static_cast<std::int32_t>(next_ctx.request); n >= 0; n = r.plan_.turns[n].next)
          ++not_sent;
        if (next_ctx.user >= 0) user_stopped(next_ctx.user);
        return;
      }
      const std::uint64_t id = r.w_.requests[next_ctx.request].id + next_ctx.id_offset;
      if (r.gate_.cap > 0) {  // a session's next turn is never held back, but it counts
        std::lock_guard lock(r.gate_.mutex);
        ++r.gate_.in_flight;
      }
      send(std::move(next_ctx), t_sched, -1, nullptr, id);
    });
  }

  // ---- closed loop ----
  void enter_stage(std::size_t s) {
    stage = s;
    if (stopping) return;
    const auto& stages = r.plan_.user_stages;
    if (s >= stages.size()) {  // the last stage is over: no new requests
      stopping = true;
      for (auto& u : users) u->timer.cancel();
      return;
    }
    const auto total = static_cast<std::uint64_t>(std::llround(stages[s].value));
    const std::uint64_t threads = r.shards_.size();
    const std::uint64_t mine = total / threads + (index < total % threads ? 1 : 0);
    while (users.size() < mine) users.push_back(std::make_unique<User>(ioc));
    users_changed = true;
    for (std::size_t i = 0; i < users.size(); ++i) {
      User& u = *users[i];
      u.retire = i >= mine;
      if (!u.retire && !u.active) {
        u.active = true;
        const int id = static_cast<int>(i);
        asio::post(ioc, [this, id] { user_send(id, now()); });
      }
    }
    Nanos end = r.epoch_;
    for (std::size_t i = 0; i <= s; ++i) end += seconds_to_nanos(stages[i].duration_s);
    timer.expires_at(at(end));
    timer.async_wait([this, s](const boost::system::error_code& ec) {
      if (!ec) enter_stage(s + 1);
    });
  }

  // A user sends no more; when none is left the stage timer has nothing to do.
  void user_stopped(int id) {
    users[static_cast<std::size_t>(id)]->active = false;
    users_changed = true;
    for (const auto& u : users)
      if (u->active) return;
    if (exhausted) timer.cancel();
  }

  void user_send(int id, Nanos t_ready) {
    User& u = *users[static_cast<std::size_t>(id)];
    if (stopping || u.retire) return user_stopped(id);
    std::uint64_t position = r.next_closed_++;
    // Sessions start at their first turn; later turns follow it. A shard
    // starts its own share of them (every shard_count-th).
    const auto others = [&](std::uint64_t p) {
      if (r.w_.requests.empty()) return false;
      const std::size_t size = r.w_.requests.size();
      if (!r.plan_.turns.empty() && r.plan_.turns[p % size].turn > 0) return true;
      if (r.plan_.shard_count <= 1) return false;
      const std::uint64_t rank = (p / size) * r.first_turns_ + r.first_turn_rank_[p % size];
      return rank % r.plan_.shard_count != r.plan_.shard_index;
    };
    while (others(position) && !(r.plan_.max_requests > 0 && position >= r.plan_.max_requests))
      position = r.next_closed_++;
    if ((r.plan_.max_requests > 0 && position >= r.plan_.max_requests) || r.w_.requests.empty()) {
      exhausted = true;
      return user_stopped(id);
    }
    Context ctx;
    ctx.request = static_cast<std::uint32_t>(position % r.w_.requests.size());
    ctx.user = id;
    const std::uint64_t wraps = position / r.w_.requests.size();
    ctx.id_offset = wraps * static_cast<std::uint64_t>(r.w_.requests.size());
    const std::uint64_t request_id = r.w_.requests[ctx.request].id + ctx.id_offset;
    send(std::move(ctx), t_ready, -1, nullptr, request_id);
  }

  void user_after_request(int id) {
    User& u = *users[static_cast<std::size_t>(id)];
    if (stopping || u.retire) return user_stopped(id);
    double ms = r.plan_.think_ms;
    if (r.plan_.think_exponential && ms > 0) ms = think_rng.exponential(1.0 / ms);
    if (ms <= 0) return user_send(id, now());
    const Nanos t_ready = now() + seconds_to_nanos(ms / 1e3);
    u.timer.expires_at(at(t_ready));
    u.timer.async_wait([this, id, t_ready](const boost::system::error_code& ec) {
      if (ec) return user_stopped(id);
      user_send(id, t_ready);
    });
  }

  // ---- stopping ----
  void stop_sending() {
    if (stopping) return;
    stopping = true;
    timer.cancel();
    not_sent += jobs.size() - next;
    prepared.clear();
    if (ahead) ahead->stop();
    next = jobs.size();
    for (auto& t : followups) t->cancel();
    for (auto& u : users) u->timer.cancel();
  }

  std::vector<std::unique_ptr<ResponseCollector>> owned;
};

Runner::Runner(const workload::Workload& w, LoadPlan plan, net::Endpoint endpoint, net::ClientOptions client,
               RequestSettings request, RecordQueue& out, const PromptBuilder* prompts)
    : w_(w),
      plan_(std::move(plan)),
      endpoint_(std::move(endpoint)),
      client_options_(std::move(client)),
      encoder_([&] {
        request.host_header = endpoint_.host_header();
        request.base_path = endpoint_.base_path;
        return std::move(request);
      }()),
      own_prompts_(prompts ? nullptr : std::make_unique<PromptBuilder>(w, nullptr, true)),
      prompts_(prompts ? prompts : own_prompts_.get()),
      out_(out) {
  // A closed loop's threads each hold some users: never more threads than
  // the largest stage's users (a thread without one would wait out its
  // stage, which lasts for ever under --num-requests).
  unsigned threads = std::max(1u, plan_.threads);
  if (plan_.closed_loop) {
    double users = 0;
    for (const auto& s : plan_.user_stages) users = std::max(users, s.value);
    threads = std::clamp(static_cast<unsigned>(std::llround(users)), 1u, threads);
  }
  // The connection limit: as asked, else the default, and never more than
  // the descriptors left (the run directory and the writer need a few).
  max_connections_ = plan_.max_connections > 0 ? plan_.max_connections : kDefaultMaxConnections;
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const auto usable = nofile.rlim_cur > 64 ? nofile.rlim_cur - 64 : 1;
    max_connections_ = static_cast<std::uint32_t>(std::min<rlim_t>(max_connections_, usable));
  }
  max_connections_ = std::max<std::uint32_t>(max_connections_, threads);
  for (unsigned i = 0; i < threads; ++i) {
    net::ClientOptions options = client_options_;
    options.max_connections = (max_connections_ + threads - 1 - i) / threads;
    options.max_connecting = plan_.max_connecting;
    shards_.push_back(std::make_unique<Shard>(*this, i, options));
  }
  for (std::size_t i = 0; i < plan_.schedule.size(); ++i)
    shards_[i % threads]->jobs.push_back(plan_.schedule[i]);
  if (plan_.closed_loop && plan_.shard_count > 1) {
    first_turn_rank_.resize(w_.requests.size());
    for (std::size_t i = 0; i < w_.requests.size(); ++i) {
      first_turn_rank_[i] = first_turns_;
      if (plan_.turns.empty() || plan_.turns[i].turn == 0) ++first_turns_;
    }
  }
  gate_.cap = plan_.closed_loop ? 0 : plan_.max_concurrency;
}

Runner::~Runner() {
  stop_sending();
  cancel_in_flight();
  join();
}

void Runner::start() {
  running_ = static_cast<unsigned>(shards_.size());
  // The warm connections open first (bounded): the schedule starts when the
  // pool is ready, so that the first sends never wait for handshakes.
  // Shared: a shard may report after the wait gave up.
  struct Warm {
    std::mutex m;
    std::condition_variable cv;
    unsigned left = 0;
  };
  auto warm = std::make_shared<Warm>();
  warm->left = static_cast<unsigned>(shards_.size());
  for (auto& s : shards_)
    s->launch([warm] {
      std::lock_guard lock(warm->m);
      --warm->left;
      warm->cv.notify_all();
    });
  {
    std::unique_lock lock(warm->m);
    warm->cv.wait_for(lock, std::chrono::nanoseconds(plan_.preconnect_timeout_ns),
                      [&] { return warm->left == 0; });
  }
  // The first bodies written apart are ready before the first send (they
  // were written while the pool opened).
  for (auto& s : shards_)
    if (s->ahead) s->ahead->wait_ready(std::chrono::nanoseconds(plan_.preconnect_timeout_ns));
  SteadyClock clock;
  const Nanos ready = clock.now_ns();
  if (plan_.epoch_at) {
    epoch_ = *plan_.epoch_at;
    ready_late_ = std::max<Nanos>(0, ready - epoch_);
  } else {
    epoch_ = ready + plan_.lead_in_ns;
  }
  for (auto& s : shards_) asio::post(s->ioc, [sh = s.get()] { sh->begin(); });
}

bool Runner::wait_for(int timeout_ms) {
  std::unique_lock lock(done_mutex_);
  return done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return running_ == 0; });
}

void Runner::stop_sending() {
  {
    std::lock_guard lock(gate_.mutex);
    gate_.closed = true;
    gate_not_sent_ += gate_.waiting.size();
    counters_.queued -= gate_.waiting.size();
    gate_.waiting.clear();
  }
  for (auto& s : shards_) asio::post(s->ioc, [sh = s.get()] { sh->stop_sending(); });
}

void Runner::cancel_in_flight() {
  for (auto& s : shards_) asio::post(s->ioc, [sh = s.get()] { sh->client.cancel_all(); });
}

std::vector<std::string> Runner::thread_cpus() const {
  std::vector<std::string> out;
  for (const auto& s : shards_) out.push_back(s->cpus);
  return out;
}

void Runner::join() {
  for (auto& s : shards_) {
    if (s->thread.joinable()) {
      s->thread.join();
      s->client.cancel_all();  // closes the idle connections: their descriptors are free again
    }
    if (s->ahead) s->ahead->finish();  // it ends by itself once every body is written
  }
}

std::uint64_t Runner::bodies_written_apart() const {
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += s->bodies_taken;
  return n;
}

std::uint64_t Runner::bodies_written_by_client_threads() const {
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += s->bodies_written_here;
  return n;
}

std::uint64_t Runner::not_sent() const {
  std::uint64_t n = gate_not_sent_.load();
  for (const auto& s : shards_) n += s->not_sent.load();
  return n;
}

std::uint64_t Runner::planned() const {
  return plan_.schedule.size();
}

net::ClientCounters Runner::client_counters() const {
  net::ClientCounters total;
  for (const auto& s : shards_) {
    const auto c = s->client.counters();
    total.connects += c.connects;
    total.connect_failures += c.connect_failures;
    total.connect_retries += c.connect_retries;
    total.reused += c.reused;
    total.resent += c.resent;
    total.open += c.open;
    total.idle += c.idle;
    total.stale_dropped += c.stale_dropped;
    total.idle_closed += c.idle_closed;
    total.waited += c.waited;
    total.peak_open += c.peak_open;  // an upper bound of the peak over all threads
  }
  return total;
}

}  // namespace tokenscope::bench
