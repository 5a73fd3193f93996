#include "analyze/collectives_input.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/text_reader.h"
#include "probe/collectives.h"
#include "rundir/readers.h"

namespace tokenscope::analyze {

namespace fs = std::filesystem;

namespace {

CollectiveSeries from_rows(const std::string& collective, int ranks, const nlohmann::json& rows,
                           const std::string& file, const std::string& field) {
  CollectiveSeries s;
  s.collective = probe::normalize_collective(collective);
  s.ranks = ranks;
  if (!rows.is_array()) throw InputError(file, 0, field, "expected an array of rows");
  std::vector<std::tuple<double, double, double>> r;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& x = rows[i];
    const auto num = [&](const char* k) {
      if (!x.is_object() || !x.contains(k) || !x[k].is_number())
        throw InputError(file, 0, field + "[" + std::to_string(i) + "]." + k, "expected a number");
      return x[k].get<double>();
    };
    const double bytes = num("bytes"), t = num("time_us"), bw = num("busbw_gbps");
    if (bytes > 0 && t > 0) r.emplace_back(bytes, t, bw);
  }
  std::sort(r.begin(), r.end());
  for (const auto& [b, t, bw] : r) {
    s.bytes.push_back(b);
    s.time_us.push_back(t);
    s.busbw_gbps.push_back(bw);
  }
  return s;
}

CollectivesData from_json(const nlohmann::json& j, const std::string& file) {
  CollectivesData d;
  d.source = file;
  if (!j.is_object()) throw InputError(file, 1, "", "expected a JSON object (probe collectives output)");
  const int ranks = j.contains("ranks") && j["ranks"].is_number_integer() ? j["ranks"].get<int>() : 0;
  if (j.contains("parsed")) {  // probe collectives --parse
    const auto& p = j["parsed"];
    if (!p.is_object()) throw InputError(file, 0, "parsed", "expected an object");
    d.series.push_back(
        from_rows(p.value("collective", std::string()),
                  p.contains("ranks") && p["ranks"].is_number_integer() ? p["ranks"].get<int>() : 0,
                  p.contains("rows") ? p["rows"] : nlohmann::json(), file, "parsed.rows"));
  }
  for (const char* c : {"all_reduce", "alltoall"})
    if (j.contains(c) && j[c].is_object() && j[c].contains("rows"))
      d.series.push_back(from_rows(c, ranks, j[c]["rows"], file, std::string(c) + ".rows"));
  if (j.contains("pair_sendrecv_gbps")) {
    const auto& m = j["pair_sendrecv_gbps"];
    if (!m.is_array())
      throw InputError(file, 0, "pair_sendrecv_gbps", "expected an array of arrays of numbers");
    for (const auto& row : m) {
      if (!row.is_array())
        throw InputError(file, 0, "pair_sendrecv_gbps", "expected an array of arrays of numbers");
      std::vector<double> r;
      for (const auto& v : row) {
        if (!v.is_number())
          throw InputError(file, 0, "pair_sendrecv_gbps", "expected an array of arrays of numbers");
        r.push_back(v.get<double>());
      }
      d.pair_gbps.push_back(std::move(r));
    }
  }
  if (d.series.empty() && d.pair_gbps.empty())
    throw InputError(file, 0, "",
                     "no collective rows: expected probe collectives JSON (all_reduce, alltoall, parsed)");
  return d;
}

}  // namespace

CollectivesData load_collectives(const fs::path& file) {
  const std::string text = read_regular_file(file.string(), "collectives file", rundir::kMaxRunJsonBytes);
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    require_json_depth(text, file.string());
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded())
      throw InputError(file.string(), 0, "", "not JSON (expected probe collectives output)");
    return from_json(j, file.string());
  }
  const auto parsed = probe::parse_nccl_tests(text, file.string(), file.filename().string());
  CollectivesData d;
  d.source = file.string();
  nlohmann::json rows = probe::to_json(parsed)["rows"];
  d.series.push_back(from_rows(parsed.collective, parsed.ranks, rows, file.string(), "rows"));
  if (d.series.back().bytes.empty())
    throw InputError(file.string(), 0, "",
                     "no nccl-tests result rows (expected the table of all_reduce_perf etc.)");
  return d;
}

std::optional<fs::path> find_collectives(const fs::path& run_dir) {
  std::error_code ec;
  if (fs::is_regular_file(run_dir / "collectives.json", ec)) return run_dir / "collectives.json";
  if (fs::is_regular_file(run_dir / "nccl-tests.txt", ec)) return run_dir / "nccl-tests.txt";
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file(ec) && n.find("_perf") != std::string::npos &&
        (n.ends_with(".txt") || n.ends_with(".log")))
      found.push_back(e.path());
  }
  std::sort(found.begin(), found.end());
  if (!found.empty()) return found.front();
  return std::nullopt;
}

}  // namespace tokenscope::analyze
