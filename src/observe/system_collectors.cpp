#include "observe/system_collectors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace tokenscope::observe {
namespace {

// "/" → "" and "/tmp/x/" → "/tmp/x": paths are root + "/proc/...".
std::string path_prefix(std::string root) {
  while (!root.empty() && root.back() == '/') root.pop_back();
  return root;
}

std::string errno_text(const std::string& path, int err) {
  return path + ": " + std::strerror(err);
}

// A file that is not there, or a kernel that does not offer it (pressure
// files with PSI disabled answer EOPNOTSUPP).
bool is_missing(int err) {
  return err == ENOENT || err == EOPNOTSUPP || err == ENOTDIR;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void add(std::vector<Sample>& v, const std::string& name, double value, const Labels& labels = {}) {
  v.push_back({name, labels, value});
}

void add_pressure_raw(std::vector<Sample>& raw, const std::string& prefix, const Pressure& p, char sep) {
  const auto one = [&](const char* kind, const PressureLine& l) {
    const std::string base = prefix + sep + kind + sep;
    add(raw, base + "avg10", l.avg10);
    add(raw, base + "avg60", l.avg60);
    add(raw, base + "avg300", l.avg300);
    add(raw, base + "total_us", static_cast<double>(l.total_us));
  };
  if (p.some) one("some", *p.some);
  if (p.full) one("full", *p.full);
}

// Stamps the read at receipt; a failed read carries no series.
Observation finish(Observation& o, const Clock& clock, Nanos t0) {
  o.t_ns = clock.now_ns();
  o.rtt_ns = o.t_ns - t0;
  if (!o.error.empty() || !o.unavailable.empty()) {
    o.canonical.clear();
    o.raw.clear();
  }
  return std::move(o);
}

}  // namespace

int read_small_file(const std::string& path, std::string& out, std::size_t max_bytes) {
  out.clear();
  // O_NONBLOCK: a FIFO planted where a /proc file should be must not hang the
  // sampler (regular and /proc files ignore the flag).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno;
  std::size_t size = 0;
  int err = 0;
  for (;;) {
    if (out.size() < size + 4096) out.resize(std::max(out.size() * 2, size + 4096));
    const ssize_t n = ::read(fd, out.data() + size, out.size() - size);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (n == 0) break;
    size += static_cast<std::size_t>(n);
    if (size > max_bytes) {
      err = EFBIG;
      break;
    }
  }
  ::close(fd);
  out.resize(err ? 0 : size);
  return err;
}

// --- host

HostCollector::HostCollector(std::string root) : root_(path_prefix(std::move(root))) {}

Observation HostCollector::read(const Clock& clock) {
  Observation o;
  o.source = "host";
  const Nanos t0 = clock.now_ns();
  // A required file that cannot be read fails the read; an optional one
  // that is missing is noted once and left out.
  const auto load = [&](const std::string& path, bool optional) {
    const int err = read_small_file(path, buffer_);
    if (err == 0) return true;
    if (optional && is_missing(err)) {
      note_once(path + " is missing (" + std::strerror(err) + "): its series are left out");
    } else {
      o.error = errno_text(path, err);
    }
    return false;
  };
  try {
    const std::string stat_path = root_ + "/proc/stat";
    if (!load(stat_path, false)) return finish(o, clock, t0);
    const ProcStat st = parse_proc_stat(buffer_, stat_path);
    const CpuTimes& c = st.cpu;
    const std::pair<const char*, std::uint64_t> ticks[] = {
        {"user", c.user},       {"nice", c.nice},
        {"system", c.system},   {"idle", c.idle},
        {"iowait", c.iowait},   {"irq", c.irq},
        {"softirq", c.softirq}, {"steal", c.steal},
        {"guest", c.guest},     {"guest_nice", c.guest_nice}};
    for (const auto& [name, v] : ticks)
      add(o.raw, std::string("stat_cpu_") + name + "_ticks", static_cast<double>(v));
    if (st.ctxt) add(o.raw, "stat_ctxt", static_cast<double>(*st.ctxt));
    if (st.processes) add(o.raw, "stat_processes", static_cast<double>(*st.processes));
    if (st.procs_running) add(o.raw, "stat_procs_running", static_cast<double>(*st.procs_running));
    if (st.procs_blocked) add(o.raw, "stat_procs_blocked", static_cast<double>(*st.procs_blocked));
    // Fractions over the interval since the last read. A counter that went
    // backwards (a fake root rewritten, a VM restored) restarts the
    // baseline; an interval with no tick gives no fraction this time.
    std::optional<CpuTimes> baseline = c;
    if (previous_cpu_) {
      const CpuTimes& p = *previous_cpu_;
      const bool monotonic = c.user >= p.user && c.nice >= p.nice && c.system >= p.system &&
                             c.idle >= p.idle && c.iowait >= p.iowait && c.irq >= p.irq &&
                             c.softirq >= p.softirq && c.steal >= p.steal;
      if (monotonic && c.total() > p.total()) {
        const double total = static_cast<double>(c.total() - p.total());
        const double idle = static_cast<double>((c.idle - p.idle) + (c.iowait - p.iowait));
        add(o.canonical, "host_cpu_utilization", 1.0 - idle / total);
        add(o.canonical, "host_cpu_iowait", static_cast<double>(c.iowait - p.iowait) / total);
        add(o.canonical, "host_cpu_steal", static_cast<double>(c.steal - p.steal) / total);
      } else if (monotonic) {
        baseline = p;  // no tick yet: keep measuring from the older read
      }
    }
    const std::string meminfo_path = root_ + "/proc/meminfo";
    if (!load(meminfo_path, false)) return finish(o, clock, t0);
    for (const MeminfoEntry& e : parse_meminfo(buffer_, meminfo_path)) {
      const double v = static_cast<double>(e.value);
      add(o.raw, "meminfo_" + e.name + (e.bytes ? "_bytes" : ""), v);
      if (e.name == "MemAvailable") add(o.canonical, "host_memory_available_bytes", v);
      if (e.name == "MemTotal") add(o.canonical, "host_memory_total_bytes", v);
    }
    for (const char* resource : {"cpu", "memory", "io"}) {
      const std::string path = root_ + "/proc/pressure/" + resource;
      if (!load(path, true)) {
        if (!o.error.empty()) return finish(o, clock, t0);
        continue;
      }
      const Pressure p = parse_pressure(buffer_, path);
      add_pressure_raw(o.raw, std::string("pressure_") + resource, p, '_');
      if (p.some) add(o.canonical, std::string("host_") + resource + "_pressure_some", p.some->avg10 / 100.0);
    }
    const std::string net_path = root_ + "/proc/net/dev";
    if (load(net_path, true)) {
      std::uint64_t rx = 0, tx = 0;
      for (const NetDevice& d : parse_net_dev(buffer_, net_path)) {
        const Labels l{{"interface", d.name}};
        add(o.raw, "net_dev_rx_bytes", static_cast<double>(d.rx_bytes), l);
        add(o.raw, "net_dev_rx_packets", static_cast<double>(d.rx_packets), l);
        add(o.raw, "net_dev_rx_errs", static_cast<double>(d.rx_errs), l);
        add(o.raw, "net_dev_rx_drop", static_cast<double>(d.rx_drop), l);
        add(o.raw, "net_dev_tx_bytes", static_cast<double>(d.tx_bytes), l);
        add(o.raw, "net_dev_tx_packets", static_cast<double>(d.tx_packets), l);
        add(o.raw, "net_dev_tx_errs", static_cast<double>(d.tx_errs), l);
        add(o.raw, "net_dev_tx_drop", static_cast<double>(d.tx_drop), l);
        if (d.name == "lo") continue;  // loopback traffic never leaves the machine
        rx += d.rx_bytes;
        tx += d.tx_bytes;
      }
      add(o.canonical, "host_net_rx_bytes", static_cast<double>(rx));
      add(o.canonical, "host_net_tx_bytes", static_cast<double>(tx));
    } else if (!o.error.empty()) {
      return finish(o, clock, t0);
    }
    previous_cpu_ = baseline;
  } catch (const InputError& e) {
    o.error = e.what();
  }
  return finish(o, clock, t0);
}

// --- process

ProcessCollector::ProcessCollector(int pid, std::string root)
    : pid_(pid), root_(path_prefix(std::move(root))), ticks_per_second_(::sysconf(_SC_CLK_TCK)) {
  if (ticks_per_second_ <= 0) ticks_per_second_ = 100;  // USER_HZ on every Linux architecture
}

Observation ProcessCollector::read(const Clock& clock) {
  Observation o;
  o.source = "process";
  const Nanos t0 = clock.now_ns();
  const std::string pid = std::to_string(pid_);
  const std::string exited = "process " + pid + " exited";
  const std::string dir = root_ + "/proc/" + pid;
  const auto load = [&](const std::string& path) {
    const int err = read_small_file(path, buffer_);
    if (err == 0) return true;
    // ESRCH: the process went away between open and read.
    o.error = err == ENOENT || err == ESRCH ? exited : errno_text(path, err);
    return false;
  };
  try {
    const std::string stat_path = dir + "/stat";
    if (!load(stat_path)) return finish(o, clock, t0);
    const PidStat st = parse_pid_stat(buffer_, stat_path);
    if (st.state == 'Z' || st.state == 'X') {
      o.error = exited + " (a zombie, not yet reaped)";
      return finish(o, clock, t0);
    }
    if (start_ticks_ && *start_ticks_ != st.start_ticks) {
      o.error = exited + " (the PID now names another process)";
      return finish(o, clock, t0);
    }
    start_ticks_ = st.start_ticks;
    const std::string status_path = dir + "/status";
    if (!load(status_path)) return finish(o, clock, t0);
    const PidStatus status = parse_pid_status(buffer_, status_path);
    const Labels l{{"pid", pid}};
    const double tck = static_cast<double>(ticks_per_second_);
    add(o.canonical, "process_cpu_seconds", static_cast<double>(st.utime_ticks + st.stime_ticks) / tck, l);
    add(o.raw, "stat_utime_ticks", static_cast<double>(st.utime_ticks), l);
    add(o.raw, "stat_stime_ticks", static_cast<double>(st.stime_ticks), l);
    add(o.raw, "stat_num_threads", static_cast<double>(st.num_threads), l);
    add(o.raw, "stat_rss_pages", static_cast<double>(st.rss_pages), l);
    add(o.raw, "stat_starttime_ticks", static_cast<double>(st.start_ticks), l);
    const auto both = [&](const std::optional<std::uint64_t>& v, const char* canonical, const char* raw) {
      if (!v) return;
      if (canonical) add(o.canonical, canonical, static_cast<double>(*v), l);
      add(o.raw, raw, static_cast<double>(*v), l);
    };
    both(status.vm_rss_bytes, "process_rss_bytes", "status_VmRSS_bytes");
    both(status.vm_hwm_bytes, nullptr, "status_VmHWM_bytes");
    both(status.vm_size_bytes, nullptr, "status_VmSize_bytes");
    both(status.threads, "process_threads", "status_Threads");
    both(status.voluntary_ctxt_switches, "process_voluntary_ctx_switches", "status_voluntary_ctxt_switches");
    both(status.nonvoluntary_ctxt_switches, "process_nonvoluntary_ctx_switches",
         "status_nonvoluntary_ctxt_switches");
  } catch (const InputError& e) {
    o.error = e.what();
  }
  return finish(o, clock, t0);
}

// --- cgroup

CgroupCollector::CgroupCollector(CgroupTarget target, std::string root)
    : target_(std::move(target)), root_(path_prefix(std::move(root))) {}

nlohmann::json cgroup_limits(const std::string& dir) {
  nlohmann::json out = nlohmann::json::object();
  nlohmann::json missing = nlohmann::json::array(), unparsed = nlohmann::json::object(),
                 unreadable = nlohmann::json::object();
  std::string text;
  const auto read = [&](const char* name) -> std::optional<std::string> {
    if (const int err = read_small_file(dir + "/" + name, text, 64 << 10); err != 0) {
      if (err == ENOENT)
        missing.push_back(name);
      else
        unreadable[name] = std::strerror(err);
      return std::nullopt;
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  };
  // A count, or null for "max" (no limit); nullopt when neither.
  const auto count = [](const std::string& v) -> std::optional<nlohmann::json> {
    if (v == "max") return nlohmann::json(nullptr);
    if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return nlohmann::json(std::stoull(v));
  };
  if (const auto v = read("cgroup.controllers")) {
    nlohmann::json list = nlohmann::json::array();
    std::size_t at = 0;
    while (at < v->size()) {
      const std::size_t end = std::min(v->find(' ', at), v->size());
      if (end > at) list.push_back(v->substr(at, end - at));
      at = end + 1;
    }
    out["controllers"] = std::move(list);
  }
  if (const auto v = read("cpu.max")) {
    const std::size_t sp = v->find(' ');
    const auto quota = count(v->substr(0, sp));
    const auto period = sp == std::string::npos ? std::nullopt : count(v->substr(sp + 1));
    if (quota && period && period->is_number() && period->get<std::uint64_t>() > 0) {
      out["cpu.max"] = {
          {"quota_us", *quota},
          {"period_us", *period},
          {"cpus", quota->is_null() ? nlohmann::json(nullptr)
                                    : nlohmann::json(quota->get<double>() / period->get<double>())}};
    } else {
      unparsed["cpu.max"] = *v;
    }
  }
  for (const char* name : {"cpu.weight", "pids.max", "memory.max", "memory.high", "memory.low", "memory.min",
                           "memory.swap.max"}) {
    const auto v = read(name);
    if (!v) continue;
    if (const auto c = count(*v))
      out[name] = *c;
    else
      unparsed[name] = *v;
  }
  for (const char* name : {"cpuset.cpus.effective", "cpuset.mems.effective"})
    if (const auto v = read(name)) out[name] = *v;
  if (const auto v = read("io.max")) {
    nlohmann::json lines = nlohmann::json::array();
    std::size_t at = 0;
    while (at < v->size() && lines.size() < 64) {
      const std::size_t end = std::min(v->find('\n', at), v->size());
      if (end > at) lines.push_back(v->substr(at, end - at));
      at = end + 1;
    }
    out["io.max"] = std::move(lines);
  }
  if (!missing.empty()) out["missing"] = std::move(missing);
  if (!unparsed.empty()) out["unparsed"] = std::move(unparsed);
  if (!unreadable.empty()) out["unreadable"] = std::move(unreadable);
  return out;
}

nlohmann::json CgroupCollector::limits() const {
  std::lock_guard lock(limits_mutex_);
  return limits_;
}

bool CgroupCollector::resolve(Observation& o) {
  if (!directory_.empty()) return true;
  std::string dir;
  if (!target_.directory.empty()) {
    dir = path_prefix(root_ + (target_.directory.front() == '/' ? "" : "/") + target_.directory);
    if (!exists(dir)) {
      o.unavailable = "no cgroup directory " + dir;
      return false;
    }
  } else {
    const std::string pid = std::to_string(target_.pid);
    const std::string path = root_ + "/proc/" + pid + "/cgroup";
    if (const int err = read_small_file(path, buffer_); err != 0) {
      o.error = err == ENOENT || err == ESRCH ? "process " + pid + " exited" : errno_text(path, err);
      return false;
    }
    const PidCgroup cg = parse_pid_cgroup(buffer_, path);
    if (!cg.unified_path) {
      o.unavailable = "no cgroup v2: " + path + " lists cgroup v1 hierarchies only (a cgroup v1 host)";
      return false;
    }
    dir = path_prefix(root_ + "/sys/fs/cgroup" + *cg.unified_path);
  }
  // Every cgroup v2 directory has cgroup.controllers (cgroup-v2.rst, "Core
  // Interface Files"); a v1 or hybrid host mounts something else here.
  if (!exists(dir + "/cgroup.controllers")) {
    o.unavailable = dir +
                    " is not a cgroup v2 directory (no cgroup.controllers): cgroup v2 is not mounted at " +
                    "/sys/fs/cgroup (a cgroup v1 or hybrid host)";
    return false;
  }
  directory_ = dir;
  auto limits = cgroup_limits(dir);
  std::lock_guard lock(limits_mutex_);
  limits_ = std::move(limits);
  return true;
}

bool CgroupCollector::read_file(const char* name, Observation& o) {
  const std::string path = directory_ + "/" + name;
  const int err = read_small_file(path, buffer_);
  if (err == 0) return true;
  if (!is_missing(err)) {
    o.error = errno_text(path, err);
  } else if (!exists(directory_)) {
    o.error = "cgroup directory " + directory_ + " no longer exists";
  } else {
    note_once(std::string(name) + " is missing in " + directory_ +
              " (its controller is not enabled for this cgroup): left out");
  }
  return false;
}

Observation CgroupCollector::read(const Clock& clock) {
  Observation o;
  o.source = "cgroup";
  const Nanos t0 = clock.now_ns();
  const auto failed = [&] { return !o.error.empty(); };
  try {
    if (!resolve(o)) return finish(o, clock, t0);
    const auto file = [&](const char* name) { return directory_ + "/" + name; };

    if (read_file("cpu.stat", o)) {
      bool throttling = false;
      for (const auto& [key, v] : parse_flat_keyed(buffer_, file("cpu.stat"))) {
        const double value = static_cast<double>(v);
        add(o.raw, "cpu.stat." + key, value);
        if (key == "usage_usec") add(o.canonical, "cgroup_cpu_usage_seconds", value / 1e6);
        if (key == "nr_throttled") add(o.canonical, "cgroup_cpu_throttled_periods", value), throttling = true;
        if (key == "throttled_usec") add(o.canonical, "cgroup_cpu_throttled_seconds", value / 1e6);
      }
      if (!throttling)
        note_once(
            "cpu.stat in " + directory_ +
            " has no nr_throttled (the cpu controller is not enabled for this cgroup): throttling left out");
    } else if (failed()) {
      return finish(o, clock, t0);
    }

    const auto pressure = [&](const char* name, const char* canonical) {
      if (!read_file(name, o)) return;
      const Pressure p = parse_pressure(buffer_, file(name));
      add_pressure_raw(o.raw, std::string(name), p, '.');
      if (canonical && p.some) add(o.canonical, canonical, p.some->avg10 / 100.0);
    };
    pressure("cpu.pressure", "cgroup_cpu_pressure_some");
    if (failed()) return finish(o, clock, t0);

    if (read_file("memory.current", o)) {
      const double v = static_cast<double>(parse_single_value(buffer_, file("memory.current")));
      add(o.raw, "memory.current", v);
      add(o.canonical, "cgroup_memory_current_bytes", v);
    } else if (failed()) {
      return finish(o, clock, t0);
    }

    if (read_file("memory.events", o)) {
      for (const auto& [key, v] : parse_flat_keyed(buffer_, file("memory.events"))) {
        const double value = static_cast<double>(v);
        add(o.raw, "memory.events." + key, value);
        if (key == "high") add(o.canonical, "cgroup_memory_high_events", value);
        if (key == "max") add(o.canonical, "cgroup_memory_max_events", value);
        if (key == "oom_kill") add(o.canonical, "cgroup_memory_oom_kills", value);
      }
    } else if (failed()) {
      return finish(o, clock, t0);
    }

    pressure("memory.pressure", "cgroup_memory_pressure_some");
    if (failed()) return finish(o, clock, t0);

    if (read_file("io.stat", o)) {
      // Summed over devices: bytes and operations; every key raw per device.
      std::uint64_t sums[4] = {};
      constexpr const char* kSummed[4] = {"rbytes", "wbytes", "rios", "wios"};
      for (const IoStatDevice& d : parse_io_stat(buffer_, file("io.stat"))) {
        const Labels l{{"device", d.device}};
        for (const auto& [key, v] : d.values) {
          add(o.raw, "io.stat." + key, static_cast<double>(v), l);
          for (int i = 0; i < 4; ++i)
            if (key == kSummed[i]) sums[i] += v;
        }
      }
      for (int i = 0; i < 4; ++i)
        add(o.raw, std::string("io.stat.sum.") + kSummed[i], static_cast<double>(sums[i]));
      add(o.canonical, "cgroup_io_read_bytes", static_cast<double>(sums[0]));
      add(o.canonical, "cgroup_io_write_bytes", static_cast<double>(sums[1]));
    } else if (failed()) {
      return finish(o, clock, t0);
    }

    pressure("io.pressure", nullptr);
  } catch (const InputError& e) {
    o.error = e.what();
  }
  return finish(o, clock, t0);
}

}  // namespace tokenscope::observe
