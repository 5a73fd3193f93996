#include "bench/run_observe.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "observe/gpu_collector.h"
#include "observe/system_collectors.h"

namespace tokenscope::bench {
RunObserver::RunObserver(const BenchSettings& o, const net::Endpoint& target,
                         const net::ClientOptions& client, bool in_process,
                         const std::filesystem::path& out_dir, const Clock& clock, std::ostream& log,
                         std::function<void(const observe::Observation&)> on_sample)
    : observer_(std::make_unique<observe::Observer>(out_dir / "samples.jsonl", clock, log)) {
  observer_->set_listener(std::move(on_sample));
  const Nanos interval = seconds_to_nanos(o.scrape_interval_s);
  // A scrape may take twice the interval, within [2 s, 10 s] (Prometheus's
  // default timeout is 10 s): a hung /metrics costs the final read at most that.
  const double timeout_s = std::clamp(2 * o.scrape_interval_s, 2.0, 10.0);
  limits_.max_series = o.scrape_max_series;
  limits_.canonical.max_label_sets = o.scrape_max_label_sets;
  limits_.canonical.max_bucket_bounds = o.scrape_max_bucket_bounds;
  const observe::ScrapeLimits limits = limits_;
  observer_->set_samples_bytes_per_hour(
      static_cast<std::uint64_t>(std::llround(o.samples_max_mib_per_hour * 1024 * 1024)));
  auto add_scrape = [&](const std::string& source, const std::string& url, bool optional) {
    std::unique_ptr<observe::ScrapeCollector> c;
    try {
      c = std::make_unique<observe::ScrapeCollector>(source, url, client, timeout_s, limits);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("--scrape / --gpu-sampler {}: {}", quote_input(url), e.what()));
    }
    scrapes_.emplace_back(source, c.get());
    observe::CollectorOptions co;
    co.interval_ns = interval;
    co.optional = optional;
    co.description = url;
    observer_->add(std::move(c), co);
  };
  if (!o.no_scrape) {
    if (o.scrape_urls.empty()) {
      // The target's own /metrics: the in-process simulator always has one;
      // a remote server may not (llama-server without --metrics): one note.
      add_scrape("server", observe::default_metrics_url(target), !in_process);
      server_sources_.push_back("server");
    } else {
      for (std::size_t i = 0; i < o.scrape_urls.size(); ++i) {
        const std::string source = o.scrape_urls.size() == 1 ? "server" : fmt::format("server{}", i + 1);
        add_scrape(source, o.scrape_urls[i], false);
        server_sources_.push_back(source);
      }
    }
  }
  for (std::size_t i = 0; i < o.gpu_sampler_urls.size(); ++i)
    add_scrape(o.gpu_sampler_urls.size() == 1 ? "gpu" : fmt::format("gpu{}", i + 1), o.gpu_sampler_urls[i],
               false);
  auto add_measured = [&](std::unique_ptr<observe::MeasuredCollector> c, std::string description,
                          bool quiet = false) {
    measured_.emplace_back(c->source(), c.get());
    observe::CollectorOptions co;
    co.interval_ns = interval;
    co.description = std::move(description);
    co.quiet_unavailable = quiet;
    observer_->add(std::move(c), co);
  };
  // This machine's GPUs: for a server on this machine (or the in-process
  // simulator's host); a DCGM exporter stands for a remote server's GPUs.
  if (!o.no_gpu && o.gpu_sampler_urls.empty())
    add_measured(std::make_unique<observe::GpuCollector>(), "NVML on this machine", /*quiet=*/true);
  if (!o.no_host) add_measured(std::make_unique<observe::HostCollector>(), "/proc of this machine");
  if (o.server_pid > 0)
    add_measured(std::make_unique<observe::ProcessCollector>(o.server_pid),
                 fmt::format("/proc/{}", o.server_pid));
  if (o.server_pid > 0 || !o.cgroup.empty()) {
    observe::CgroupTarget t;
    t.directory = o.cgroup;
    t.pid = o.server_pid;
    auto c = std::make_unique<observe::CgroupCollector>(t);
    cgroup_ = c.get();
    add_measured(std::move(c),
                 o.cgroup.empty() ? fmt::format("the cgroup v2 of process {}", o.server_pid) : o.cgroup);
  }
  observer_->start();
}

RunObserver::~RunObserver() {
  try {
    stop();
  } catch (...) {
  }
}

void RunObserver::stop(bool final_read) {
  observer_->stop(final_read);
}

