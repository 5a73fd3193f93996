#include "analyze/profile_fit.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "rundir/readers.h"
#include "rundir/run_set.h"

namespace tokenscope::analyze {

namespace {

struct Req {
  Nanos send = 0;
  std::vector<Nanos> t;
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint64_t> before;  // output tokens before each event
  std::uint32_t prompt = 0;
  std::uint32_t cached = 0;
};

double percentile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  const std::size_t k =
      std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

StepReconstruction reconstruct_steps(const std::vector<RequestRecord>& records, const ReconstructOptions& o) {
  StepReconstruction out;
  std::vector<Req> reqs;
  for (const auto& r : records) {
    if (r.outcome != Outcome::kOk || r.event_times.empty() || r.t_send < 0 || r.prompt_tokens < 0) continue;
    if (r.event_tokens.size() != r.event_times.size()) continue;
    Req q;
    q.send = r.t_send;
    q.t = r.event_times;
    q.tokens = r.event_tokens;
    q.prompt = static_cast<std::uint32_t>(std::min<std::int64_t>(r.prompt_tokens, UINT32_MAX));
    q.cached = r.cached_tokens > 0
                   ? static_cast<std::uint32_t>(std::min<std::int64_t>(r.cached_tokens, q.prompt))
                   : 0u;
    if (q.cached >= q.prompt && q.prompt > 0) q.cached = q.prompt - 1;  // the last prompt token is computed
    q.before.resize(q.tokens.size());
    std::uint64_t sum = 0;
    for (std::size_t k = 0; k < q.tokens.size(); ++k) {
      q.before[k] = sum;
      sum += q.tokens[k];
    }
    reqs.push_back(std::move(q));
  }
  out.requests = reqs.size();
  if (reqs.empty()) return out;

  // The clustering tolerance: a quarter of the 5th percentile of the
  // requests' own gaps (two events of one request are two steps), at most 1 ms.
  double eps_ns = o.epsilon_ms * 1e6;
  if (!(eps_ns > 0)) {
    std::vector<double> gaps;
    for (const auto& q : reqs)
      for (std::size_t k = 1; k < q.t.size(); ++k)
        if (q.t[k] > q.t[k - 1]) gaps.push_back(static_cast<double>(q.t[k] - q.t[k - 1]));
    eps_ns = std::min(1e6, 0.25 * percentile_of(gaps, 0.05));
    if (!(eps_ns > 0)) eps_ns = 1e5;
  }
  out.epsilon_ms = eps_ns / 1e6;

  struct Ev {
    Nanos t;
    std::uint32_t req;
    std::uint32_t k;
  };
  std::vector<Ev> evs;
  for (std::uint32_t i = 0; i < reqs.size(); ++i)
    for (std::uint32_t k = 0; k < reqs[i].t.size(); ++k) evs.push_back({reqs[i].t[k], i, k});
  std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });

  // Requests by send time; those sent and still without a token, by when
  // their first token came (a min-heap), for the "waiting, not in the step" test.
  std::vector<std::uint32_t> by_send(reqs.size());
  std::iota(by_send.begin(), by_send.end(), 0u);
  std::sort(by_send.begin(), by_send.end(), [&](auto a, auto b) { return reqs[a].send < reqs[b].send; });
  std::size_t next_sent = 0;
  std::priority_queue<Nanos, std::vector<Nanos>, std::greater<>> waiting_first;

