#include "bench/shard.h"

#include <sys/timex.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "core/error.h"

namespace tokenscope::bench {

namespace {

bool parse_u32(std::string_view s, std::uint32_t& out) {
  if (s.empty()) return false;
  const auto* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, out);
  return r.ec == std::errc() && r.ptr == end;
}

ShardSpec checked(std::uint32_t index, std::uint32_t count, std::string source, const std::string& what) {
  if (count < 1 || count > (1u << 20))
    throw UsageError(fmt::format("{}: {} shards: expected 1 to {}", what, count, 1u << 20));
  if (index >= count)
    throw UsageError(
        fmt::format("{}: shard index {} of {} shards: expected 0 to {}", what, index, count, count - 1));
  return {index, count, std::move(source)};
}

}  // namespace

ShardSpec parse_shard(std::string_view text, const EnvLookup& env) {
  if (text == "env") {
    struct Pair {
      const char* index;
      const char* count;
    };
    for (const Pair p :
         {Pair{"TOKENSCOPE_SHARD_INDEX", "TOKENSCOPE_SHARD_COUNT"},
          Pair{"JOB_COMPLETION_INDEX", "TOKENSCOPE_SHARD_COUNT"}, Pair{"SLURM_PROCID", "SLURM_NTASKS"},
          Pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}}) {
      const char* i = env(p.index);
      if (i == nullptr) continue;
      const char* n = env(p.count);
      if (n == nullptr)
        throw UsageError(
            fmt::format("--shard env: {} is set ({}) but {} is not: set it to the number of shards", p.index,
                        quote_input(i), p.count));
      std::uint32_t index = 0, count = 0;
      if (!parse_u32(i, index))
        throw UsageError(
            fmt::format("--shard env: {}={}: expected a shard index (0, 1, ...)", p.index, quote_input(i)));
      if (!parse_u32(n, count))
        throw UsageError(
            fmt::format("--shard env: {}={}: expected the number of shards", p.count, quote_input(n)));
      return checked(index, count, p.index, fmt::format("--shard env ({}, {})", p.index, p.count));
    }
    throw UsageError(
        "--shard env: none of TOKENSCOPE_SHARD_INDEX, JOB_COMPLETION_INDEX (with TOKENSCOPE_SHARD_COUNT), "
        "SLURM_PROCID (with SLURM_NTASKS) or OMPI_COMM_WORLD_RANK (with OMPI_COMM_WORLD_SIZE) is set");
  }
  const auto slash = text.find('/');
  std::uint32_t index = 0, count = 0;
  if (slash == std::string_view::npos || !parse_u32(text.substr(0, slash), index) ||
      !parse_u32(text.substr(slash + 1), count))
    throw UsageError(
        fmt::format("--shard {}: expected I/N (shard I of N, from 0) or env", quote_input(text)));
  return checked(index, count, "--shard", fmt::format("--shard {}", text));
}

