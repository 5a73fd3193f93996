#include "probe/probe_output.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/run_dir.h"

namespace tokenscope::probe {

nlohmann::json environment_json(const Topology& topology, const std::string& version) {
  nlohmann::json j;
  utsname u{};
  if (uname(&u) == 0) {
    j["kernel"] = std::string(u.sysname) + " " + u.release;
    j["machine"] = u.machine;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) j["hostname"] = host;
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  j["utc"] = buf;
  j["tokenscope_version"] = version;
  j["cpu"] = topology.to_json();
  return j;
}

std::filesystem::path write_probe_json(const std::filesystem::path& dir, const std::string& name,
                                       nlohmann::json result, const nlohmann::json& environment) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("cannot create " + dir.string() + ": " + ec.message());
  result["format_version"] = kProbeFormatVersion;
  result["environment"] = environment;
  const auto path = dir / (name + ".json");
  write_file_atomic(path, result.dump(2) + "\n");
  return path;
}

}  // namespace tokenscope::probe
