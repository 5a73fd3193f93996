// Hardware counters through perf_event_open, as an extra beside the timing
// probes. Events are named as perf names them: the generic ones (cycles,
// instructions, cache-references, cache-misses, ...) always, and with
// libpfm4 (TOKENSCOPE_HAVE_LIBPFM) every event of the PMU libpfm4 detects,
// PMU::EVENT:UMASK as `perf list` and libpfm4's showevtinfo spell them. On
// VMs where the hypervisor hides the PMU (these machines) opening fails and
// the group reports itself unsupported with the reason; callers print that
// and carry on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope::probe {

// One event, encoded for perf_event_open.
struct EventSpec {
  std::string name;      // as asked for
  std::string encoding;  // canonical spelling (libpfm4's, or perf's generic name)
  std::string source;    // "generic", "raw" or "libpfm4"
  std::string role;      // "sharing" for sharing_event(), else empty
  std::uint32_t type = 0;
  std::uint64_t config = 0;
  std::uint64_t config1 = 0;
  std::uint64_t config2 = 0;
};

// True when this binary resolves event names through libpfm4.
bool have_libpfm();

// Resolves one event name. Throws UsageError naming the event and what was
// expected when it does not resolve.
EventSpec resolve_event(const std::string& name);

// The event that counts loads served by another core's modified line (the
// HITM that perf c2c looks for), for the PMU libpfm4 detected: Intel's
// MEM_LOAD_*_L3_HIT_RETIRED:XSNP_HITM (XSNP_FWD from Sapphire Rapids), AMD's
// data-cache fills from another core's cache (Zen 2-4; these include fills
// from L3, so they approximate). None without libpfm4 or on other PMUs.
std::optional<EventSpec> sharing_event();

// cycles, instructions, cache-references, cache-misses and sharing_event().
std::vector<EventSpec> default_events();

// PMUs libpfm4 finds on this machine and their events (`probe events`).
// libpfm4 detects the CPU once per process; LIBPFM_FORCE_PMU=NAME in the
// environment makes it take another model (how the tests check the choice).
struct PmuEvents {
  std::string pmu;
  std::string description;
  bool is_default = false;
  bool core = false;  // a core PMU (per-thread counting); uncore and RAPL PMUs count system-wide only
  int event_count = 0;
  std::vector<std::string> events;  // EVENT or EVENT:UMASK, filled on request
};
std::vector<PmuEvents> list_pmus(bool with_events, const std::string& only_pmu = "");

struct CounterReading {
  std::string name;
  std::uint64_t value = 0;      // scaled to the whole time enabled when multiplexed
  double running_fraction = 1;  // time counting / time enabled (below 1: multiplexed; 0: never counted)
};

// Counts the given events for the calling process (all its threads,
// including ones created after start()).
class PerfCounters {
 public:
  explicit PerfCounters(std::vector<EventSpec> events = default_events());
  ~PerfCounters();
  PerfCounters(const PerfCounters&) = delete;
  PerfCounters& operator=(const PerfCounters&) = delete;

  bool supported() const { return !fds_.empty(); }
  const std::string& unsupported_reason() const { return reason_; }
  const std::vector<EventSpec>& events() const { return events_; }
  void start();
  std::vector<CounterReading> stop();

 private:
  std::vector<EventSpec> events_;
  std::vector<int> fds_;
  std::string reason_;
};

nlohmann::json to_json(const std::vector<CounterReading>& readings);
nlohmann::json to_json(const std::vector<EventSpec>& events);

// Counter totals of a probe's variants, summed over its repetitions, in the
// JSON shape every probe writes: {"events": [...], "unsupported": reason}
// where the PMU is not visible, else {"events", "unit", "variants":
// [{"name", "totals": {event: count}, "per_unit": {event: count / units}}]}.
class CounterTotals {
 public:
  // unsupported: why nothing was counted ("" when counting worked).
  CounterTotals(std::vector<EventSpec> events, std::string unsupported, std::vector<std::string> variants);
  CounterTotals(const PerfCounters& counters, std::vector<std::string> variants)
      : CounterTotals(counters.events(), counters.supported() ? "" : counters.unsupported_reason(),
                      std::move(variants)) {}
  // Adds one repetition's readings to a variant; readings of other events are ignored.
  void add(std::size_t variant, const std::vector<CounterReading>& readings);
  // units: the work of one variant over all repetitions (increments, positions).
  nlohmann::json to_json(const std::string& unit, double units) const;

 private:
  std::vector<EventSpec> events_;
  std::string unsupported_;
  std::vector<std::string> variants_;
  std::vector<std::vector<double>> totals_;  // [variant][event]
};
// The table of counters_json's "per_unit" values, or the line saying why
// there are none; "" when the JSON holds neither.
std::string format_counters(const nlohmann::json& counters, const std::string& indent);

}  // namespace tokenscope::probe
