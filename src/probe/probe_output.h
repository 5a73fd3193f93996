// What every probe writes: one JSON document per probe in --out DIR
// (<probe>.json, written atomically) with the settings, the environment and
// every repetition, plus optional samples.jsonl and trace.json (GPU probes).
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "probe/topology.h"

namespace tokenscope::probe {

inline constexpr int kProbeFormatVersion = 1;

// The environment block of every probe result: host, kernel, CPU topology,
// tokenscope version, UTC time of the run.
nlohmann::json environment_json(const Topology& topology, const std::string& tokenscope_version);

// Wraps a probe's own JSON with {"format_version", "environment"} and writes
// it to dir/<name>.json atomically. Returns the path. Throws IoError.
std::filesystem::path write_probe_json(const std::filesystem::path& dir, const std::string& name,
                                       nlohmann::json result, const nlohmann::json& environment);

}  // namespace tokenscope::probe
