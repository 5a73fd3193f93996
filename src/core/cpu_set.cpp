#include "core/cpu_set.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "core/strings.h"

namespace tokenscope {

namespace {

int parse_cpu_number(std::string_view s, const std::string& what, std::string_view whole) {
  int v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 0)
    throw InputError(what, 0, "cpu list",
                     "expected comma-separated cpu numbers or ranges like 0-3,8, got " + quote_input(whole));
  return v;
}

}  // namespace

std::vector<int> parse_cpu_list(std::string_view text, const std::string& what) {
  std::vector<int> out;
  const std::string_view whole = trim(text);
  std::string_view rest = whole;
  if (rest.empty()) return out;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    const auto dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.push_back(parse_cpu_number(item, what, whole));
    } else {
      const int lo = parse_cpu_number(trim(item.substr(0, dash)), what, whole);
      const int hi = parse_cpu_number(trim(item.substr(dash + 1)), what, whole);
      if (hi < lo || hi - lo > 65536)
        throw InputError(what, 0, "cpu list",
                         "range " + quote_input(item) + " must run upwards, at most 65536 cpus");
      for (int c = lo; c <= hi; ++c) out.push_back(c);
    }
    if (out.size() > 1'000'000) throw InputError(what, 0, "cpu list", "more than a million cpus");
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", cpus[i], cpus[j]) : std::to_string(cpus[i]);
    i = j + 1;
  }
  return out;
}

std::vector<int> thread_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void check_cpus_allowed(const std::vector<int>& cpus, std::string_view what) {
  const std::vector<int> allowed = thread_cpus();
  if (allowed.empty()) return;
  for (const int c : cpus)
    if (!std::binary_search(allowed.begin(), allowed.end(), c))
      throw UsageError(fmt::format("{}: CPU {} is not one this process may run on ({})", what, c,
                                   format_cpu_list(allowed)));
}

bool set_thread_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return false;
    CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace tokenscope
