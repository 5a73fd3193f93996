#include "rundir/shard_info.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace tokenscope::rundir {

namespace {

nlohmann::json opt(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

const nlohmann::json& member(const nlohmann::json& j, const char* key, const std::string& file,
                             const std::string& field) {
  if (!j.is_object()) throw InputError(file, 0, field, "expected an object");
  const auto it = j.find(key);
  if (it == j.end()) throw InputError(file, 0, field + "." + key, "missing");
  return *it;
}

std::int64_t integer(const nlohmann::json& j, const char* key, const std::string& file,
                     const std::string& field, std::int64_t lo, std::int64_t hi) {
  const auto& v = member(j, key, file, field);
  if (!v.is_number_integer())
    throw InputError(file, 0, field + "." + key, fmt::format("expected an integer, got {}", v.type_name()));
  // An unsigned value past int64's range would wrap to a negative one.
  const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
  const auto x = v.get<std::int64_t>();
  if (too_big || x < lo || x > hi)
    throw InputError(file, 0, field + "." + key, fmt::format("expected {} to {}, got {}", lo, hi, v.dump()));
  return x;
}

double number(const nlohmann::json& v, const std::string& file, const std::string& field, double lo,
              double hi) {
  if (!v.is_number())
    throw InputError(file, 0, field, fmt::format("expected a number, got {}", v.type_name()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw InputError(file, 0, field, fmt::format("expected a number from {} to {}, got {}", lo, hi, x));
  return x;
}

bool boolean(const nlohmann::json& j, const char* key, const std::string& file, const std::string& field) {
  const auto& v = member(j, key, file, field);
  if (!v.is_boolean()) throw InputError(file, 0, field + "." + key, "expected true or false");
  return v.get<bool>();
}

std::optional<double> optional_ms(const nlohmann::json& j, const char* key, const std::string& file,
                                  const std::string& field) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return number(*it, file, field + "." + key, 0, 1e12);
}

}  // namespace

nlohmann::json slo_to_json(const Slo& s) {
  return {{"ttft_ms", opt(s.ttft_ms)},
          {"tpot_ms", opt(s.tpot_ms)},
          {"e2e_ms", opt(s.e2e_ms)},
          {"ttfo_ms", opt(s.ttfo_ms)},
          {"percentile", s.percentile}};
}

Slo slo_from_json(const nlohmann::json& j, const std::string& file, const std::string& field) {
  if (!j.is_object()) throw InputError(file, 0, field, "expected an object");
  Slo s;
  s.ttft_ms = optional_ms(j, "ttft_ms", file, field);
  s.tpot_ms = optional_ms(j, "tpot_ms", file, field);
  s.e2e_ms = optional_ms(j, "e2e_ms", file, field);
  s.ttfo_ms = optional_ms(j, "ttfo_ms", file, field);
  s.percentile = number(member(j, "percentile", file, field), file, field + ".percentile", 1e-9, 100);
  return s;
}

nlohmann::json to_json(const ShardInfo& s) {
  nlohmann::json slos = nlohmann::json::object();
  for (const auto& [cls, slo] : s.slos) slos[cls] = slo_to_json(slo);
  nlohmann::json j = {{"index", s.index},
                      {"count", s.count},
                      {"source", s.source},
                      {"start_at_unix_ns", s.start_at_unix_ns},
                      {"epoch_monotonic_ns", s.epoch_monotonic_ns},
                      {"ready_late_ns", s.ready_late_ns},
                      {"planned_requests", s.planned_requests},
                      {"users", s.users ? nlohmann::json(*s.users) : nlohmann::json(nullptr)},
                      {"clock_sync",
                       {{"available", s.clock_sync.available},
                        {"synchronized", s.clock_sync.synchronized},
                        {"max_error_us", s.clock_sync.max_error_us},
                        {"est_error_us", s.clock_sync.est_error_us},
                        {"source", s.clock_sync.source}}},
                      {"slo_from_schedule", s.slo_from_schedule},
                      {"slos", std::move(slos)}};
  if (s.clock_offset)
    j["clock_offset"] = {{"offset_ns", s.clock_offset->offset_ns},
                         {"error_ns", s.clock_offset->error_ns},
                         {"rtt_ns", s.clock_offset->rtt_ns},
                         {"rounds", s.clock_offset->rounds},
                         {"to", "rank 0"},
                         {"by", "mpi"}};
  if (s.counters_span_all_shards) j["counters_span_all_shards"] = true;
  return j;
}

ShardInfo shard_info_from_json(const nlohmann::json& j, const std::string& file) {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  const std::string f = "shard";
  if (!j.is_object()) throw InputError(file, 0, f, "expected an object (a shard of a bench run)");
  ShardInfo s;
  s.count = static_cast<std::uint32_t>(integer(j, "count", file, f, 1, 1 << 20));
  s.index = static_cast<std::uint32_t>(integer(j, "index", file, f, 0, s.count - 1));
  const auto& src = member(j, "source", file, f);
  if (!src.is_string()) throw InputError(file, 0, f + ".source", "expected a string");
  s.source = src.get<std::string>();
  s.start_at_unix_ns = integer(j, "start_at_unix_ns", file, f, 0, kMax);
  // Monotonic times within 2^62 ns (146 years): a shift between two shards'
  // clocks, added to a record's time, stays in 64 bits.
  s.epoch_monotonic_ns = integer(j, "epoch_monotonic_ns", file, f, 0, std::int64_t{1} << 62);
  s.ready_late_ns = integer(j, "ready_late_ns", file, f, 0, kMax);
  s.planned_requests = static_cast<std::uint64_t>(integer(j, "planned_requests", file, f, 0, kMax));
  if (const auto it = j.find("users"); it != j.end() && !it->is_null())
    s.users = static_cast<std::uint64_t>(integer(j, "users", file, f, 0, kMax));
  const auto& cs = member(j, "clock_sync", file, f);
  const std::string fc = f + ".clock_sync";
  s.clock_sync.available = boolean(cs, "available", file, fc);
  s.clock_sync.synchronized = boolean(cs, "synchronized", file, fc);
  s.clock_sync.max_error_us =
      number(member(cs, "max_error_us", file, fc), file, fc + ".max_error_us", 0, 1e15);
  s.clock_sync.est_error_us =
      number(member(cs, "est_error_us", file, fc), file, fc + ".est_error_us", 0, 1e15);
  if (const auto it = cs.find("source"); it != cs.end() && it->is_string()) s.clock_sync.source = *it;
  if (const auto it = j.find("clock_offset"); it != j.end() && !it->is_null()) {
    const std::string fo = f + ".clock_offset";
    if (!it->is_object())
      throw InputError(file, 0, fo, "expected an object (offset_ns, error_ns, rtt_ns, rounds)");
    // Offsets within 2^62 ns, as the epochs: a shift stays in 64 bits.
    constexpr std::int64_t kBound = std::int64_t{1} << 62;
    ClockOffsetInfo c;
    c.offset_ns = integer(*it, "offset_ns", file, fo, -kBound, kBound);
    c.error_ns = integer(*it, "error_ns", file, fo, 0, kBound);
    c.rtt_ns = integer(*it, "rtt_ns", file, fo, 0, kBound);
    c.rounds = static_cast<std::uint32_t>(integer(*it, "rounds", file, fo, 0, 1 << 20));
    s.clock_offset = c;
  }
  if (const auto it = j.find("counters_span_all_shards"); it != j.end())
    s.counters_span_all_shards = boolean(j, "counters_span_all_shards", file, f);
  s.slo_from_schedule = boolean(j, "slo_from_schedule", file, f);
  const auto& slos = member(j, "slos", file, f);
  if (!slos.is_object()) throw InputError(file, 0, f + ".slos", "expected an object of task classes");
  for (const auto& [cls, v] : slos.items()) s.slos[cls] = slo_from_json(v, file, f + ".slos." + cls);
  return s;
}

}  // namespace tokenscope::rundir
