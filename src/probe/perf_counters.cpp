#include "probe/perf_counters.h"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#ifdef TOKENSCOPE_HAVE_LIBPFM
#include "probe/pfm_events.h"
#endif

namespace tokenscope::probe {

namespace {

// perf's generic hardware event names (`perf list hw`).
struct Generic {
  const char* name;
  std::uint64_t config;
};
constexpr Generic kGeneric[] = {
    {"cycles", PERF_COUNT_HW_CPU_CYCLES},
    {"cpu-cycles", PERF_COUNT_HW_CPU_CYCLES},
    {"instructions", PERF_COUNT_HW_INSTRUCTIONS},
    {"cache-references", PERF_COUNT_HW_CACHE_REFERENCES},
    {"cache-misses", PERF_COUNT_HW_CACHE_MISSES},
    {"branches", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-instructions", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    {"branch-misses", PERF_COUNT_HW_BRANCH_MISSES},
    {"bus-cycles", PERF_COUNT_HW_BUS_CYCLES},
    {"stalled-cycles-frontend", PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    {"stalled-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    {"ref-cycles", PERF_COUNT_HW_REF_CPU_CYCLES},
};

// Candidates for sharing_event(), newest PMU first; libpfm4 accepts each only
// on the PMUs that have it.
constexpr const char* kSharingCandidates[] = {
    "MEM_LOAD_L3_HIT_RETIRED:XSNP_FWD",         // Sapphire Rapids and later
    "MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM",        // Skylake .. Ice Lake
    "MEM_LOAD_UOPS_L3_HIT_RETIRED:XSNP_HITM",   // Haswell, Broadwell
    "MEM_LOAD_UOPS_LLC_HIT_RETIRED:XSNP_HITM",  // Sandy Bridge, Ivy Bridge
    "ANY_DATA_CACHE_FILLS_FROM_SYSTEM:LOCAL_CCX:NEAR_CACHE_NEAR_FAR:FAR_CACHE_NEAR_FAR",  // Zen 4
    "ANY_DATA_CACHE_FILLS_FROM_SYSTEM:INT_CACHE:EXT_CACHE_LCL:EXT_CACHE_RMT",             // Zen 3
    "DATA_CACHE_REFILLS_FROM_SYSTEM:LS_MABRESP_LCL_CACHE:LS_MABRESP_RMT_CACHE",           // Zen 2
};

bool parse_raw(const std::string& name, std::uint64_t* config) {
  // perf's raw spelling: rNNN, NNN hexadecimal.
  if (name.size() < 2 || name.size() > 17 || name[0] != 'r') return false;
  std::uint64_t v = 0;
  for (std::size_t i = 1; i < name.size(); ++i) {
    const char c = name[i];
    int d = 0;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = v << 4 | static_cast<std::uint64_t>(d);
  }
  *config = v;
  return true;
}

int open_counter(const EventSpec& e) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = e.type;
  attr.config = e.config;
  attr.config1 = e.config1;
  attr.config2 = e.config2;
  attr.disabled = 1;
  attr.inherit = 1;  // threads created later count too
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

}  // namespace

bool have_libpfm() {
#ifdef TOKENSCOPE_HAVE_LIBPFM
  return true;
#else
  return false;
#endif
}

EventSpec resolve_event(const std::string& name) {
  for (const auto& g : kGeneric)
    if (name == g.name) return {name, g.name, "generic", "", PERF_TYPE_HARDWARE, g.config, 0, 0};
  if (std::uint64_t raw = 0; parse_raw(name, &raw)) return {name, name, "raw", "", PERF_TYPE_RAW, raw, 0, 0};
  std::string why;
#ifdef TOKENSCOPE_HAVE_LIBPFM
  EventSpec e;
  if (name.size() <= 512 && pfm::encode(name, &e, &why)) return e;
  if (name.size() > 512) why = "longer than 512 characters";
  throw UsageError("--events: " + quote_input(name) + " is not an event of this CPU (" + why +
                   "); `tokenscope probe events` lists them");
#else
  why = "this build has no libpfm4, so only perf's generic names and rNNN raw codes resolve";
  throw UsageError("--events: " + quote_input(name) + " is not a generic perf event (" + why + ")");
#endif
}

std::optional<EventSpec> sharing_event() {
#ifdef TOKENSCOPE_HAVE_LIBPFM
  for (const char* c : kSharingCandidates) {
    EventSpec e;
    std::string why;
    if (pfm::encode(c, &e, &why)) {
      e.role = "sharing";
      return e;
    }
  }
#endif
  return std::nullopt;
}

std::vector<EventSpec> default_events() {
  std::vector<EventSpec> out;
  for (const char* n : {"cycles", "instructions", "cache-references", "cache-misses"})
    out.push_back(resolve_event(n));
  if (auto s = sharing_event()) out.push_back(*s);
  return out;
}

std::vector<PmuEvents> list_pmus(bool with_events, const std::string& only_pmu) {
#ifdef TOKENSCOPE_HAVE_LIBPFM
  return pfm::pmus(with_events, only_pmu);
#else
  (void)with_events;
  (void)only_pmu;
  return {};
#endif
}

PerfCounters::PerfCounters(std::vector<EventSpec> events) : events_(std::move(events)) {
  for (const auto& e : events_) {
    const int fd = open_counter(e);
    if (fd < 0) {
      reason_ = "perf_event_open(" + e.name + "): " + std::strerror(errno);
      if (errno == EACCES || errno == EPERM) reason_ += " (see /proc/sys/kernel/perf_event_paranoid)";
      for (int f : fds_) close(f);
      fds_.clear();
      return;
    }
    fds_.push_back(fd);
  }
}

PerfCounters::~PerfCounters() {
  for (int f : fds_) close(f);
}

void PerfCounters::start() {
  for (int f : fds_) {
    ioctl(f, PERF_EVENT_IOC_RESET, 0);
    ioctl(f, PERF_EVENT_IOC_ENABLE, 0);
  }
}

std::vector<CounterReading> PerfCounters::stop() {
  std::vector<CounterReading> out;
  for (std::size_t i = 0; i < fds_.size(); ++i) {
    ioctl(fds_[i], PERF_EVENT_IOC_DISABLE, 0);
    std::uint64_t v[3] = {0, 0, 0};  // value, time enabled, time running
    if (read(fds_[i], v, sizeof v) != static_cast<ssize_t>(sizeof v)) continue;
    CounterReading r;
    r.name = events_[i].name;
    r.value = v[0];
    if (v[1] > 0 && v[2] > 0 && v[2] < v[1]) {
      r.running_fraction = static_cast<double>(v[2]) / static_cast<double>(v[1]);
      r.value = static_cast<std::uint64_t>(static_cast<double>(v[0]) / r.running_fraction);
    } else if (v[1] > 0 && v[2] == 0) {
      r.running_fraction = 0;  // never scheduled on the PMU: no count
    }
    out.push_back(r);
  }
  return out;
}

nlohmann::json to_json(const std::vector<CounterReading>& readings) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& r : readings) {
    j[r.name] = r.value;
    if (r.running_fraction < 1) j["running_fraction"][r.name] = r.running_fraction;
  }
  return j;
}

nlohmann::json to_json(const std::vector<EventSpec>& events) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : events)
    a.push_back({{"name", e.name},
                 {"encoding", e.encoding},
                 {"source", e.source},
                 {"role", e.role},
                 {"type", e.type},
                 {"config", e.config},
                 {"config1", e.config1},
                 {"config2", e.config2}});
  return a;
}