  Nanos prev_end = std::numeric_limits<Nanos>::min();
  std::size_t i = 0;
  while (i < evs.size()) {
    std::size_t j = i;
    while (j < evs.size() && static_cast<double>(evs[j].t - evs[i].t) <= eps_ns) ++j;
    ++out.clusters;
    const Nanos end = evs[i].t;
    ObservedStep st;
    st.end = end;
    bool multi = false;
    Nanos latest_prefill_send = std::numeric_limits<Nanos>::min();
    for (std::size_t e = i; e < j; ++e) {
      const Req& q = reqs[evs[e].req];
      const std::uint32_t k = evs[e].k;
      ++st.shape.num_seqs;
      ++st.shape.logit_tokens;
      if (q.tokens[k] != 1) multi = true;
      if (k == 0) {
        const double n = q.prompt - q.cached, c = q.cached;
        st.shape.prefill_tokens += q.prompt - q.cached;
        st.shape.prefill_attention_pairs += n * c + n * (n + 1) / 2.0;
        st.shape.prefill_kv_read_tokens += c + n;
        latest_prefill_send = std::max(latest_prefill_send, q.send);
        st.max_prompt = std::max(st.max_prompt, q.prompt);
        st.max_context = std::max(st.max_context, q.prompt);
      } else {
        // Its k-th output token: the step computed the one before, after the
        // prompt and k - 1 outputs (each earlier event one token).
        const std::uint64_t before = q.before[k];
        ++st.shape.decode_tokens;
        st.shape.decode_attention_pairs += static_cast<double>(q.prompt + before);
        st.max_context =
            std::max<std::uint32_t>(st.max_context, static_cast<std::uint32_t>(q.prompt + before));
      }
    }
    const Nanos start = std::max(prev_end, latest_prefill_send);
    // Sent before the step began, without a token by its end (so not in it).
    while (next_sent < by_send.size() && reqs[by_send[next_sent]].send < start)
      waiting_first.push(reqs[by_send[next_sent++]].t.front());
    while (!waiting_first.empty() && waiting_first.top() <= evs[j - 1].t) waiting_first.pop();
    const bool pending = !waiting_first.empty();
    const auto seqs = static_cast<std::uint32_t>(st.shape.num_seqs);
    if (seqs > out.max_batch_seen) {
      out.max_batch_seen = seqs;
      out.cap_reached = false;
    }
    if (pending && seqs == out.max_batch_seen) out.cap_reached = true;
    const bool full = o.batch_cap && seqs >= *o.batch_cap;
    if (multi) {
      ++out.left_out_multi_token;
    } else if (pending && !full) {
      ++out.left_out_pending;
    } else if (start != std::numeric_limits<Nanos>::min() && end > start) {
      st.seconds = static_cast<double>(end - start) * 1e-9;
      out.steps.push_back(st);
    }
    prev_end = end;
    i = j;
  }
  return out;
}

namespace {

// Lawson–Hanson non-negative least squares: min |A x - b| with x >= 0.
Eigen::VectorXd nnls(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, std::vector<bool>& passive) {
  const Eigen::Index n = a.cols();
  Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
  passive.assign(static_cast<std::size_t>(n), false);
  const double tol = 1e-12 * std::max(1.0, a.norm() * b.norm());
  const auto solve_passive = [&]() {
    std::vector<Eigen::Index> idx;
    for (Eigen::Index k = 0; k < n; ++k)
      if (passive[static_cast<std::size_t>(k)]) idx.push_back(k);
    Eigen::VectorXd s = Eigen::VectorXd::Zero(n);
    if (idx.empty()) return s;
    Eigen::MatrixXd ap(a.rows(), static_cast<Eigen::Index>(idx.size()));
    for (std::size_t c = 0; c < idx.size(); ++c) ap.col(static_cast<Eigen::Index>(c)) = a.col(idx[c]);
    const Eigen::VectorXd sp = ap.colPivHouseholderQr().solve(b);
    for (std::size_t c = 0; c < idx.size(); ++c) s(idx[c]) = sp(static_cast<Eigen::Index>(c));
    return s;
  };
  for (int outer = 0; outer < 3 * n + 10; ++outer) {
    const Eigen::VectorXd w = a.transpose() * (b - a * x);
    Eigen::Index t = -1;
    double best = tol;
    for (Eigen::Index k = 0; k < n; ++k)
      if (!passive[static_cast<std::size_t>(k)] && w(k) > best) {
        best = w(k);
        t = k;
      }
    if (t < 0) break;
    passive[static_cast<std::size_t>(t)] = true;
    for (int inner = 0; inner < 3 * n + 10; ++inner) {
      const Eigen::VectorXd s = solve_passive();
      bool feasible = true;
      for (Eigen::Index k = 0; k < n; ++k)
        if (passive[static_cast<std::size_t>(k)] && s(k) <= 0) feasible = false;
      if (feasible) {
        x = s;
        break;
      }
      double alpha = 1.0;
      for (Eigen::Index k = 0; k < n; ++k)
        if (passive[static_cast<std::size_t>(k)] && s(k) <= 0) alpha = std::min(alpha, x(k) / (x(k) - s(k)));
      x += alpha * (s - x);
      for (Eigen::Index k = 0; k < n; ++k)
        if (passive[static_cast<std::size_t>(k)] && x(k) <= 1e-15) {
          passive[static_cast<std::size_t>(k)] = false;
          x(k) = 0;
        }
    }
  }
  return x;
}

}  // namespace

