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
#include "rundir/run_files.h"
#include "rundir/run_set.h"

namespace tokenscope::analyze {

namespace {

struct Req {
  Nanos send = 0;
  std::vector<Nanos> t;
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint64_t> before;  // output tokens before each event
  bool known = true;                  // its prompt length is known and its times in order
  std::uint32_t prompt = 0;
  std::uint32_t cached = 0;
};

double percentile_of(std::vector<double> v, double q) {  // v's q-quantile (nearest rank below)
  if (v.empty()) return 0.0;
  const std::size_t k =
      std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

StepReconstruction reconstruct_steps(const std::vector<RequestRecord>& records, const ReconstructOptions& o) {
  StepReconstruction out;
  // Every request that streamed is on the timeline (a cancelled or failed
  // one decoded in its steps too); one whose prompt length is unknown, or
  // whose events are not in time order, makes the steps it was in unusable.
  std::vector<Req> reqs;
  for (const auto& r : records) {
    if (r.event_times.empty() || r.t_send < 0) continue;
    if (r.event_tokens.size() != r.event_times.size()) continue;
    Req q;
    q.known = r.prompt_tokens >= 0 && std::is_sorted(r.event_times.begin(), r.event_times.end()) &&
              r.event_times.front() >= r.t_send;
    if (!q.known && !std::is_sorted(r.event_times.begin(), r.event_times.end())) continue;
    q.send = r.t_send;
    q.t = r.event_times;
    q.tokens = r.event_tokens;
    q.prompt = static_cast<std::uint32_t>(std::clamp<std::int64_t>(r.prompt_tokens, 0, UINT32_MAX));
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

  struct Ev {
    Nanos t;
    std::uint32_t req;
    std::uint32_t k;
  };
  std::vector<Ev> evs;
  for (std::uint32_t i = 0; i < reqs.size(); ++i)
    for (std::uint32_t k = 0; k < reqs[i].t.size(); ++k) evs.push_back({reqs[i].t[k], i, k});
  std::stable_sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });

  // Whether a request sent before t had no token by t (waiting, or being
  // prefilled unseen): the largest first-token time of the requests sent
  // before t, by send time.
  std::vector<std::uint32_t> by_send(reqs.size());
  std::iota(by_send.begin(), by_send.end(), 0u);
  std::sort(by_send.begin(), by_send.end(), [&](auto a, auto b) { return reqs[a].send < reqs[b].send; });
  std::vector<Nanos> sends(reqs.size()), max_first(reqs.size());
  for (std::size_t i = 0; i < by_send.size(); ++i) {
    sends[i] = reqs[by_send[i]].send;
    max_first[i] =
        std::max(i ? max_first[i - 1] : std::numeric_limits<Nanos>::min(), reqs[by_send[i]].t.front());
  }
  const auto waiting_at = [&](Nanos t) {
    const auto n = std::lower_bound(sends.begin(), sends.end(), t) - sends.begin();
    return n > 0 && max_first[static_cast<std::size_t>(n - 1)] > t;
  };

  // Occupancy (llama.cpp): what the idle slots keep, as a step function of
  // time, from the slots replayed in send order.
  const bool occupancy = o.attention == engine::AttentionSpan::kOccupancy && o.batch_cap && *o.batch_cap > 0;
  std::vector<std::pair<Nanos, double>> idle_kept;  // (from when, tokens kept by idle slots)
  if (occupancy) {
    struct Change {
      Nanos t;
      bool start;
      std::uint32_t req;
    };
    std::vector<Change> changes;
    for (std::uint32_t i = 0; i < reqs.size(); ++i) {
      changes.push_back({reqs[i].send, true, i});
      changes.push_back({reqs[i].t.back(), false, i});
    }
    std::stable_sort(changes.begin(), changes.end(), [](const Change& a, const Change& b) {
      return a.t != b.t ? a.t < b.t : (!a.start && b.start);  // a slot freed before one is taken
    });
    // Empty slots are counted (they are taken first); the others kept by when last used.
    std::multimap<Nanos, double> idle;
    double kept = 0;
    std::uint64_t empty = *o.batch_cap;
    idle_kept.emplace_back(std::numeric_limits<Nanos>::min(), kept);
    std::uint32_t active = 0;
    std::size_t queued = 0;  // sent while every slot was busy: they take the next freed ones
    const auto take = [&] {
      ++active;
      if (empty > 0) {
        --empty;
      } else if (!idle.empty()) {
        kept -= idle.begin()->second;
        idle.erase(idle.begin());
      }
    };
    for (const auto& c : changes) {
      if (c.start) {
        if (active < *o.batch_cap)
          take();
        else
          ++queued;
      } else {
        const Req& q = reqs[c.req];
        // Its slot keeps what was computed: the prompt and every output but the last.
        const double tokens = q.prompt + static_cast<double>(q.before.back() + q.tokens.back()) - 1.0;
        if (active > 0) --active;
        if (tokens > 0) {
          idle.emplace(c.t, tokens);
          kept += tokens;
        } else {
          ++empty;
        }
        while (idle.size() + empty + active > *o.batch_cap && !idle.empty()) {
          kept -= idle.begin()->second;
          idle.erase(idle.begin());
        }
        if (queued > 0) {
          --queued;
          take();
        }
      }
      idle_kept.emplace_back(c.t, kept);
    }
  }
  // What the idle slots kept just before time t.
  const auto kept_before = [&](Nanos t) {
    auto it = std::lower_bound(idle_kept.begin(), idle_kept.end(), t,
                               [](const auto& e, Nanos x) { return e.first < x; });
    return it == idle_kept.begin() ? 0.0 : std::prev(it)->second;
  };

  // (a) Decode periods: one request's gap between two of its tokens is one
  // step, in which every other request decoding got one token too (at its
  // own moment: a server may sample and send slot by slot). A period is kept
  // when nothing joined or left within a period of it on either side (no
  // prefill in it, whatever the order the server sends in) and no request
  // was waiting (unless the batch was full).
  std::vector<std::uint32_t> seen;
  for (std::uint32_t r = 0; r < reqs.size(); ++r) {
    const Req& q = reqs[r];
    for (std::uint32_t k = 1; k < q.t.size(); ++k) {
      // The other requests' events in (t[k-1], t[k]], by time (ties: a
      // simulator emits a step's tokens at one instant).
      const auto t_by = [](Nanos t, const Ev& e) { return t < e.t; };
      const std::size_t a =
          static_cast<std::size_t>(std::upper_bound(evs.begin(), evs.end(), q.t[k - 1], t_by) - evs.begin());
      const std::size_t b =
          static_cast<std::size_t>(std::upper_bound(evs.begin(), evs.end(), q.t[k], t_by) - evs.begin());

      ++out.clusters;
      if (q.tokens[k] != 1) {
        ++out.left_out_multi_token;
        continue;
      }
      const std::size_t span = b > a ? b - a : 0;
      const std::size_t lo = a >= 2 * span ? a - 2 * span : 0, hi = std::min(evs.size() - 1, b + span);
      bool transition = false;
      for (std::size_t e = lo; e <= hi && !transition; ++e) {
        const Req& s = reqs[evs[e].req];
        transition = evs[e].k == 0 || evs[e].k + 1 == s.t.size() || !s.known;
      }
      // One period per step: the one of the lowest-numbered request in it
      // (each of the step's sequences has a gap over the same step).
      bool representative = true;
      for (std::size_t e = a; e < b && representative; ++e) representative = evs[e].req >= r;
      if (!representative) continue;
      ObservedStep st;
      st.end = q.t[k];
      seen.clear();
      bool multi = false;
      const auto add = [&](std::uint32_t req, std::uint32_t kk) {
        const Req& s = reqs[req];
        seen.push_back(req);
        multi |= s.tokens[kk] != 1;
        ++st.shape.num_seqs;
        ++st.shape.decode_tokens;
        ++st.shape.logit_tokens;
        const auto ctx =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(s.prompt + s.before[kk], UINT32_MAX));
        st.shape.decode_attention_pairs += ctx;
        st.max_context = std::max(st.max_context, ctx);
      };
      for (std::size_t e = a; e < b; ++e) add(evs[e].req, evs[e].k);
      std::sort(seen.begin(), seen.end());
      const bool repeated = std::adjacent_find(seen.begin(), seen.end()) != seen.end();
      const auto seqs = static_cast<std::uint32_t>(st.shape.num_seqs);
      const bool full = o.batch_cap && seqs >= *o.batch_cap;
      // Waiting: sent a period before the step began, and no token yet.
      const Nanos period = q.t[k] - q.t[k - 1];
      const bool waiting = q.t[k - 1] - period > std::numeric_limits<Nanos>::min() / 2 &&
                           waiting_at(q.t[k]) && waiting_at(q.t[k - 1] - period);
      if (!multi && !transition && !repeated) {
        if (seqs > out.max_batch_seen) {
          out.max_batch_seen = seqs;
          out.cap_reached = false;
        }
        if (waiting && seqs == out.max_batch_seen) out.cap_reached = true;
      }
      if (multi) {
        ++out.left_out_multi_token;
      } else if (transition || repeated || (waiting && !full)) {
        ++out.left_out_pending;
      } else if (q.t[k] > q.t[k - 1]) {
        st.seconds = static_cast<double>(q.t[k] - q.t[k - 1]) * 1e-9;
        if (occupancy) {
          // The sequences' tokens after the step (their contexts, and the token computed) and the idle
          // slots'.
          const double occupied = st.shape.decode_attention_pairs + kept_before(q.t[k - 1] + 1);
          st.shape.decode_attention_pairs = static_cast<double>(st.shape.decode_tokens) * occupied;
        }
        out.steps.push_back(st);
      }
    }
  }

