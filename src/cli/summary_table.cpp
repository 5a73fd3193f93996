#include "cli/summary_table.h"

#include <fmt/format.h>

#include <algorithm>

#include <cmath>

#include "core/error.h"
#include "core/summary.h"
#include "rundir/run_set.h"

namespace tokenscope::cli {

std::string format_ms_cell(double ms, std::size_t width) {
  // Milliseconds with 2, 1 or 0 decimals; then seconds ("s"), minutes ("m")
  // and hours ("h"): the first form that leaves a space before the value.
  const std::size_t room = width > 1 ? width - 1 : 1;
  for (int d = 2; d >= 0; --d) {
    std::string t = fmt::format("{:.{}f}", ms, d);
    if (t.size() <= room) return t;
  }
  for (const auto& [unit, per] : {std::pair{"s", 1e3}, {"m", 60e3}, {"h", 3600e3}})
    for (int d = 2; d >= 0; --d) {
      std::string t = fmt::format("{:.{}f}{}", ms / per, d, unit);
      if (t.size() <= room) return t;
    }
  return fmt::format("{:.0f}h", ms / 3600e3);
}

namespace {
constexpr std::size_t kCell = 10;

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  return format_ms_cell(v.get<double>(), kCell);
}

std::string num(const nlohmann::json& v, int decimals = 2) {
  if (v.is_null()) return "-";
  return fmt::format("{:.{}f}", v.get<double>(), decimals);
}
std::string pct(const nlohmann::json& v) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) return "n/a";
  return fmt::format("{:.2f}%", v.get<double>() * 100.0);
}
}  // namespace

void print_fleet(std::ostream& os, const nlohmann::json& fleet) {
  if (!fleet.is_object() || !fleet.contains("per_replica")) return;
  os << fmt::format("fleet: {} replicas, router {}\n", fleet["replicas"].get<std::uint64_t>(),
                    fleet["router"].get<std::string>());
  const bool pooled = fleet.contains("pools") && fleet["pools"].is_array();
  if (pooled) {
    for (const auto& p : fleet["pools"])
      os << fmt::format("  pool {}: {} x {} (TP {}), {} GPUs{}\n", display_text(p["name"].get<std::string>()),
                        p["count"].get<std::uint64_t>(), display_text(p["gpu"].get<std::string>()),
                        p["tensor_parallel"].get<std::uint64_t>(), p["gpus"].get<std::uint64_t>(),
                        p["gpu_cost_per_hour"].is_number()
                            ? fmt::format(", ${:.2f}/GPU-hour", p["gpu_cost_per_hour"].get<double>())
                            : std::string());
    os << fmt::format("  {} GPUs in all{}\n", fleet["gpus"].get<std::uint64_t>(),
                      fleet["cost_per_hour"].is_number()
                          ? fmt::format(", ${:.2f} an hour", fleet["cost_per_hour"].get<double>())
                          : std::string());
  }
  const bool split = fleet.contains("disaggregation") && fleet["disaggregation"].is_object();
  if (split) {
    const auto& d = fleet["disaggregation"];
    const auto ms = [&](const char* a, const char* b) {
      return d[a].is_object() && d[a][b].is_number() ? fmt::format("{:.2f}", d[a][b].get<double>())
                                                     : std::string("-");
    };
    os << fmt::format(
        "  disaggregated: {} prefill, {} decode (decode router {}); KV link {} GB/s, {} us: {} transfers, "
        "{:.2f} GB, transfer p50 {} ms, p99 {} ms (waiting for the link p99 {} ms)\n",
        d["prefill_replicas"].get<std::uint64_t>(), d["decode_replicas"].get<std::uint64_t>(),
        display_text(d["decode_router"].get<std::string>()), d["kv_link_gb_s"].get<double>(),
        d["kv_link_latency_us"].get<double>(), d["transfers"].get<std::uint64_t>(),
        d["transfer_bytes"].get<double>() / 1e9, ms("transfer_ms", "p50"), ms("transfer_ms", "p99"),
        ms("link_wait_ms", "p99"));
  }
  os << fmt::format("  {:>7} {:>9} {:>12} {:>12} {:>12} {:>10} {:>11}{}\n", "replica", "requests",
                    "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "out tok/s", "prefix hits",
                    pooled ? "  pool" : (split ? "  role" : ""));
  const auto num = [](const nlohmann::json& s, const char* a, const char* b) {
    const auto* v = s.contains(a) && s[a].is_object() && s[a].contains(b) ? &s[a][b] : nullptr;
    return v && v->is_number() ? fmt::format("{:.1f}", v->get<double>()) : std::string("-");
  };
  for (const auto& r : fleet["per_replica"]) {
    const auto& s = r["summary"];
    const auto tps = s.contains("output_token_throughput_tps") && s["output_token_throughput_tps"].is_number()
                         ? fmt::format("{:.0f}", s["output_token_throughput_tps"].get<double>())
                         : std::string("-");
    const auto hits = r["prefix_cache_hit_rate"].is_number()
                          ? fmt::format("{:.1f}%", 100 * r["prefix_cache_hit_rate"].get<double>())
                          : std::string("-");
    os << fmt::format("  {:>7} {:>9} {:>12} {:>12} {:>12} {:>10} {:>11}", r["replica"].get<std::uint64_t>(),
                      r["routed"].get<std::uint64_t>(), num(s, "ttft_ms", "p50"), num(s, "ttft_ms", "p99"),
                      num(s, "tpot_ms", "p50"), tps, hits);
    if (pooled && r.contains("pool") && r["pool"].is_string())
      os << "  " << display_text(r["pool"].get<std::string>());
    if (split && r.contains("role") && r["role"].is_string()) os << "  " << r["role"].get<std::string>();
    os << "\n";
  }
}