CostFit fit_step_costs(const std::vector<ObservedStep>& steps, const std::string& what) {
  constexpr std::size_t K = engine::kProfileTerms;
  CostFit fit;
  // Steps of one shape: decode count, prefill count and tokens exact; the
  // attention sums within 2%.
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, long, long>;
  struct Group {
    std::vector<std::pair<double, std::array<double, K>>> steps;  // duration, features
  };
  std::map<Key, Group> groups;
  const auto bucket = [](double v) { return v > 0 ? std::lround(std::log1p(v) / std::log(1.02)) : -1L; };
  for (const auto& s : steps) {
    const auto x = engine::step_features(s.shape);
    const Key key{s.shape.decode_tokens, s.shape.num_seqs - s.shape.decode_tokens, s.shape.prefill_tokens,
                  bucket(s.shape.prefill_attention_pairs), bucket(s.shape.decode_attention_pairs)};
    groups[key].steps.emplace_back(s.seconds, x);
    fit.ranges.max_prefill_tokens = std::max<std::uint32_t>(
        fit.ranges.max_prefill_tokens, static_cast<std::uint32_t>(s.shape.prefill_tokens));
    fit.ranges.max_prompt_tokens = std::max(fit.ranges.max_prompt_tokens, s.max_prompt);
    fit.ranges.max_batch =
        std::max<std::uint32_t>(fit.ranges.max_batch, static_cast<std::uint32_t>(s.shape.num_seqs));
    fit.ranges.max_context_tokens = std::max(fit.ranges.max_context_tokens, s.max_context);
  }
  std::vector<std::array<double, K>> xs;
  std::vector<double> ys, ws;
  for (auto& [key, g] : groups) {
    // The median step by duration, its own features (the two middle ones
    // averaged): exact data stay exact.
    const double n = static_cast<double>(g.steps.size());
    std::sort(g.steps.begin(), g.steps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::size_t m = g.steps.size();
    const auto& lo = g.steps[(m - 1) / 2];
    const auto& hi = g.steps[m / 2];
    const double median = 0.5 * (lo.first + hi.first);
    std::array<double, K> x{};
    for (std::size_t k = 0; k < K; ++k) x[k] = 0.5 * (lo.second[k] + hi.second[k]);
    if (!(median > 0)) continue;
    xs.push_back(x);
    ys.push_back(median);
    ws.push_back(n);
  }
  fit.quality.observations = steps.size();
  fit.quality.points = ys.size();
  if (ys.size() < 3)
    throw InputError(what, 0, "",
                     fmt::format("{} steps of {} shapes could be rebuilt from the records: too few to fit a "
                                 "profile (at least 3 shapes are needed)",
                                 steps.size(), ys.size()));
  // Which terms the data vary.
  std::vector<std::size_t> cols;
  for (std::size_t k = 0; k < K; ++k) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& x : xs) {
      lo = std::min(lo, x[k]);
      hi = std::max(hi, x[k]);
    }
    fit.identified[k] = hi > 0 && (k == 0 || hi > lo || lo > 0);
    if (fit.identified[k]) cols.push_back(k);
  }
  const auto rows = static_cast<Eigen::Index>(ys.size());
  const auto ncol = static_cast<Eigen::Index>(cols.size());
  Eigen::MatrixXd a(rows, ncol);
  Eigen::VectorXd b(rows);
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(ncol);
  for (Eigen::Index r = 0; r < rows; ++r) {
    // Relative errors, each point weighted by its count.
    const double w = std::sqrt(ws[static_cast<std::size_t>(r)]) / ys[static_cast<std::size_t>(r)];
    for (Eigen::Index c = 0; c < ncol; ++c)
      a(r, c) = xs[static_cast<std::size_t>(r)][cols[static_cast<std::size_t>(c)]] * w;
    b(r) = ys[static_cast<std::size_t>(r)] * w;
  }
  for (Eigen::Index c = 0; c < ncol; ++c) {
    const double norm = a.col(c).norm();
    if (norm > 0) {
      scale(c) = norm;
      a.col(c) /= norm;
    }
  }
  std::vector<bool> passive;
  const Eigen::VectorXd xs_scaled = nnls(a, b, passive);
  const Eigen::VectorXd resid = b - a * xs_scaled;
  // Standard errors as for the unconstrained fit of every term the data
  // vary: a term at its bound (0) gets the width the data allow it.
  std::vector<Eigen::Index> act;
  for (Eigen::Index c = 0; c < ncol; ++c) act.push_back(c);
  std::size_t free_terms = 0;
  for (Eigen::Index c = 0; c < ncol; ++c) free_terms += passive[static_cast<std::size_t>(c)];
  const double dof = static_cast<double>(rows) - static_cast<double>(free_terms);
  const double sigma2 = dof > 0 ? resid.squaredNorm() / dof : NAN;
  Eigen::MatrixXd cov;
  if (!act.empty()) {
    Eigen::MatrixXd ap(rows, static_cast<Eigen::Index>(act.size()));
    for (std::size_t c = 0; c < act.size(); ++c) ap.col(static_cast<Eigen::Index>(c)) = a.col(act[c]);
    cov = (ap.transpose() * ap).completeOrthogonalDecomposition().pseudoInverse() * sigma2;
  }
  for (Eigen::Index c = 0; c < ncol; ++c) {
    const std::size_t k = cols[static_cast<std::size_t>(c)];
    fit.coef[k] = xs_scaled(c) / scale(c);
  }
  for (std::size_t c = 0; c < act.size(); ++c) {
    const std::size_t k = cols[static_cast<std::size_t>(act[c])];
    const double v = cov(static_cast<Eigen::Index>(c), static_cast<Eigen::Index>(c));
    fit.se[k] = std::isfinite(v) && v > 0 ? std::sqrt(v) / scale(act[c]) : 0.0;
  }
  // Quality over the points.
  double sw = 0, swy = 0, sse = 0, sst = 0, mape = 0;
  std::vector<double> abs_rel;
  for (std::size_t r = 0; r < ys.size(); ++r) {
    double pred = 0;
    for (std::size_t k = 0; k < K; ++k) pred += fit.coef[k] * xs[r][k];
    sw += ws[r];
    swy += ws[r] * ys[r];
    sse += ws[r] * (pred - ys[r]) * (pred - ys[r]);
    abs_rel.push_back(std::abs(pred / ys[r] - 1.0));
    mape += abs_rel.back();
  }
  const double mean = swy / sw;
  for (std::size_t r = 0; r < ys.size(); ++r) sst += ws[r] * (ys[r] - mean) * (ys[r] - mean);
  fit.quality.r2 = sst > 0 ? 1.0 - sse / sst : 1.0;
  fit.quality.rmse_ms = std::sqrt(sse / sw) * 1e3;
  fit.quality.mape = mape / static_cast<double>(ys.size());
  fit.quality.p90_abs_rel_error = percentile_of(abs_rel, 0.9);
  for (std::size_t k = 0; k < K; ++k) {
    const auto& t = engine::profile_terms()[k];
    if (!fit.identified[k])
      fit.notes.push_back(fmt::format(
          "{}: the steps measured never varied what it multiplies ({}); left at 0", t.key, t.multiplies));
    else if (fit.coef[k] == 0)
      fit.notes.push_back(
          fmt::format("{}: fitted at its bound, 0 (the data show no cost of {})", t.key, t.multiplies));
  }
  if (!(dof > 0)) fit.notes.push_back("as many coefficients as step shapes: no standard errors");
  return fit;
}

