// Collective bandwidth analysis shared by `probe collectives` (NCCL on the
// visible GPUs) and by parsed nccl-tests output (`probe collectives --parse
// FILE`, no GPU needed).
//
// Definitions as nccl-tests has them: algbw = bytes / time; busbw = algbw x
// factor, with factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
// reduce-scatter and all-to-all, 1 for broadcast, reduce and sendrecv. The
// alpha-beta model fits time = alpha + beta x bytes by least squares: alpha
// is the per-call latency, 1/beta the asymptotic bandwidth.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tokenscope::probe {

struct CollectiveRow {
  double bytes = 0;
  double count = 0;
  std::string type;
  std::string redop;
  double time_us = 0;  // out-of-place
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  std::optional<double> inplace_time_us;
  std::optional<double> inplace_algbw_gbps;
  std::optional<double> inplace_busbw_gbps;
  std::optional<double> wrong;  // #wrong (out-of-place), when printed
};

struct NcclTestsOutput {
  std::string collective;  // all_reduce, all_gather, alltoall, ... or "" when unknown
  int ranks = 0;           // from the "Rank" lines, else nGpus x nThread
  std::vector<std::string> devices;
  std::vector<CollectiveRow> rows;
  std::optional<double> avg_busbw_gbps;
  bool out_of_bounds_ok = true;
};

// Parses nccl-tests stdout (all_reduce_perf, alltoall_perf, ...). The
// collective comes from "Collective test starting: NAME" when printed, else
// from `collective_hint`, else from a collective's name in `source` (the
// file name). InputError (source, line,
// field) on a table row that does not fit its header.
NcclTestsOutput parse_nccl_tests(std::string_view text, const std::string& source,
                                 const std::string& collective_hint = "");

// "all_reduce" -> 2(n-1)/n, ...; nullopt for an unknown collective.
std::optional<double> busbw_factor(const std::string& collective, int ranks);
// Normalises names: "all_reduce_perf", "allreduce", "AllReduce" -> "all_reduce".
std::string normalize_collective(std::string_view name);

struct AlphaBetaFit {
  std::size_t points = 0;
  double alpha_us = 0;          // intercept
  double beta_us_per_byte = 0;  // slope
  double alpha_ci95 = 0;        // half-widths (normal approximation of the OLS standard errors)
  double beta_ci95 = 0;
  double r_squared = 0;
  double asymptotic_gbps() const { return beta_us_per_byte > 0 ? 1e-3 / beta_us_per_byte : 0.0; }
};

// Ordinary least squares of time_us on bytes. Fewer than 2 distinct sizes:
// points = 0.
AlphaBetaFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& time_us);

struct CollectiveAnalysis {
  std::string collective;
  int ranks = 0;
  std::optional<double> factor;
  AlphaBetaFit fit;
  double peak_busbw_gbps = 0;
  double peak_algbw_gbps = 0;
  double max_busbw_mismatch = 0;  // largest |printed - computed| / computed over rows (a consistency check)
  std::string note;               // e.g. why one rank gives trivial numbers
};

CollectiveAnalysis analyze_collective(const std::string& collective, int ranks,
                                      const std::vector<CollectiveRow>& rows);

// Per-pair bandwidth matrix (GB/s; value[i][j] for i != j). Pairs slower than
// `slow_fraction` of the median pair are flagged.
struct PairDeviation {
  int from = 0;
  int to = 0;
  double gbps = 0;
  double vs_median = 0;
};
std::vector<PairDeviation> slow_pairs(const std::vector<std::vector<double>>& matrix,
                                      double slow_fraction = 0.8);

nlohmann::json to_json(const NcclTestsOutput& o);
nlohmann::json to_json(const CollectiveAnalysis& a);
std::string format_table(const CollectiveAnalysis& a, const std::vector<CollectiveRow>& rows);

}  // namespace tokenscope::probe