namespace {

// sim --plan over pools: a row per mix tried, and the cheapest.
void print_pool_plan(std::ostream& os, const nlohmann::json& plan) {
  const bool priced = plan.value("objective", "") == "cost_per_hour";
  std::string limits;
  for (const auto& p : plan["pools"])
    limits += fmt::format("{}{} up to {}", limits.empty() ? "" : ", ",
                          display_text(p["name"].get<std::string>()), p["max_count"].get<std::uint64_t>());
  os << fmt::format("plan: the {} mix of pools ({}; router {}) meeting every SLO\n",
                    priced ? "cheapest" : "fewest-GPU", limits,
                    display_text(plan["router"].get<std::string>()));
  // In the pools file's order (a JSON object's keys are sorted).
  const auto mix = [&](const nlohmann::json& counts) {
    std::string out;
    for (const auto& p : plan["pools"]) {
      const std::string name = p["name"].get<std::string>();
      if (counts.is_object() && counts.contains(name))
        out += fmt::format("{}{}={}", out.empty() ? "" : " ", display_text(name),
                           counts[name].get<std::uint64_t>());
    }
    return out;
  };
  const auto num = [](const nlohmann::json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-");
  };
  std::size_t width = 4;
  for (const auto& p : plan["points"]) width = std::max(width, mix(p["counts"]).size());
  os << fmt::format("  {:<{}} {:>5} {:>9} {:>11} {:>11} {:>8} {:>12} {:>12} {:>12}  {}\n", "mix", width,
                    "GPUs", priced ? "$/hour" : "", "goodput/s", "req/s", "failed", "TTFT p99 ms",
                    "TPOT p99 ms", "E2E p99 ms", "SLOs");
  for (const auto& p : plan["points"])
    os << fmt::format("  {:<{}} {:>5} {:>9} {:>11} {:>11} {:>8} {:>12} {:>12} {:>12}  {}\n", mix(p["counts"]),
                      width, p["gpus"].get<std::uint64_t>(), priced ? num(p["cost_per_hour"], "{:.2f}") : "",
                      num(p["goodput_rps"], "{:.2f}"), num(p["request_throughput_rps"], "{:.2f}"),
                      num(p["requests_failed"], "{:.0f}"), num(p["ttft_p99_ms"], "{:.1f}"),
                      num(p["tpot_p99_ms"], "{:.1f}"), num(p["e2e_p99_ms"], "{:.1f}"),
                      p["pass"].get<bool>() ? "met" : "missed");
  if (plan.value("interrupted", false))
    os << fmt::format("  interrupted after {} fleets: no fleet chosen\n", plan["points"].size());
  else if (plan["cheapest_counts"].is_object())
    os << fmt::format("  {}: {}, {} GPUs{}\n", priced ? "cheapest" : "fewest GPUs",
                      mix(plan["cheapest_counts"]), plan["smallest_gpus"].get<std::uint64_t>(),
                      plan["cheapest_cost_per_hour"].is_number()
                          ? fmt::format(", ${:.2f} an hour", plan["cheapest_cost_per_hour"].get<double>())
                          : std::string());
  else
    os << "  no mix of the pools met every SLO\n";
  if (!plan.value("monotone", true))
    os << "  note: a mix missed with at least as many replicas of every pool as one that met: the search "
          "assumes more replicas never miss, and may not have found the cheapest\n";
}

}  // namespace