namespace {

std::vector<RequestRecord> read_records(const std::filesystem::path& dir) {
  std::vector<RequestRecord> out;
  rundir::RequestsReader reader(dir / "requests.jsonl", rundir::BadLines::kFail);
  RequestRecord r;
  while (reader.next(r)) out.push_back(r);
  return out;
}

nlohmann::json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return nullptr;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > rundir::kMaxRunJsonBytes) return nullptr;
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

std::optional<std::uint64_t> uint_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const auto* v = rundir::json_path(j, path);
  if (v && v->is_number_unsigned() && v->get<std::uint64_t>() > 0) return v->get<std::uint64_t>();
  if (v && v->is_string()) {
    try {
      const auto n = std::stoull(v->get<std::string>());
      if (n > 0) return n;
    } catch (...) {
    }
  }
  return std::nullopt;
}

void expand_runs(const std::filesystem::path& p, std::vector<std::filesystem::path>& out, int depth) {
  if (std::filesystem::exists(p / "requests.jsonl")) {
    out.push_back(p);
    return;
  }
  if (depth > 3) return;
  if (const auto set = rundir::read_run_set(p)) {
    for (const auto& d : set->listed) expand_runs(d, out, depth + 1);
    return;
  }
  throw UsageError(fmt::format(
      "{}: not a run directory (no requests.jsonl) nor a directory of runs (no sweep.json)", p.string()));
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

engine::Profile profile_from_runs(const std::vector<std::filesystem::path>& inputs, std::ostream& log) {
  std::vector<std::filesystem::path> runs;
  for (const auto& p : inputs) expand_runs(p, runs, 0);
  if (runs.empty()) throw UsageError("profile --from: no runs to fit");
  engine::Profile p;
  p.created = utc_now();
  std::vector<ObservedStep> steps;
  std::uint64_t clusters = 0, pending = 0, multi = 0, requests = 0;
  std::uint32_t max_batch_seen = 0;
  bool cap_reached = false;
  for (const auto& dir : runs) {
    const nlohmann::json run = read_json_file(dir / "run.json");
    const nlohmann::json* info = rundir::json_path(run, {"settings", "effective", "target", "server_info"});
    // The server's identity, from the first run that names it.
    if (p.server.empty()) {
      p.server = nlohmann::json::object();
      if (const auto* u = rundir::json_path(run, {"settings", "effective", "target", "url"});
          u && u->is_string())
        p.server["url"] = *u;
      if (const auto* m = rundir::json_path(run, {"settings", "effective", "target", "model"});
          m && m->is_string())
        p.server["model"] = *m;
      if (const auto* c = rundir::json_path(run, {"tool", "command"}); c && c->is_string())
        p.server["measured_by"] = "tokenscope " + c->get<std::string>();
      if (info && info->is_object())
        for (const char* k : {"engine", "version"})
          if (info->contains(k) && (*info)[k].is_string()) p.server[k] = (*info)[k];
    }
    ReconstructOptions ro;
    std::string cap_how;
    if (const auto cap = info ? uint_at(*info, {"max_batch"}) : std::nullopt) {
      ro.batch_cap = static_cast<std::uint32_t>(*cap);
      cap_how = fmt::format("the server's own word ({} {})", info->value("engine", std::string("server")),
                            info->value("route", std::string()));
    } else if (const auto seqs = uint_at(run, {"settings", "requested", "engine", "max_num_seqs"})) {
      ro.batch_cap = static_cast<std::uint32_t>(*seqs);
      cap_how = "the simulated engine's --max-num-seqs";
    }
    if (ro.batch_cap && !p.max_num_seqs) {
      p.max_num_seqs = *ro.batch_cap;
      p.found["max_num_seqs"] = cap_how;
    }
    if (!p.max_num_batched_tokens)
      if (const auto b = uint_at(run, {"settings", "requested", "engine", "max_num_batched_tokens"})) {
        p.max_num_batched_tokens = static_cast<std::uint32_t>(*b);
        p.found["max_num_batched_tokens"] = "the simulated engine's --max-num-batched-tokens";
      }
    if (!p.kv_capacity_tokens && info) {
      // llama.cpp: n_ctx per slot times the slots; vLLM: cache_config_info's blocks times their size.
      if (const auto n_ctx = uint_at(*info, {"n_ctx"}); n_ctx && ro.batch_cap) {
        p.kv_capacity_tokens = *n_ctx * *ro.batch_cap;
        p.found["kv_capacity_tokens"] = "llama.cpp's GET /props: n_ctx per slot times total_slots";
      } else if (const auto blocks =
                     uint_at(*info, {"metrics_info", "vllm:cache_config_info", "num_gpu_blocks"})) {
        if (const auto bs = uint_at(*info, {"metrics_info", "vllm:cache_config_info", "block_size"})) {
          p.kv_capacity_tokens = *blocks * *bs;
          p.found["kv_capacity_tokens"] = "vLLM's vllm:cache_config_info: num_gpu_blocks times block_size";
        }
      }
    }
    if (!p.kv_capacity_tokens) {
      const auto blocks = uint_at(run, {"settings", "effective", "engine", "num_gpu_blocks"});
      const auto bs = uint_at(run, {"settings", "effective", "engine", "block_size_tokens"});
      if (blocks && bs) {
        p.kv_capacity_tokens = *blocks * *bs;
        p.found["kv_capacity_tokens"] = "the simulated engine's KV blocks times their size";
      }
    }
    const auto rec = reconstruct_steps(read_records(dir), ro);
    clusters += rec.clusters;
    pending += rec.left_out_pending;
    multi += rec.left_out_multi_token;
    requests += rec.requests;
    if (rec.max_batch_seen > max_batch_seen) {
      max_batch_seen = rec.max_batch_seen;
      cap_reached = rec.cap_reached;
    } else if (rec.max_batch_seen == max_batch_seen) {
      cap_reached |= rec.cap_reached;
    }
    log << fmt::format("  {}: {} requests, {} steps seen, {} kept (tolerance {:.3g} ms)\n", dir.string(),
                       rec.requests, rec.clusters, rec.steps.size(), rec.epsilon_ms);
    steps.insert(steps.end(), rec.steps.begin(), rec.steps.end());
  }
  const CostFit fit = fit_step_costs(steps, runs.front().string());
  p.coef = fit.coef;
  p.stderr_ = fit.se;
  p.fit = fit.quality;
  p.ranges = fit.ranges;
  p.notes = fit.notes;
  if (!p.max_num_seqs && max_batch_seen > 0) {
    if (cap_reached) {
      p.max_num_seqs = max_batch_seen;
      p.found["max_num_seqs"] = fmt::format(
          "behaviour: requests waited while {} sequences ran, and no step ever held more", max_batch_seen);
    } else {
      p.notes.push_back(fmt::format(
          "max_num_seqs: not found (no step held more than {} sequences, and none left a request waiting)",
          max_batch_seen));
    }
  }
  if (!p.max_num_batched_tokens)
    p.notes.push_back(fmt::format(
        "max_num_batched_tokens: not found (the server does not say; the largest step measured had {} prompt "
        "tokens); sim uses its own default unless --max-num-batched-tokens is given",
        p.ranges.max_prefill_tokens));
  if (!p.kv_capacity_tokens)
    p.notes.push_back(
        "kv_capacity_tokens: not found (the server does not say); sim sizes the KV cache itself");
  if (pending + multi > 0)
    p.notes.push_back(
        fmt::format("{} of {} steps left out: {} when a request may have been prefilled unseen, {} "
                    "with events of several tokens",
                    pending + multi, clusters, pending, multi));
  return p;
}

}  // namespace tokenscope::analyze