std::int64_t parse_start_at(std::string_view text) {
  const auto bad = [&] {
    return UsageError(fmt::format(
        "--start-at {}: expected Unix seconds (1767225600 or 1767225600.5) or UTC (2026-12-05T12:00:00Z)",
        quote_input(text)));
  };
  // The whole and the fractional seconds, kept apart so that nanoseconds stay exact.
  const auto fraction_ns = [&](std::string_view f) -> std::int64_t {
    if (f.empty() || f.size() > 9) throw bad();
    std::int64_t ns = 0;
    for (std::size_t i = 0; i < 9; ++i) {
      if (i < f.size() && (f[i] < '0' || f[i] > '9')) throw bad();
      ns = ns * 10 + (i < f.size() ? f[i] - '0' : 0);
    }
    return ns;
  };
  std::int64_t seconds = 0;
  std::int64_t ns = 0;
  if (text.find('T') != std::string_view::npos) {
    // YYYY-MM-DDTHH:MM:SS[.fff]Z
    if (text.size() < 20 || text.back() != 'Z' || text[4] != '-' || text[7] != '-' || text[10] != 'T' ||
        text[13] != ':' || text[16] != ':')
      throw bad();
    const auto num = [&](std::size_t at, std::size_t n) {
      std::uint32_t v = 0;
      if (!parse_u32(text.substr(at, n), v)) throw bad();
      return static_cast<int>(v);
    };
    std::tm tm{};
    tm.tm_year = num(0, 4) - 1900;
    tm.tm_mon = num(5, 2) - 1;
    tm.tm_mday = num(8, 2);
    tm.tm_hour = num(11, 2);
    tm.tm_min = num(14, 2);
    tm.tm_sec = num(17, 2);
    if (tm.tm_year < 70 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60)
      throw bad();
    const std::string_view rest = text.substr(19, text.size() - 20);
    if (!rest.empty()) {
      if (rest[0] != '.') throw bad();
      ns = fraction_ns(rest.substr(1));
    }
    const std::tm asked = tm;
    const std::time_t t = timegm(&tm);
    std::tm back{};
    gmtime_r(&t, &back);  // a day the month does not have (02-30) comes back as another
    if (back.tm_mday != asked.tm_mday || back.tm_mon != asked.tm_mon || back.tm_year != asked.tm_year)
      throw bad();
    seconds = static_cast<std::int64_t>(t);
  } else {
    const auto dot = text.find('.');
    std::uint64_t big = 0;
    const std::string_view w = text.substr(0, dot);
    const auto* end = w.data() + w.size();
    const auto r = std::from_chars(w.data(), end, big);
    if (w.empty() || r.ec != std::errc() || r.ptr != end || big > 9'223'372'035) throw bad();
    seconds = static_cast<std::int64_t>(big);
    if (dot != std::string_view::npos) ns = fraction_ns(text.substr(dot + 1));
  }
  // Nanoseconds in 64 bits reach 2262-04-11.
  if (seconds < 0 || seconds > 9'223'372'035) throw bad();
  return seconds * 1'000'000'000 + ns;
}

rundir::ClockSync read_clock_sync() {
  rundir::ClockSync c;
  struct timex t {};
  const int state = adjtimex(&t);
  if (state == -1) {
    c.source = fmt::format("adjtimex failed: {}", std::strerror(errno));
    return c;
  }
  c.available = true;
  c.source = "adjtimex";
  // TIME_ERROR (5) or STA_UNSYNC: the kernel's clock is not disciplined.
  c.synchronized = state != TIME_ERROR && (t.status & STA_UNSYNC) == 0;
  c.max_error_us = static_cast<double>(t.maxerror);
  c.est_error_us = static_cast<double>(t.esterror);
  return c;
}

std::string shard_out_dir(std::string out, const ShardSpec& shard) {
  for (std::size_t at; (at = out.find("{shard}")) != std::string::npos;)
    out.replace(at, 7, std::to_string(shard.index));
  return out;
}

std::uint64_t keep_share(LoadPlan& plan, const ShardSpec& shard) {
  const std::uint64_t n = shard.count, k = shard.index;
  if (plan.closed_loop) {
    std::uint64_t most = 0, largest = 0;
    for (auto& stage : plan.user_stages) {
      const auto total = static_cast<std::uint64_t>(std::llround(stage.value));
      largest = std::max(largest, total);
      const std::uint64_t mine = total / n + (k < total % n ? 1 : 0);
      stage.value = static_cast<double>(mine);
      most = std::max(most, mine);
    }
    if (most == 0)
      throw UsageError(
          fmt::format("--concurrency (or --user-stages): at most {} users for {} shards: shard {} "
                      "would have none (fewer shards, or more users)",
                      largest, n, k));
    plan.shard_index = shard.index;
    plan.shard_count = shard.count;
    return most;
  }
  // A cap on the requests in flight is the run's: each shard holds its part.
  if (plan.max_concurrency > 0) {
    if (plan.max_concurrency < n)
      throw UsageError(
          fmt::format("--max-concurrency {} is the whole run's cap: below the {} shards, a shard "
                      "would hold none of it",
                      plan.max_concurrency, n));
    plan.max_concurrency =
        static_cast<std::uint32_t>(plan.max_concurrency / n + (k < plan.max_concurrency % n ? 1 : 0));
  }
  std::vector<std::pair<std::uint32_t, Nanos>> kept;
  kept.reserve(plan.schedule.size() / n + 1);
  for (std::size_t j = k; j < plan.schedule.size(); j += n) kept.push_back(plan.schedule[j]);
  plan.schedule = std::move(kept);
  return plan.schedule.size();
}

Nanos epoch_of_start(std::int64_t start_at_unix_ns, std::int64_t offset_ns, Nanos anchor_monotonic_ns,
                     std::int64_t anchor_unix_ns) {
  // The start on this host's wall clock is the setter's reading less the
  // setter's lead over this clock; from the anchor, as far on the monotonic clock.
  return anchor_monotonic_ns + ((start_at_unix_ns - offset_ns) - anchor_unix_ns);
}

}  // namespace tokenscope::bench
