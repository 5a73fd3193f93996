#include "engine/pools.h"

#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/yaml_fields.h"

namespace tokenscope::engine {

namespace {

std::vector<PoolSpec> parse_pools_checked(const std::string& text, const std::string& file) {
  const YAML::Node root = yaml::load(text, file);
  const yaml::Fields f(file);
  if (!root.IsMap()) f.fail(root, "", "expected a mapping with pools: a list of pools");
  f.only_keys(root, "", {"pools"});
  const YAML::Node list = root["pools"];
  if (!list || !list.IsSequence() || list.size() == 0)
    f.fail(list ? list : root, "pools", "expected a list of at least one pool");
  std::vector<PoolSpec> pools;
  std::set<std::string> names;
  std::uint64_t replicas = 0;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const YAML::Node p = list[k];
    const std::string field = fmt::format("pools[{}]", k);
    if (!p.IsMap())
      f.fail(p, field, "expected a mapping (gpu, tensor-parallel, count, name, gpu-cost-per-hour)");
    f.only_keys(p, field, {"name", "gpu", "tensor-parallel", "count", "gpu-cost-per-hour"});
    PoolSpec s;
    s.line = yaml::line_of(p);
    if (!p["gpu"]) f.fail(p, field + ".gpu", "missing (a GPU of the catalog: h100, a100, h200, ...)");
    s.gpu = f.string(p["gpu"], field + ".gpu");
    if (s.gpu.size() > 128) f.fail(p["gpu"], field + ".gpu", "expected a GPU name of at most 128 bytes");
    if (p["tensor-parallel"])
      s.tensor_parallel =
          static_cast<std::uint32_t>(f.whole(p["tensor-parallel"], field + ".tensor-parallel", 1, 64));
    if (!p["count"]) f.fail(p, field + ".count", "missing (the replicas in the pool)");
    s.count = static_cast<std::uint32_t>(f.whole(p["count"], field + ".count", 1, kMaxPoolReplicas));
    if (p["gpu-cost-per-hour"])
      s.gpu_cost_per_hour = f.number(p["gpu-cost-per-hour"], field + ".gpu-cost-per-hour", 0, 1e6, false,
                                     "a price per GPU-hour from 0 to 1e6");
    s.name =
        p["name"] ? f.string(p["name"], field + ".name") : fmt::format("{}x{}", s.gpu, s.tensor_parallel);
    if (s.name.size() > 128) f.fail(p["name"], field + ".name", "expected a name of at most 128 bytes");
    if (!names.insert(s.name).second)
      f.fail(p["name"] ? p["name"] : p, field + ".name",
             fmt::format("{}: a pool of that name already (give each pool a name)", quote_input(s.name)));
    replicas += s.count;
    if (replicas > kMaxPoolReplicas)
      f.fail(p["count"], field + ".count",
             fmt::format("the pools hold more than {} replicas", kMaxPoolReplicas));
    pools.push_back(std::move(s));
  }
  return pools;
}

}  // namespace

// A YAML exception (a key that is not a scalar, a bad conversion) is an
// InputError at the line yaml-cpp names, as every YAML reader's.
std::vector<PoolSpec> parse_pools(const std::string& text, const std::string& file) {
  try {
    return parse_pools_checked(text, file);
  } catch (const YAML::Exception& e) {
    throw yaml::load_error(e, file);
  }
}

std::vector<PoolSpec> load_pools(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("--pools {}: cannot read the file", path));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (text.size() > (std::size_t{1} << 20)) throw InputError(path, 0, "", "a pools file of over 1 MiB");
  return parse_pools(text, path);
}

}  // namespace tokenscope::engine