void print_plan(std::ostream& os, const nlohmann::json& plan) {
  if (!plan.is_object() || !plan.contains("points")) return;
  if (plan.contains("pools")) {
    print_pool_plan(os, plan);
    return;
  }
  const bool cost = plan["gpu_cost_per_hour"].is_number();
  os << fmt::format("plan: the fewest replicas ({} GPUs each, router {}) meeting every SLO\n",
                    plan["gpus_per_replica"].get<std::uint64_t>(),
                    display_text(plan["router"].get<std::string>()));
  os << fmt::format("  {:>8} {:>5} {:>9} {:>11} {:>11} {:>8} {:>12} {:>12} {:>12}  {}\n", "replicas", "GPUs",
                    cost ? "$/hour" : "", "goodput/s", "req/s", "failed", "TTFT p99 ms", "TPOT p99 ms",
                    "E2E p99 ms", "SLOs");
  const auto num = [](const nlohmann::json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-");
  };
  bool failures = false;
  for (const auto& p : plan["points"]) {
    failures |= p.value("requests_failed", 0) > 0;
    os << fmt::format("  {:>8} {:>5} {:>9} {:>11} {:>11} {:>8} {:>12} {:>12} {:>12}  {}\n",
                      p["replicas"].get<std::uint64_t>(), p["gpus"].get<std::uint64_t>(),
                      cost ? num(p["cost_per_hour"], "{:.2f}") : "", num(p["goodput_rps"], "{:.2f}"),
                      num(p["request_throughput_rps"], "{:.2f}"), num(p["requests_failed"], "{:.0f}"),
                      num(p["ttft_p99_ms"], "{:.1f}"), num(p["tpot_p99_ms"], "{:.1f}"),
                      num(p["e2e_p99_ms"], "{:.1f}"), p["pass"].get<bool>() ? "met" : "missed");
  }
  if (plan.value("interrupted", false))
    os << fmt::format("  interrupted after {} fleets: no fleet chosen\n", plan["points"].size());
  else if (plan["smallest_replicas"].is_number())
    os << fmt::format("  smallest: {} replicas, {} GPUs\n", plan["smallest_replicas"].get<std::uint64_t>(),
                      plan["smallest_gpus"].get<std::uint64_t>());
  else
    os << fmt::format("  no fleet of up to {} replicas met every SLO\n",
                      plan["max_replicas"].get<std::uint64_t>());
  if (failures)
    os << "  note: failed requests (rejected: too long for a replica) count as missing every SLO target, "
          "whatever "
          "the replicas\n";
  if (!plan.value("monotone", true))
    os << "  note: a fleet missed with more replicas than one that met: the search assumes more replicas "
          "never "
          "miss, and may not have found the smallest\n";
}

void print_coupling(std::ostream& os, const nlohmann::json& coupling) {
  if (!coupling.is_object() || !coupling.contains("classes")) return;
  os << fmt::format("coupling: kappa = latency in the mix / alone ({:g}% intervals)\n",
                    100 * coupling.value("confidence", 0.95));
  for (const auto& [cls, metrics] : coupling["classes"].items()) {
    std::string line = fmt::format("  {:<12}", display_text(cls));
    for (const auto& [m, label] :
         {std::pair{"ttft_ms", "TTFT"}, std::pair{"tpot_ms", "TPOT"}, std::pair{"e2e_ms", "E2E"}})
      for (const char* q : {"p50", "p99"}) {
        const nlohmann::json k = metrics.contains(m) ? metrics[m][q] : nlohmann::json();
        const std::string name = fmt::format("{} {}", label, q);
        line += k.is_object() ? fmt::format("  {} {:.2f} [{:.2f}, {:.2f}]", name, k["kappa"].get<double>(),
                                            k["ci"][0].get<double>(), k["ci"][1].get<double>())
                              : fmt::format("  {} -", name);
      }
    os << line << "\n";
  }
}

namespace {
// A key of the summary, or null when it has none: a summary from outside (a
// run.json given to report) may lack keys, and nlohmann's const operator[]
// on a missing key is undefined behaviour; a null read as a number throws
// json's type_error, which the report catches and names.
const nlohmann::json& summary_key(const nlohmann::json& s, const char* key) {
  static const nlohmann::json kNull;
  const auto it = s.find(key);
  return it == s.end() ? kNull : *it;
}
}  // namespace

