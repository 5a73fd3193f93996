#include "analyze/kernel_diff.h"

#include <algorithm>
#include <cstdint>

namespace tokenscope::analyze {

KernelDiff diff_kernels(const KernelInventory& base, const KernelInventory& cand) {
  KernelDiff d;
  std::int64_t new_ns = 0, gone_ns = 0;
  auto b = base.kernels.begin(), c = cand.kernels.begin();
  while (b != base.kernels.end() || c != cand.kernels.end()) {
    if (c == cand.kernels.end() || (b != base.kernels.end() && b->name < c->name)) {
      gone_ns += b->total_ns;
      d.gone_kernels.push_back(*b++);
    } else if (b == base.kernels.end() || c->name < b->name) {
      new_ns += c->total_ns;
      d.new_kernels.push_back(*c++);
    } else {
      ++d.common;
      const auto eb = b->first_excess(), ec = c->first_excess();
      if (eb && ec) {
        d.compared.push_back(c->name);
        d.base_excess.push_back(*eb);
        d.cand_excess.push_back(*ec);
      }
      ++b;
      ++c;
    }
  }
  const auto by_time = [](const KernelStats& x, const KernelStats& y) {
    return x.total_ns != y.total_ns ? x.total_ns > y.total_ns : x.name < y.name;
  };
  std::sort(d.new_kernels.begin(), d.new_kernels.end(), by_time);
  std::sort(d.gone_kernels.begin(), d.gone_kernels.end(), by_time);
  if (cand.total_ns > 0) d.new_time_share = static_cast<double>(new_ns) / static_cast<double>(cand.total_ns);
  if (base.total_ns > 0)
    d.gone_time_share = static_cast<double>(gone_ns) / static_cast<double>(base.total_ns);
  return d;
}

}  // namespace tokenscope::analyze