  // (b) Prefills from an idle server: the requests sent before the first of
  // them answered, whose first tokens are the next events (in any order),
  // were prefilled in one step that began when the first was sent.
  std::vector<Nanos> max_last(by_send.size());
  for (std::size_t i = 0; i < by_send.size(); ++i)
    max_last[i] =
        std::max(i ? max_last[i - 1] : std::numeric_limits<Nanos>::min(), reqs[by_send[i]].t.back());
  std::size_t e_next = 0;
  for (std::size_t i = 0; i < by_send.size();) {
    const Req& q = reqs[by_send[i]];
    while (e_next < evs.size() && evs[e_next].t < q.send) ++e_next;
    // Idle: every request sent before it had ended.
    const bool idle = i == 0 || max_last[i - 1] < q.send;
    std::size_t j = i + 1;
    while (j < by_send.size() && reqs[by_send[j]].send < q.t.front()) ++j;
    ++out.clusters;
    if (idle && e_next < evs.size()) {
      // The next j - i events are the group's first tokens.
      bool one_step = e_next + (j - i) <= evs.size();
      std::vector<std::uint32_t> group(by_send.begin() + static_cast<std::ptrdiff_t>(i),
                                       by_send.begin() + static_cast<std::ptrdiff_t>(j));
      std::sort(group.begin(), group.end());
      Nanos last_first = 0, first_first = 0;
      Nanos min_period = std::numeric_limits<Nanos>::max();
      for (std::size_t e = e_next; one_step && e < e_next + (j - i); ++e) {
        one_step = evs[e].k == 0 && std::binary_search(group.begin(), group.end(), evs[e].req) &&
                   reqs[evs[e].req].known;
        if (e == e_next) first_first = evs[e].t;
        last_first = evs[e].t;
        const Req& g = reqs[evs[e].req];
        if (g.t.size() > 1) min_period = std::min(min_period, g.t[1] - g.t[0]);
      }
      // All first tokens within one step (a server that sends slot by slot
      // spreads them, but over less than a step): else the later ones came
      // a step after (sent while the first one's prefill ran).
      if (one_step && j - i > 1 &&
          (min_period == std::numeric_limits<Nanos>::max() || 2 * (last_first - first_first) >= min_period))
        one_step = false;
      // A token of the same moment after them (a second step's) means they were not one step.
      const std::size_t after = e_next + (j - i);
      if (one_step && after < evs.size() && evs[after].t <= last_first) one_step = false;
      if (one_step) {
        ObservedStep st;
        st.end = last_first;
        for (const auto g : group) {
          const Req& s = reqs[g];
          const double n = s.prompt - s.cached, c = s.cached;
          ++st.shape.num_seqs;
          ++st.shape.logit_tokens;
          st.shape.prefill_tokens += s.prompt - s.cached;
          st.shape.prefill_attention_pairs += n * c + n * (n + 1) / 2.0;
          st.shape.prefill_kv_read_tokens += c + n;
          st.max_prompt = std::max(st.max_prompt, s.prompt);
          st.max_context = std::max(st.max_context, s.prompt);
        }
        st.seconds = static_cast<double>(last_first - q.send) * 1e-9;
        if (occupancy) {
          // The group's slots taken (their sends are in the step function), the prompts' tokens added.
          const double occupied =
              kept_before(reqs[by_send[j - 1]].send + 1) + st.shape.prefill_kv_read_tokens;
          st.shape.prefill_attention_pairs = static_cast<double>(st.shape.prefill_tokens) * occupied;
        }
        if (st.seconds > 0) out.steps.push_back(st);
      } else {
        ++out.left_out_pending;
      }
    }
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

CostFit fit_step_costs(const std::vector<ObservedStep>& steps, const std::string& what, const FitOptions& o) {
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
  // The decode curve's points: decode counts the points hold exactly (each
  // point is then on the curve's support), on a grid that doubles with half
  // steps (0, 1, 2, 3, 4, 6, 8, 12, ...), and the smallest and the largest.
  std::vector<std::uint32_t> knots;
  if (o.decode_curve) {
    std::vector<std::uint32_t> present;
    for (const auto& x : xs) present.push_back(static_cast<std::uint32_t>(std::lround(x[3])));
    std::sort(present.begin(), present.end());
    present.erase(std::unique(present.begin(), present.end()), present.end());
    // A point at 0 decodes (a step of prefills alone) is told apart from the
    // per-prefill term only by steps of different prefill counts; without
    // them such a step costs the curve's first point, and the per-prefill
    // term takes the difference.
    std::vector<double> prefill_counts;
    for (const auto& x : xs)
      if (x[3] == 0) prefill_counts.push_back(x[2]);
    std::sort(prefill_counts.begin(), prefill_counts.end());
    prefill_counts.erase(std::unique(prefill_counts.begin(), prefill_counts.end()), prefill_counts.end());
    const bool no_zero = prefill_counts.size() < 2 && present.size() > 1 && present.front() == 0;
    if (no_zero) present.erase(present.begin());
    const auto on_grid = [](std::uint32_t d) {
      if (d <= 4) return true;
      std::uint64_t p = 4;
      while (p * 2 <= d) p *= 2;
      return d == p || d == p + p / 2;
    };
    for (const auto d : present)
      if (d == present.front() || d == present.back() || on_grid(d)) knots.push_back(d);
    if (knots.size() < 3) {
      fit.notes.push_back(fmt::format(
          "decode cost: linear (the steps measured gave {} point{} for a decode curve; it needs 3)",
          knots.size(), knots.size() == 1 ? "" : "s"));
      knots.clear();
    } else if (no_zero) {
      fit.notes.push_back(
          "decode curve: no point at 0 decodes (prefills were seen in groups of one size only); a step of "
          "prefills alone costs the curve's first point, and prefill_seq_ms takes the difference (at 0 when "
          "that point costs more than such a step)");
    }
  }
  const bool curve = !knots.empty();
  // The hat function of knot j at d (below the first knot, the first's value).
  const auto hat = [&](std::size_t j, double d) {
    const double k = knots[j];
    if (d == k) return 1.0;
    if (d < k) {
      if (j == 0) return 1.0;
      const double a = knots[j - 1];
      return d > a ? (d - a) / (k - a) : 0.0;
    }
    if (j + 1 == knots.size()) return 0.0;
    const double b = knots[j + 1];
    return d < b ? (b - d) / (b - k) : 0.0;
  };
  // The design's columns: a term (its index) or a knot of the curve (K + j).
  std::vector<std::size_t> cols;
  for (std::size_t k = 0; k < K; ++k) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& x : xs) {
      lo = std::min(lo, x[k]);
      hi = std::max(hi, x[k]);
    }
    // The per-step term is there whenever steps ran; another is told apart
    // only when it varied (a constant one is the per-step term again).
    fit.identified[k] = k == 0 ? hi > 0 : hi > lo;
    if (curve && (k == 0 || k == 3)) continue;
    if (fit.identified[k]) cols.push_back(k);
  }
  for (std::size_t j = 0; j < knots.size(); ++j) cols.push_back(K + j);
  const auto feature = [&](std::size_t r, std::size_t c) {
    return c < K ? xs[r][c] : xs[r][0] * hat(c - K, xs[r][3]);
  };
  const auto rows = static_cast<Eigen::Index>(ys.size());
  const auto ncol = static_cast<Eigen::Index>(cols.size());
  Eigen::MatrixXd a(rows, ncol);
  Eigen::VectorXd b(rows);
  Eigen::VectorXd scale = Eigen::VectorXd::Ones(ncol);
  for (Eigen::Index r = 0; r < rows; ++r) {
    // Relative errors, each point weighted by its count.
    const auto ri = static_cast<std::size_t>(r);
    const double w = std::sqrt(ws[ri]) / ys[ri];
    for (Eigen::Index c = 0; c < ncol; ++c) a(r, c) = feature(ri, cols[static_cast<std::size_t>(c)]) * w;
    b(r) = ys[ri] * w;
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
  // Standard errors as for the unconstrained fit of every column: a term at
  // its bound (0) gets the width the data allow it.
  const auto rank = a.colPivHouseholderQr().rank();
  const double dof = static_cast<double>(rows) - static_cast<double>(rank);
  const double sigma2 = dof > 0 ? resid.squaredNorm() / dof : NAN;
  const Eigen::MatrixXd cov =
      ncol > 0
          ? Eigen::MatrixXd((a.transpose() * a).completeOrthogonalDecomposition().pseudoInverse() * sigma2)
          : Eigen::MatrixXd();
  fit.curve.resize(knots.size());
  for (Eigen::Index c = 0; c < ncol; ++c) {
    const std::size_t k = cols[static_cast<std::size_t>(c)];
    const double v = cov(c, c);
    const double se = std::isfinite(v) && v > 0 ? std::sqrt(v) / scale(c) : 0.0;
    if (k < K) {
      fit.coef[k] = xs_scaled(c) / scale(c);
      fit.se[k] = se;
    } else {
      fit.curve[k - K] = {knots[k - K], xs_scaled(c) / scale(c), se};
    }
  }
  // Quality over the points.
  const auto predict = [&](std::size_t r) {
    double pred = 0;
    for (std::size_t k = 0; k < K; ++k) pred += fit.coef[k] * xs[r][k];
    if (curve) pred += xs[r][0] * engine::curve_seconds(fit.curve, xs[r][3]);
    return pred;
  };
  double sw = 0, swy = 0, sse = 0, sst = 0, mape = 0;
  std::vector<double> abs_rel;
  for (std::size_t r = 0; r < ys.size(); ++r) {
    const double pred = predict(r);
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
    if (curve && (k == 0 || k == 3)) continue;
    if (!fit.identified[k])
      fit.notes.push_back(fmt::format(
          "{}: the steps measured never varied what it multiplies ({}); left at 0", t.key, t.multiplies));
    else if (fit.coef[k] == 0)
      fit.notes.push_back(
          fmt::format("{}: fitted at its bound, 0 (the data show no cost of {})", t.key, t.multiplies));
  }
  if (curve) {
    std::string at;
    for (const auto& q : fit.curve)
      at += fmt::format("{}{}: {:.3g} ms", at.empty() ? "" : ", ", q.seqs, q.seconds * 1e3);
    fit.notes.push_back(fmt::format(
        "decode cost: a curve over the decoding sequences in a step ({}), in place of step_overhead_ms and "
        "decode_seq_us",
        at));
  }
  if (!(dof > 0)) fit.notes.push_back("as many coefficients as step shapes: no standard errors");
  if (rank < ncol)
    fit.notes.push_back(
        fmt::format("the steps measured tell only {} of the {} varying terms apart: their split is "
                    "arbitrary, and their standard errors understate it",
                    rank, ncol));
  return fit;
}

void CounterReadings::merge(const CounterReadings& o) {
  kv_estimates.insert(kv_estimates.end(), o.kv_estimates.begin(), o.kv_estimates.end());
  running_while_waiting = std::max(running_while_waiting, o.running_while_waiting);
  max_running = std::max(max_running, o.max_running);
  scrapes += o.scrapes;
}

CounterReadings read_counters(const std::vector<RequestRecord>& records,
                              const std::vector<observe::Observation>& samples) {
  CounterReadings out;
  for (const auto& s : samples) {
    if (s.source != "server" || !s.error.empty()) continue;
    double running = 0, waiting = 0, usage = 0;
    int usage_series = 0;
    bool has_running = false, has_waiting = false;
    for (const auto& c : s.canonical) {
      if (!std::isfinite(c.value)) continue;
      if (c.name == "requests_running") {
        running += c.value;
        has_running = true;
      } else if (c.name == "requests_waiting") {
        waiting += c.value;
        has_waiting = true;
      } else if (c.name == "kv_cache_usage") {
        usage += c.value;
        ++usage_series;
      }
    }
    if (!has_running || !has_waiting || running < 0 || running > 1e6 || waiting < 0) continue;
    ++out.scrapes;
    const auto run = static_cast<std::uint32_t>(std::lround(running));
    out.max_running = std::max(out.max_running, run);
    if (waiting >= 1) out.running_while_waiting = std::max(out.running_while_waiting, run);
    if (usage_series == 0 || waiting >= 1 || run == 0) continue;
    usage /= usage_series;
    if (!(usage >= 0.02 && usage <= 1.0)) continue;
    // The server's state about halfway through the read.
    const Nanos t = s.t_ns - s.rtt_ns / 2;
    std::uint32_t in_flight = 0;
    double tokens = 0;
    bool known = true;
    for (const auto& r : records) {
      if (r.t_send < 0 || r.t_send > t) continue;
      const Nanos end = r.t_close >= 0 ? r.t_close : r.t_last_token;
      if (end < 0 || end <= t) continue;
      ++in_flight;
      if (r.prompt_tokens < 0 || r.event_tokens.size() != r.event_times.size()) {
        known = false;
        break;
      }
      tokens += static_cast<double>(r.prompt_tokens);
      for (std::size_t k = 0; k < r.event_times.size() && r.event_times[k] <= t; ++k)
        tokens += r.event_tokens[k];
    }
    if (known && in_flight == run && tokens > 0) out.kv_estimates.push_back(tokens / usage);
  }
  return out;
}

namespace {

std::vector<RequestRecord> read_records(const std::filesystem::path& dir) {
  std::vector<RequestRecord> out;
  rundir::RequestsReader reader(dir / "requests.jsonl", rundir::BadLines::kFail);
  RequestRecord r;
  while (reader.next(r)) out.push_back(r);
  return out;
}

// run.json when the run has one (the shared reader: bounded size and depth).
nlohmann::json run_json_of(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "run.json", ec)) return nullptr;
  return rundir::read_json_file(dir / "run.json");
}

std::optional<std::uint64_t> uint_at(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const auto* v = rundir::json_path(j, path);
  if (v && v->is_number_unsigned() && v->get<std::uint64_t>() > 0) return v->get<std::uint64_t>();
  if (v && v->is_string()) {
    const std::string& text = v->get_ref<const std::string&>();
    if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    const auto n = std::stoull(text);
    if (n > 0) return n;
  }
  return std::nullopt;
}

// A setting of the simulated engine: sim's (settings.requested.engine) or
// in-process bench's (settings.requested.server.engine).
std::optional<std::uint64_t> engine_setting(const nlohmann::json& run, const char* key) {
  if (auto v = uint_at(run, {"settings", "requested", "engine", key})) return v;
  return uint_at(run, {"settings", "requested", "server", "engine", key});
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
  // A profile's runs directory: its subdirectories that hold a run, by name.
  std::vector<std::filesystem::path> sub;
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec))
    for (std::filesystem::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
      // (The sweep's first cell, probe-*, only asked the server what it is.)
      if (it->is_directory(ec) && it->path().filename().string().rfind("probe-", 0) != 0 &&
          std::filesystem::exists(it->path() / "requests.jsonl", ec))
        sub.push_back(it->path());
  if (!sub.empty()) {
    std::sort(sub.begin(), sub.end());
    out.insert(out.end(), sub.begin(), sub.end());
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

engine::Profile profile_from_runs(const std::vector<std::filesystem::path>& inputs, std::ostream& log,
                                  const std::string& attention, const std::string& decode_cost) {
  std::vector<std::filesystem::path> runs;
  for (const auto& p : inputs) expand_runs(p, runs, 0);
  if (runs.empty()) throw UsageError("profile --from: no runs to fit");
  engine::Profile p;
  p.created = utc_now();
  std::vector<ObservedStep> steps;
  std::uint64_t clusters = 0, pending = 0, multi = 0;
  std::uint32_t max_batch_seen = 0;
  bool cap_reached = false;
  CounterReadings counters;  // over every run
  std::optional<engine::AttentionSpan> decided;
  for (const auto& dir : runs) {
    const nlohmann::json run = run_json_of(dir);
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
    if (const auto cap = info ? uint_at(*info, {"max_batch"}) : std::nullopt; cap && *cap <= 1'000'000) {
      ro.batch_cap = static_cast<std::uint32_t>(*cap);
      cap_how = fmt::format("the server's own word ({} {})", info->value("engine", std::string("server")),
                            info->value("route", std::string()));
    } else if (const auto eff_seqs = uint_at(run, {"settings", "effective", "engine", "max_num_seqs"});
               eff_seqs && *eff_seqs <= 1'000'000) {
      ro.batch_cap = static_cast<std::uint32_t>(*eff_seqs);
      cap_how = "the simulated engine's batch cap";
    } else if (const auto seqs = engine_setting(run, "max_num_seqs"); seqs && *seqs <= 1'000'000) {
      ro.batch_cap = static_cast<std::uint32_t>(*seqs);
      cap_how = "the simulated engine's --max-num-seqs";
    }
    // The server's counters, where it was scraped.
    const std::vector<RequestRecord> records = read_records(dir);
    CounterReadings readings;
    if (std::error_code ec; std::filesystem::exists(dir / "samples.jsonl", ec)) {
      rundir::SamplesReader reader(dir / "samples.jsonl", rundir::BadLines::kSkip);
      std::vector<observe::Observation> samples;
      observe::Observation o;
      while (reader.next(o))
        if (o.source == "server") samples.push_back(std::move(o));
      readings = read_counters(records, samples);
      counters.merge(readings);
    }
    if (!ro.batch_cap && !p.max_num_seqs && readings.running_while_waiting > 0 &&
        counters.max_running == counters.running_while_waiting) {
      ro.batch_cap = readings.running_while_waiting;
      cap_how = fmt::format(
          "the server's counters: requests waited while {} ran (requests_running), and no scrape saw more",
          *ro.batch_cap);
    }
    if (ro.batch_cap && !p.max_num_seqs) {
      p.max_num_seqs = *ro.batch_cap;
      p.found["max_num_seqs"] = cap_how;
    }
    if (!p.max_num_batched_tokens && info)
      if (const auto c = uint_at(*info, {"chunked_prefill_size"}); c && *c <= 100'000'000) {
        p.max_num_batched_tokens = static_cast<std::uint32_t>(*c);
        p.found["max_num_batched_tokens"] = "SGLang's GET /get_server_info: chunked_prefill_size";
      }
    if (!p.max_num_batched_tokens)
      if (const auto b = engine_setting(run, "max_num_batched_tokens"); b && *b <= 100'000'000) {
        p.max_num_batched_tokens = static_cast<std::uint32_t>(*b);
        p.found["max_num_batched_tokens"] = "the simulated engine's --max-num-batched-tokens";
      }
    if (!p.kv_capacity_tokens && info) {
      // llama.cpp: n_ctx per slot times the slots; vLLM: cache_config_info's blocks times their size;
      // SGLang: its KV pool in tokens.
      if (const auto pool = uint_at(*info, {"kv_capacity_tokens"}); pool && *pool <= 1'000'000'000'000) {
        p.kv_capacity_tokens = *pool;
        p.found["kv_capacity_tokens"] = "SGLang's GET /get_server_info: max_total_num_tokens";
      } else if (const auto n_ctx = uint_at(*info, {"n_ctx"});
                 n_ctx && ro.batch_cap && *n_ctx <= 100'000'000) {
        p.kv_capacity_tokens = *n_ctx * *ro.batch_cap;
        p.found["kv_capacity_tokens"] = "llama.cpp's GET /props: n_ctx per slot times total_slots";
      } else if (const auto blocks =
                     uint_at(*info, {"metrics_info", "vllm:cache_config_info", "num_gpu_blocks"})) {
        if (const auto bs = uint_at(*info, {"metrics_info", "vllm:cache_config_info", "block_size"});
            bs && *blocks <= 100'000'000 && *bs <= 100'000) {
          p.kv_capacity_tokens = *blocks * *bs;
          p.found["kv_capacity_tokens"] = "vLLM's vllm:cache_config_info: num_gpu_blocks times block_size";
        }
      }
    }
    if (!p.kv_capacity_tokens) {
      const auto blocks = uint_at(run, {"settings", "effective", "engine", "num_gpu_blocks"});
      const auto bs = uint_at(run, {"settings", "effective", "engine", "block_size_tokens"});
      if (blocks && bs && *blocks <= 100'000'000 && *bs <= 100'000) {
        p.kv_capacity_tokens = *blocks * *bs;
        p.found["kv_capacity_tokens"] = "the simulated engine's KV blocks times their size";
      }
    }
    // What attention is priced over, decided once (one fit, one definition):
    // as asked, else llama.cpp's occupancy when the server says it is
    // llama.cpp (or a simulated run used it), else own contexts.
    if (!decided) {
      const auto* a = rundir::json_path(run, {"settings", "effective", "engine", "attention"});
      if (!attention.empty()) {
        decided = engine::parse_attention_span(attention);
        p.found["attention"] = "as asked (--attention)";
      } else if (a && a->is_string() && *a == "occupancy") {
        decided = engine::AttentionSpan::kOccupancy;
        p.found["attention"] = "occupancy: the simulated engine's";
      } else {
        decided = engine::AttentionSpan::kOwnContext;
        p.found["attention"] = "own: each sequence's context (vLLM's paged attention)";
      }
      if (*decided == engine::AttentionSpan::kOccupancy && !ro.batch_cap) {
        decided = engine::AttentionSpan::kOwnContext;
        p.found["attention"] = "own: occupancy needs the slots (the batch cap), which were not found";
      }
      p.attention = *decided;
    }
    ro.attention = *decided;
    if (ro.attention == engine::AttentionSpan::kOccupancy && !ro.batch_cap) {
      log << fmt::format("  {}: left out (its slots are not known, and the fit is over occupancy)\n",
                         dir.string());
      continue;
    }
    const auto rec = reconstruct_steps(records, ro);
    clusters += rec.clusters;
    pending += rec.left_out_pending;
    multi += rec.left_out_multi_token;
    if (rec.max_batch_seen > max_batch_seen) {
      max_batch_seen = rec.max_batch_seen;
      cap_reached = rec.cap_reached;
    } else if (rec.max_batch_seen == max_batch_seen) {
      cap_reached |= rec.cap_reached;
    }
    log << fmt::format("  {}: {} requests, {} periods seen, {} kept\n", dir.string(), rec.requests,
                       rec.clusters, rec.steps.size());
    steps.insert(steps.end(), rec.steps.begin(), rec.steps.end());
  }
  FitOptions fo;
  fo.decode_curve = decode_cost != "linear";
  const CostFit fit = fit_step_costs(steps, runs.front().string(), fo);
  p.coef = fit.coef;
  p.decode_curve = fit.curve;
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
  if (!p.kv_capacity_tokens && counters.kv_estimates.size() >= 3) {
    auto& e = counters.kv_estimates;
    const double median = percentile_of(e, 0.5);
    const double lo = percentile_of(e, 0.1), hi = percentile_of(e, 0.9);
    if (median >= 1 && median <= 1e12) {
      p.kv_capacity_tokens = static_cast<std::uint64_t>(std::llround(median));
      p.found["kv_capacity_tokens"] = fmt::format(
          "the server's counters: the tokens its running requests held over its KV usage "
          "(kv_cache_usage), the median of {} scrapes (10th-90th percentile {:.0f}-{:.0f}); paged "
          "servers round each request up to whole blocks, so this reads low by up to a block per request",
          e.size(), lo, hi);
    }
  }
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