void print_summary_table(std::ostream& os, const SummaryHeader& h, const nlohmann::json& s) {
  const std::string rule(92, '-');
  os << h.title << "\n";
  for (const auto& l : h.lines) os << "  " << l << "\n";
  os << rule << "\n";
  const std::uint64_t planned_cancels = s.value("requests_cancelled_planned", std::uint64_t{0});
  os << fmt::format(
      "{:<18}{} total, {} completed, {} failed{}\n", "requests",
      summary_key(s, "requests_total").get<std::uint64_t>(),
      summary_key(s, "requests_completed").get<std::uint64_t>(),
      summary_key(s, "requests_failed").get<std::uint64_t>(),
      planned_cancels ? fmt::format(", {} cancelled on purpose (--cancel)", planned_cancels) : "");
  os << fmt::format("{:<18}{:.2f} s; {:.2f} req/s, {:.1f} output tok/s\n", "duration",
                    summary_key(s, "duration_s").get<double>(),
                    summary_key(s, "request_throughput_rps").get<double>(),
                    summary_key(s, "output_token_throughput_tps").get<double>());
  if (summary_key(s, "duration_steady_s").get<double>() > 0)
    os << fmt::format("{:<18}{:.2f} s window, {:.2f} req/s (ramp-up and drain left out)\n", "steady state",
                      summary_key(s, "duration_steady_s").get<double>(),
                      summary_key(s, "request_throughput_steady_rps").get<double>());
  os << fmt::format("{:<18}prompt {}, output {}\n", "tokens",
                    summary_key(s, "prompt_tokens_total").get<std::uint64_t>(),
                    summary_key(s, "output_tokens_total").get<std::uint64_t>());
  if (!summary_key(s, "prefix_cache_queries_tokens").is_null() &&
      !summary_key(s, "prefix_cache_hits_tokens").is_null())
    os << fmt::format("{:<18}hit rate {} ({} of {} prompt tokens)\n", "prefix cache",
                      pct(summary_key(s, "prefix_cache_hit_rate")),
                      summary_key(s, "prefix_cache_hits_tokens").get<std::uint64_t>(),
                      summary_key(s, "prefix_cache_queries_tokens").get<std::uint64_t>());
  if (!summary_key(s, "preemptions_total").is_null() || !summary_key(s, "kv_cache_usage_peak").is_null())
    os << fmt::format("{:<18}{} preemptions, KV usage peak {}\n", "scheduler",
                      summary_key(s, "preemptions_total").is_null()
                          ? std::string("?")
                          : std::to_string(summary_key(s, "preemptions_total").get<std::uint64_t>()),
                      pct(summary_key(s, "kv_cache_usage_peak")));
  if (h.client_rows || summary_key(s, "requests_failed").get<std::uint64_t>() > 0) {
    std::string outcomes;
    for (const auto& [k, v] : summary_key(s, "requests_by_outcome").items())
      outcomes +=
          fmt::format("{}{} {}", outcomes.empty() ? "" : ", ", display_text(k), v.get<std::uint64_t>());
    if (!outcomes.empty()) os << fmt::format("{:<18}{}\n", "outcomes", outcomes);
    if (summary_key(s, "requests_warmup_excluded").get<std::uint64_t>() > 0)
      os << fmt::format("{:<18}{} requests in the warm-up window excluded\n", "warm-up",
                        summary_key(s, "requests_warmup_excluded").get<std::uint64_t>());
    if (s.contains("requests_without_usage") &&
        summary_key(s, "requests_without_usage").get<std::uint64_t>() > 0)
      os << fmt::format("{:<18}{} completed requests came without a usage count{}\n", "no usage",
                        summary_key(s, "requests_without_usage").get<std::uint64_t>(),
                        summary_key(s, "output_tokens_client_counted").get<std::uint64_t>() > 0
                            ? fmt::format(" ({} counted on the client with --tokenizer)",
                                          summary_key(s, "output_tokens_client_counted").get<std::uint64_t>())
                            : ": their output tokens count as 0; give --tokenizer to count them");
    if (s.value("inputs_total", std::uint64_t{0}) > 0)
      os << fmt::format("{:<18}{} inputs, {:.1f} per request; {:.1f} prompt tok/s\n", "pooling",
                        summary_key(s, "inputs_total").get<std::uint64_t>(),
                        summary_key(s, "inputs_per_request_mean").get<double>(),
                        s.value("input_token_throughput_tps", 0.0));
    if (s.value("audio_seconds_total", 0.0) > 0)
      os << fmt::format("{:<18}{:.1f} s of audio, {:.2f} s of audio per second\n", "audio",
                        summary_key(s, "audio_seconds_total").get<double>(),
                        s.value("audio_seconds_per_second", 0.0));
    if (s.value("requests_with_reasoning", std::uint64_t{0}) > 0)
      os << fmt::format("{:<18}{} completed requests carried reasoning, {} reasoning tokens\n", "reasoning",
                        summary_key(s, "requests_with_reasoning").get<std::uint64_t>(),
                        summary_key(s, "reasoning_tokens_total").get<std::uint64_t>());
    if (s.value("prompt_tokens_planned_total", std::uint64_t{0}) > 0) {
      const auto planned = summary_key(s, "prompt_tokens_planned_total").get<std::uint64_t>();
      const auto reported = summary_key(s, "prompt_tokens_planned_reported").get<std::uint64_t>();
      os << fmt::format(
          "{:<18}the server counted {} prompt tokens where {} were planned ({:+.2f}%), {} "
          "requests differ\n",
          "prompt lengths", reported, planned,
          100.0 * (static_cast<double>(reported) / static_cast<double>(planned) - 1),
          summary_key(s, "prompt_token_mismatches").get<std::uint64_t>());
    }
    if (summary_key(s, "output_token_mismatches").get<std::uint64_t>() > 0) {
      // Why they differ: the usage counts tokens, the client counts the events they came in.
      const auto usage = s.value("output_tokens_total", std::uint64_t{0});
      const auto events = s.value("output_tokens_client_counted", std::uint64_t{0});
      os << fmt::format("{:<18}{} requests where usage and the client's event count differ: {}\n",
                        "token check", summary_key(s, "output_token_mismatches").get<std::uint64_t>(),
                        token_check_reason(usage, events));
    }
    if (!summary_key(s, "goodput_rps").is_null()) {
      os << fmt::format("{:<18}{:.2f} req/s meeting every SLO\n", "goodput",
                        summary_key(s, "goodput_rps").get<double>());
      for (const auto& [cls, a] : summary_key(s, "slo_attainment").items()) {
        std::string parts;
        for (const char* m : {"ttft_ms", "tpot_ms", "e2e_ms", "ttfo_ms"}) {
          if (!a.contains(m)) continue;
          const auto& x = a[m];
          parts += fmt::format("  {} p{:g} {} <= {:g}: {}", m, a["percentile"].get<double>(), num(x["value"]),
                               x["target"].get<double>(), x["pass"].get<bool>() ? "pass" : "FAIL");
        }
        os << fmt::format("{:<18}{}: {:.1f}% met;{} => {}\n", "SLO", display_text(cls),
                          a["met_fraction"].get<double>() * 100, parts,
                          a["pass"].get<bool>() ? "PASS" : "FAIL");
      }
    }
  }
  os << fmt::format("{:<12}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n", "(ms)", "mean", "min", "p50",
                    "p90", "p95", "p99", "p99.9", "max");
  std::vector<std::pair<const char*, const char*>> rows = {
      {"ttft_ms", "TTFT"}, {"tpot_ms", "TPOT"}, {"itl_ms", "ITL"}, {"e2e_ms", "E2E"}};
  if (h.client_rows) {
    rows.insert(rows.begin() + 1, {"ttft_sched_ms", "TTFT sched"});
    rows.insert(rows.begin() + 4, {"icl_ms", "ICL"});
    rows.push_back({"send_lag_ms", "send lag"});
    if (summary_key(s, "queue_ms")["count"].get<std::uint64_t>() > 0) rows.push_back({"queue_ms", "queue"});
  }
  if (s.value("requests_with_reasoning", std::uint64_t{0}) > 0) {  // TTFO equals TTFT without reasoning
    rows.insert(rows.begin() + (h.client_rows ? 2 : 1), {"ttfo_ms", "TTFO"});
    rows.insert(rows.begin() + (h.client_rows ? 4 : 3), {"tpot_answer_ms", "TPOT answer"});
  }
  for (const auto& [key, label] : rows) {
    if (!s.contains(key)) continue;  // a run.json written before the key existed
    const auto& d = s[key];
    os << fmt::format("{:<12}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n", label, cell(d["mean"]),
                      cell(d["min"]), cell(d["p50"]), cell(d["p90"]), cell(d["p95"]), cell(d["p99"]),
                      cell(d["p99_9"]), cell(d["max"]));
  }
  os << rule << "\n";
}

void print_repeat_statistics(std::ostream& os, const nlohmann::json& statistics) {
  for (const auto& m : rundir::repeat_metrics()) {
    const auto it = statistics.find(m.key);
    if (it == statistics.end() || !it->is_object()) continue;
    const auto& st = *it;
    const auto ci = st.find("ci");
    os << fmt::format("  {:<30} {:>12.4g}  {}\n", m.key, st.value("mean", 0.0),
                      ci != st.end() && ci->is_array() && ci->size() == 2
                          ? fmt::format("[{:.4g}, {:.4g}]", (*ci)[0].get<double>(), (*ci)[1].get<double>())
                          : std::string("-"));
  }
}

}  // namespace tokenscope::cli