CounterTotals::CounterTotals(std::vector<EventSpec> events, std::string unsupported,
                             std::vector<std::string> variants)
    : events_(std::move(events)),
      unsupported_(std::move(unsupported)),
      variants_(std::move(variants)),
      totals_(variants_.size(), std::vector<double>(events_.size(), 0.0)) {}

void CounterTotals::add(std::size_t variant, const std::vector<CounterReading>& readings) {
  if (variant >= totals_.size()) return;
  for (const auto& r : readings)
    for (std::size_t e = 0; e < events_.size(); ++e)
      if (events_[e].name == r.name) totals_[variant][e] += static_cast<double>(r.value);
}

nlohmann::json CounterTotals::to_json(const std::string& unit, double units) const {
  nlohmann::json j = nlohmann::json::object();
  j["events"] = probe::to_json(events_);
  if (!unsupported_.empty()) {
    j["unsupported"] = unsupported_;
    return j;
  }
  j["unit"] = unit;
  auto& vs = j["variants"] = nlohmann::json::array();
  for (std::size_t v = 0; v < variants_.size(); ++v) {
    nlohmann::json totals = nlohmann::json::object(), per = nlohmann::json::object();
    for (std::size_t e = 0; e < events_.size(); ++e) {
      totals[events_[e].name] = totals_[v][e];
      per[events_[e].name] = units > 0 ? totals_[v][e] / units : 0.0;
    }
    vs.push_back({{"name", variants_[v]}, {"totals", totals}, {"per_unit", per}});
  }
  return j;
}

std::string format_counters(const nlohmann::json& c, const std::string& indent) {
  if (!c.is_object()) return "";
  if (c.contains("unsupported"))
    return indent + "perf counters: not available (" + c["unsupported"].get<std::string>() + ")\n";
  if (!c.contains("variants") || !c.contains("events")) return "";
  std::string out = indent + "perf counters per " + c.value("unit", std::string("unit")) +
                    " (all threads, all repetitions)\n";
  std::size_t width = 7;
  for (const auto& v : c["variants"]) width = std::max(width, v["name"].get<std::string>().size());
  out += indent + fmt::format("  {:<{}}", "variant", width);
  for (const auto& e : c["events"])
    out += fmt::format("  {:>16}", e.value("role", "") == "sharing"
                                       ? std::string("sharing*")
                                       : e["name"].get<std::string>().substr(0, 16));
  out += "\n";
  for (const auto& v : c["variants"]) {
    out += indent + fmt::format("  {:<{}}", v["name"].get<std::string>(), width);
    for (const auto& e : c["events"]) {
      const std::string n = e["name"];
      out += v["per_unit"].contains(n) ? fmt::format("  {:>16.4f}", v["per_unit"][n].get<double>())
                                       : fmt::format("  {:>16}", "-");
    }
    out += "\n";
  }
  for (const auto& e : c["events"])
    if (e.value("role", "") == "sharing")
      out += indent + "  * sharing = " + e["encoding"].get<std::string>() + "\n";
  return out;
}

}  // namespace tokenscope::probe