nlohmann::json RunObserver::report() const {
  for (const auto& [source, c] : scrapes_) {
    const auto st = c->stats();
    nlohmann::json rejected = nlohmann::json::array();
    for (const auto& r : st.first_rejected) rejected.push_back({{"line", r.line}, {"reason", r.reason}});
    observer_->annotate(source, {{"url", c->url()},
                                 {"engine", observe::engine_name(st.engine)},
                                 {"series", st.series},
                                 {"bytes", st.bytes},
                                 {"rejected_lines", st.rejected_lines},
                                 {"first_rejected", rejected},
                                 {"limits",
                                  {{"max_series", limits_.max_series},
                                   {"max_label_sets", limits_.canonical.max_label_sets},
                                   {"max_bucket_bounds", limits_.canonical.max_bucket_bounds},
                                   {"most_series", st.most_series},
                                   {"scrapes_over_series_limit", st.scrapes_over_series_limit},
                                   {"series_dropped", st.series_dropped},
                                   {"canonical_label_sets_dropped", st.canonical_label_sets_dropped},
                                   {"canonical_histograms_dropped", st.canonical_histograms_dropped}}}});
  }
  for (const auto& [source, c] : measured_) observer_->annotate(source, {{"notes", c->notes()}});
  if (cgroup_ && !cgroup_->directory().empty()) {
    // The quotas in force: as found at the first read, and again now when they changed during the run.
    nlohmann::json limits = cgroup_->limits(), now = observe::cgroup_limits(cgroup_->directory());
    nlohmann::json a = {{"directory", cgroup_->directory()}, {"limits", limits}};
    if (now != limits) a["limits_at_end"] = std::move(now);
    observer_->annotate("cgroup", a);
  }
  return observer_->report();
}

nlohmann::json RunObserver::server() const {
  // Sums over the server sources (several replicas behind one router).
  std::vector<const observe::SeriesTracker*> trackers;
  nlohmann::json engines = nlohmann::json::array();
  for (const auto& name : server_sources_) {
    const auto* t = observer_->tracker(name);
    if (!t || t->observations() < 2) continue;
    trackers.push_back(t);
    for (const auto& [source, c] : scrapes_)
      if (source == name) engines.push_back(observe::engine_name(c->stats().engine));
  }
  if (trackers.empty()) return nullptr;
  nlohmann::json out = observe::server_view(trackers);
  out["sources"] = server_sources_;
  out["engines"] = engines;
  return out;
}

nlohmann::json RunObserver::hit_rate_over_time(Nanos epoch) const {
  for (const auto& name : server_sources_) {
    const auto* t = observer_->tracker(name);
    if (!t || t->observations() < 2) continue;
    nlohmann::json points = nlohmann::json::array();
    for (const auto& [ts, rate] : t->hit_rate_points()) points.push_back({nanos_to_s(ts - epoch), rate});
    return {
        {"source", name},
        {"phase", "prefill"},
        {"points", points},
        {"decode",
         "none: decode steps never look up the prefix cache (only a prompt's blocks are looked up, when it "
         "is scheduled), so there is no decode hit rate to report"}};
  }
  return nullptr;
}

const observe::SeriesTracker* RunObserver::queue_tracker() const {
  if (server_sources_.size() != 1) return nullptr;
  const auto* t = observer_->tracker(server_sources_.front());
  return t && t->observations() >= 2 && !t->running_points().empty() ? t : nullptr;
}

std::optional<ServerCounters> RunObserver::server_counters() const {
  const auto s = server();
  if (s.is_null()) return std::nullopt;
  ServerCounters c;
  auto u = [&](const char* k) -> std::optional<std::uint64_t> {
    if (s[k].is_null()) return std::nullopt;
    return static_cast<std::uint64_t>(std::llround(s[k].get<double>()));
  };
  c.prefix_cache_queries_tokens = u("prefix_cache_queries_tokens");
  c.prefix_cache_hits_tokens = u("prefix_cache_hits_tokens");
  c.preemptions_total = u("preemptions");
  if (s["kv_cache_usage_max"].is_number() && std::isfinite(s["kv_cache_usage_max"].get<double>()))
    c.kv_cache_usage_peak = s["kv_cache_usage_max"].get<double>();
  if (!c.prefix_cache_queries_tokens && !c.prefix_cache_hits_tokens && !c.preemptions_total &&
      !c.kv_cache_usage_peak)
    return std::nullopt;
  return c;
}

}  // namespace tokenscope::bench
