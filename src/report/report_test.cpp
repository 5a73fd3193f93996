#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "analyze/run_data.h"
#include "core/error.h"
#include "core/temp_dir.h"
#include "report/assets.h"
#include "report/render.h"
#include "report/report_data.h"
#include "rundir/downsample.h"

namespace tokenscope::report {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const fs::path kTestdata = fs::path(TOKENSCOPE_SOURCE_DIR) / "src/report/testdata";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Compares text with a golden file; TOKENSCOPE_UPDATE_GOLDEN=1 rewrites it.
void expect_golden(const std::string& text, const fs::path& golden) {
  if (std::getenv("TOKENSCOPE_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << text;
    GTEST_SKIP() << "rewrote " << golden;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: run with TOKENSCOPE_UPDATE_GOLDEN=1 to write it";
  EXPECT_EQ(text, read_file(golden)) << "differs from " << golden
                                     << " (TOKENSCOPE_UPDATE_GOLDEN=1 rewrites it after a deliberate change)";
}

// ---- downsampling

TEST(MinMaxColumns, KeepsEveryPointWhenFewEnough) {
  const std::vector<double> x = {0, 1, 2, 3, 4, 5};
  const std::vector<double> y = {5, 4, 3, 2, 1, 0};
  const XY r = minmax_columns(x, y, 2);
  EXPECT_EQ(r.x, x);
  EXPECT_EQ(r.y, y);
}

TEST(MinMaxColumns, KeepsSpikesThatAnAverageWouldHide) {
  std::vector<double> x, y;
  for (int i = 0; i < 100000; ++i) {
    x.push_back(i * 0.001);
    y.push_back(1.0 + 0.001 * (i % 7));
  }
  y[31337] = 500.0;  // one sample high
  y[77777] = -20.0;  // one sample low
  const XY r = minmax_columns(x, y, 200);
  EXPECT_LE(r.x.size(), 4u * 200);
  EXPECT_GE(r.x.size(), 2u * 200);
  EXPECT_TRUE(std::is_sorted(r.x.begin(), r.x.end()));
  EXPECT_EQ(*std::max_element(r.y.begin(), r.y.end()), 500.0);
  EXPECT_EQ(*std::min_element(r.y.begin(), r.y.end()), -20.0);
  // The spike keeps its own x, and the ends of the line stay where they were.
  const auto spike = std::find(r.y.begin(), r.y.end(), 500.0) - r.y.begin();
  EXPECT_DOUBLE_EQ(r.x[spike], 31.337);
  EXPECT_EQ(r.x.front(), x.front());
  EXPECT_EQ(r.x.back(), x.back());
  EXPECT_EQ(r.y.back(), y.back());
}

TEST(MinMaxColumns, EveryColumnKeepsItsMinimumAndMaximum) {
  std::vector<double> x, y;
  for (int i = 0; i < 4000; ++i) {
    x.push_back(i);
    y.push_back(std::sin(i * 0.37) * (i % 13));
  }
  const std::size_t columns = 50;
  const XY r = minmax_columns(x, y, columns);
  for (std::size_t c = 0; c < columns; ++c) {
    double lo = INFINITY, hi = -INFINITY, rlo = INFINITY, rhi = -INFINITY;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (static_cast<std::size_t>(x[i] / 3999.0 * columns) == c || (c == columns - 1 && x[i] == 3999.0)) {
        lo = std::min(lo, y[i]);
        hi = std::max(hi, y[i]);
      }
    for (std::size_t i = 0; i < r.x.size(); ++i)
      if (static_cast<std::size_t>(r.x[i] / 3999.0 * columns) == c ||
          (c == columns - 1 && r.x[i] == 3999.0)) {
        rlo = std::min(rlo, r.y[i]);
        rhi = std::max(rhi, r.y[i]);
      }
    EXPECT_EQ(lo, rlo) << "column " << c;
    EXPECT_EQ(hi, rhi) << "column " << c;
  }
}

TEST(MinMaxColumns, KeepsGapsAsGaps) {
  std::vector<double> x, y;
  for (int i = 0; i < 1000; ++i) {
    x.push_back(i);
    y.push_back(i >= 400 && i < 600 ? kNaN : 1.0);
  }
  const XY r = minmax_columns(x, y, 10);
  const auto gaps = std::count_if(r.y.begin(), r.y.end(), [](double v) { return std::isnan(v); });
  EXPECT_GE(gaps, 2);  // the two columns of the gap each keep one
  EXPECT_LE(r.x.size(), 40u + 10u);
}

TEST(MinMaxColumns, RejectsArraysOfDifferentLengths) {
  EXPECT_THROW(minmax_columns({1, 2}, {1}, 10), std::invalid_argument);
}

TEST(CdfPoints, SmallInputsKeepEveryValue) {
  std::vector<double> v = {3, kNaN, 1, 2, 5, 4};
  const XY r = cdf_points(v);
  EXPECT_EQ(r.x, (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(r.y, (std::vector<double>{0.2, 0.4, 0.6, 0.8, 1.0}));
}

TEST(CdfPoints, LargeInputsKeepTheEndsAndTheTail) {
  std::vector<double> v;
  for (int i = 1; i <= 1000000; ++i) v.push_back(i);
  const XY r = cdf_points(v, 256);
  EXPECT_LT(r.x.size(), 600u);
  EXPECT_EQ(r.x.front(), 1.0);
  EXPECT_EQ(r.y.front(), 1e-6);
  EXPECT_EQ(r.x.back(), 1e6);
  EXPECT_EQ(r.y.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(r.x.begin(), r.x.end()));
  EXPECT_TRUE(std::is_sorted(r.y.begin(), r.y.end()));
  // The tail is drawn finely: many points past p99.9.
  EXPECT_GT(std::count_if(r.y.begin(), r.y.end(), [](double f) { return f > 0.999; }), 50);
}

TEST(CdfPoints, FromAHistogramEndAtItsMaximum) {
  LogLinearHistogram h;
  for (int i = 1; i <= 1000; ++i) h.record(static_cast<std::uint64_t>(i) * 1'000'000);  // 1..1000 ms
  const XY r = cdf_points(h, 64);
  ASSERT_FALSE(r.x.empty());
  EXPECT_EQ(r.y.back(), 1.0);
  EXPECT_DOUBLE_EQ(r.x.back(), 1000.0);
  EXPECT_TRUE(std::is_sorted(r.x.begin(), r.x.end()));
  EXPECT_TRUE(std::is_sorted(r.y.begin(), r.y.end()));
  // Each point is the bucket's upper bound: within the histogram's precision of the true quantile.
  for (std::size_t i = 0; i < r.x.size(); ++i) EXPECT_NEAR(r.x[i], r.y[i] * 1000.0, r.x[i] * 0.01 + 1.0);
  EXPECT_TRUE(cdf_points(LogLinearHistogram{}).x.empty());
}

TEST(TimelineWindow, AboutThreeHundredWindowsOfAReadableLength) {
  EXPECT_EQ(timeline_window_s(0), 0.1);
  EXPECT_EQ(timeline_window_s(30), 0.1);
  EXPECT_EQ(timeline_window_s(31), 0.2);
  EXPECT_EQ(timeline_window_s(60), 0.2);
  EXPECT_EQ(timeline_window_s(3600), 20);
  // At least 5 requests per window on average: 200 requests in 29 s (6.9/s)
  // need 1 s windows; but never fewer than 10 windows for that rule.
  EXPECT_EQ(timeline_window_s(29, 200), 1);
  EXPECT_EQ(timeline_window_s(29, 100000), 0.1);
  EXPECT_EQ(timeline_window_s(2, 3), 0.2);
  EXPECT_EQ(timeline_window_s(100, 10), 10);
}

// ---- loading run directories

TEST(LoadRun, APartialRunWithACutLastLineLoadsWithNotes) {
  const RunData run = load_run(kTestdata / "partial");
  EXPECT_TRUE(run.partial);
  EXPECT_EQ(run.command, "bench");
  EXPECT_EQ(run.requests.size(), 3u);
  EXPECT_EQ(run.request_lines_skipped, 1u);
  EXPECT_FALSE(run.has_samples);
  EXPECT_TRUE(run.summary_recomputed);
  EXPECT_EQ(run.summary["requests_total"], 3);
  EXPECT_EQ(run.summary["requests_failed"], 1);
  EXPECT_EQ(run.origin, 1'000'000'000);
  std::string notes;
  for (const auto& n : run.notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("partial run"));
  EXPECT_THAT(notes, HasSubstr("requests.jsonl: 1 bad line skipped"));
  EXPECT_THAT(notes, HasSubstr("no samples.jsonl"));
  EXPECT_THAT(notes, HasSubstr("recomputed from requests.jsonl"));

  const auto& a = run.requests;
  EXPECT_DOUBLE_EQ(a.ttft_ms(0), 100.0);
  EXPECT_DOUBLE_EQ(a.ttft_sched_ms(0), 101.0);
  EXPECT_DOUBLE_EQ(a.tpot_ms(0), 100.0);
  EXPECT_DOUBLE_EQ(a.e2e_ms(0), 300.0);
  EXPECT_DOUBLE_EQ(a.send_lag_ms(0), 1.0);
  EXPECT_DOUBLE_EQ(a.ttft_ms(1), 50.0);
  EXPECT_DOUBLE_EQ(a.e2e_ms(1), 250.0);
  EXPECT_FLOAT_EQ(a.itl_mean_ms[1], 100.0f);
  EXPECT_FLOAT_EQ(a.itl_max_ms[1], 150.0f);
  EXPECT_TRUE(std::isnan(a.ttft_ms(2)));  // failed
  EXPECT_EQ(a.outcome[2], Outcome::kHttpError);
  EXPECT_EQ(a.tenant_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.class_names, (std::vector<std::string>{"chat", "batch"}));
  EXPECT_EQ(a.itl_ns.count(), 4u);  // two gaps in each completed request
  // The recomputed summary agrees with the arrays.
  EXPECT_DOUBLE_EQ(run.summary["ttft_ms"]["max"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(run.summary["e2e_ms"]["min"].get<double>(), 250.0);
}

TEST(LoadRun, SamplesBecomeOneSeriesPerSourceNameAndLabels) {
  const RunData run = load_run(kTestdata / "sampled");
  EXPECT_TRUE(run.has_samples);
  EXPECT_EQ(run.sample_lines_without_series, 1u);  // the error line
  auto find = [&](const std::string& source, const std::string& name) -> const SampledSeries* {
    for (const auto& s : run.series)
      if (s.source == source && s.name == name) return &s;
    return nullptr;
  };
  const SampledSeries* running = find("server", "requests_running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->kind, "canonical");
  EXPECT_EQ(running->v, (std::vector<double>{0, 2, 1}));
  EXPECT_EQ(running->t, (std::vector<Nanos>{1'000'000'000, 2'000'000'000, 3'000'000'000}));
  const SampledSeries* kv = find("server", "kv_cache_usage");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->v, (std::vector<double>{0.1, 0.5}));  // the NaN is not a point
  const SampledSeries* gpu = find("gpu", "gpu_utilization");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->labels, "gpu=0");
  const SampledSeries* hit = find("server", "prefix_cache_hit_rate");
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->kind, "derived");
  EXPECT_EQ(find("server", "iteration_tokens_bucket"), nullptr);  // histogram members stay in the file
}

// A chart draws at most 16 lines: the series with the highest peaks, and
// the rest as one line of their highest value at each time, with a note.
TEST(ReportData, AChartOfManySeriesDrawsSixteenAndSummarisesTheRest) {
  RunData run = load_run(kTestdata / "sampled");
  for (int g = 0; g < 40; ++g) {
    SampledSeries s{"gpu", "canonical", "gpu_power_watts", fmt::format("gpu={}", g), {}, {}};
    for (int k = 0; k < 3; ++k) {
      s.t.push_back(Nanos{1'000'000'000} * (k + 1));
      s.v.push_back(g + 100.0 * (k == 1 && g == 3));  // GPU 3 spikes once
    }
    run.series.push_back(std::move(s));
  }
  ReportInput in;
  in.runs.push_back(run);
  const auto data = report_data(in);
  const auto& r = data["runs"][0];
  std::vector<nlohmann::json> lines;
  for (const auto& s : r["series"])
    if (s["name"] == "gpu_power_watts") lines.push_back(s);
  ASSERT_EQ(lines.size(), 17u);
  std::set<std::string> kept;
  for (std::size_t i = 0; i < 16; ++i) kept.insert(lines[i]["labels"].get<std::string>());
  EXPECT_TRUE(kept.count("gpu=3"));  // its spike is the highest peak
  for (int g = 25; g < 40; ++g) EXPECT_TRUE(kept.count(fmt::format("gpu={}", g))) << g;
  const auto& rest = lines[16];
  EXPECT_EQ(rest["labels"], "others=24 series, their highest");
  EXPECT_EQ(rest["y"], (nlohmann::json{24.0, 24.0, 24.0}));  // gpu=24 is the highest of the others
  bool noted = false;
  for (const auto& n : r["notes"])
    noted |=
        n.get<std::string>().find("chart gpu_power_watts (gpu): 40 series; the 16 with the highest peaks") !=
        std::string::npos;
  EXPECT_TRUE(noted) << r["notes"].dump(1);
}

TEST(LoadRun, WhatIsNotARunIsRefusedClearly) {
  TempDir t;
  try {
    load_run(t.path());
    FAIL() << "an empty directory loaded";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("neither run.json nor requests.jsonl"));
  }
  EXPECT_THROW(load_run(t.path() / "missing"), UsageError);
  std::ofstream(t.path() / "run.json") << "this is not json";
  try {
    load_run(t.path());
    FAIL() << "a run.json that is not JSON loaded";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("run.json: not a JSON object"));
  }
}

TEST(LoadRun, RequestsWithoutRunJsonStillLoad) {
  TempDir t;
  fs::copy_file(kTestdata / "sampled/requests.jsonl", t.path() / "requests.jsonl");
  const RunData run = load_run(t.path());
  EXPECT_EQ(run.requests.size(), 3u);
  EXPECT_TRUE(run.summary_recomputed);
  EXPECT_THAT(run.notes.front(), HasSubstr("no run.json"));
}

// ---- requests.jsonl read in byte ranges

// A request line as bench writes it (the fields the report reads).
std::string request_line(int id, const std::string& tenant, const std::string& task_class, bool ok,
                         int events, const std::string& extra = "") {
  const long long t = 1'000'000'000LL + id * 10'000'000LL;
  std::string line =
      fmt::format(R"({{"id":{},"tenant":"{}","class":"{}","warmup":{},"t_sched_ns":{},"t_send_ns":{},)", id,
                  tenant, task_class, id % 17 == 3 ? "true" : "false", t, t + id % 5);
  if (ok && events > 0) {
    line +=
        fmt::format(R"("t_first_token_ns":{},"t_last_token_ns":{},"output_tokens":{},"event_offsets_ns":[)",
                    t + 1'000'000, t + 1'000'000LL * events, events);
    for (int e = 0; e < events; ++e)
      line += fmt::format("{}{}", e ? "," : "", 1'000'000LL * (e + 1) + e * id % 7);
    line += "],";
    if (id % 3 == 0) {
      line += R"("event_tokens":[)";
      for (int e = 0; e < events; ++e) line += fmt::format("{}{}", e ? "," : "", 1 + (e + id) % 3);
      line += "],";
    }
  }
  line +=
      fmt::format(R"("t_close_ns":{},"outcome":"{}"{}}})", t + 50'000'000, ok ? "ok" : "http_error", extra);
  return line;
}

// Raw bytes of every per-request array and everything else the arrays hold
// (NaN compares equal to NaN here).
std::string arrays_bytes(const RequestArrays& a) {
  std::string out;
  const auto add = [&out](const auto& v) {
    out += std::to_string(v.size()) + ":";
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  add(a.t_sched), add(a.t_send), add(a.t_first_token), add(a.t_last_token), add(a.t_close);
  add(a.output_tokens), add(a.itl_mean_ms), add(a.itl_max_ms), add(a.outcome), add(a.warmup);
  add(a.tenant), add(a.task_class);
  for (const auto& n : a.tenant_names) out += "tenant " + n + "\n";
  for (const auto& n : a.class_names) out += "class " + n + "\n";
  out += a.itl_ns.to_json().dump();
  return out;
}

std::string report_json(const RunData& run) {
  ReportInput in;
  in.runs.push_back(run);
  return report_data(in).dump();
}

// Loads dir with 1 and with each of `ranges` byte ranges: the same arrays,
// notes and report.
void expect_same_in_ranges(const fs::path& dir, const std::vector<unsigned>& ranges) {
  const RunData one = load_run(dir, LoadOptions{1});
  ASSERT_FALSE(one.summary_recomputed);  // a run.json with a summary: the read in ranges is taken
  const std::string want = arrays_bytes(one.requests);
  const std::string want_report = report_json(one);
  for (const unsigned n : ranges) {
    const RunData many = load_run(dir, LoadOptions{n});
    EXPECT_EQ(arrays_bytes(many.requests), want) << n << " ranges";
    EXPECT_EQ(many.request_lines_skipped, one.request_lines_skipped) << n << " ranges";
    EXPECT_EQ(many.notes, one.notes) << n << " ranges";
    EXPECT_EQ(report_json(many), want_report) << n << " ranges";
  }
}

const char* const kRunJsonWithSummary =
    R"({"tool":{"name":"tokenscope","command":"bench"},"partial":false,"summary":{"requests_total":1}})";

TEST(LoadRun, RequestsReadInByteRangesAreTheSameAsReadWhole) {
  TempDir t;
  std::ofstream(t.path() / "run.json") << kRunJsonWithSummary;
  std::string text;
  for (int id = 0; id < 400; ++id) {
    // Tenants first met in every part of the file, one only near the end.
    const std::string tenant = id == 390 ? "late" : fmt::format("t{}", (id * 7) % 13);
    const std::string task_class = fmt::format("c{}", (id / 50) % 4);
    text += request_line(id, tenant, task_class, id % 11 != 5, 1 + id % 9);
    text += id % 4 == 0 ? "\r\n" : "\n";
    if (id % 37 == 0) text += "\n  \t\r\n";                                       // blank lines
    if (id == 150) text += "not json\n";                                          // bad lines
    if (id == 250) text += std::string("{\"id\":7,\0\"outcome\":\"ok\"}\n", 25);  // a NUL byte
    if (id == 300)  // a line longer than a range
      text += request_line(1000, "long", "c0", true, 3,
                           fmt::format(R"(,"detail":"{}")", std::string(30000, 'x'))) +
              "\n";
  }
  text += R"({"id":5000,"tenant":"cut","t_sch)";  // a last line cut by a crash
  std::ofstream(t.path() / "requests.jsonl", std::ios::binary) << text;
  const RunData one = load_run(t.path(), LoadOptions{1});
  EXPECT_EQ(one.requests.size(), 401u);
  EXPECT_EQ(one.request_lines_skipped, 3u);
  expect_same_in_ranges(t.path(), {2, 3, 4, 5, 7, 8, 13, 64});
}

TEST(LoadRun, RangesSmallerThanALineAndAFileWithoutAFinalNewline) {
  TempDir t;
  std::ofstream(t.path() / "run.json") << kRunJsonWithSummary;
  std::string text = "\n" + request_line(0, "a", "x", true, 3) + "\r\n" + request_line(1, "b", "y", true, 2) +
                     "\n\n" + request_line(2, "a", "z", false, 0);  // no final newline
  std::ofstream(t.path() / "requests.jsonl", std::ios::binary) << text;
  EXPECT_EQ(load_run(t.path(), LoadOptions{1}).requests.size(), 3u);
  std::vector<unsigned> ranges;
  for (unsigned n = 2; n <= 40; ++n) ranges.push_back(n);
  ranges.push_back(static_cast<unsigned>(text.size()));      // one byte each
  ranges.push_back(static_cast<unsigned>(text.size()) + 9);  // more ranges than bytes
  expect_same_in_ranges(t.path(), ranges);
}

TEST(LoadRun, ABadLineInALaterRangeIsNumberedInTheFile) {
  TempDir t;
  std::ofstream(t.path() / "run.json") << kRunJsonWithSummary;
  std::string text;
  for (int id = 0; id < 100; ++id) {
    text += request_line(id, "a", "b", true, 2) + "\n";
    if (id == 10) text += "\n";  // a blank line counts as a line
  }
  text += "{\"id\":100,\"outcome\":\"sideways\"}\n";  // line 102, in the second half
  text += "also bad\n";                               // line 103
  for (int id = 101; id < 110; ++id) text += request_line(id, "a", "b", true, 2) + "\n";
  std::ofstream(t.path() / "requests.jsonl", std::ios::binary) << text;
  for (const unsigned n : {1u, 2u, 3u}) {
    const RunData run = load_run(t.path(), LoadOptions{n});
    EXPECT_EQ(run.requests.size(), 109u);
    EXPECT_EQ(run.request_lines_skipped, 2u);
    std::string notes;
    for (const auto& note : run.notes) notes += note + "\n";
    EXPECT_THAT(notes, HasSubstr("requests.jsonl: 2 bad lines skipped")) << n << " ranges";
    EXPECT_THAT(notes,
                HasSubstr("the first: requests.jsonl:102: field 'outcome': 'sideways' is not an outcome"))
        << n << " ranges";
  }
}

// requests.jsonl and samples.jsonl read at the same time give what they
// give read one after the other, notes in the same order.
TEST(LoadRun, ConcurrentReadsGiveWhatSerialReadsGive) {
  TempDir t;
  std::ofstream(t.path() / "run.json") << kRunJsonWithSummary;
  std::string requests = read_file(kTestdata / "sampled/requests.jsonl") + "{\"id\":\n";
  for (int id = 10; id < 200; ++id) requests += request_line(id, "t", "c", true, 4) + "\n";
  std::ofstream(t.path() / "requests.jsonl", std::ios::binary) << requests;
  std::ofstream(t.path() / "samples.jsonl", std::ios::binary)
      << read_file(kTestdata / "sampled/samples.jsonl") << "{\"t_ns\":-1,\"source\":\"x\"}\n";
  const RunData serial = load_run(t.path(), LoadOptions{1, false});
  const RunData concurrent = load_run(t.path(), LoadOptions{3, true});
  ASSERT_EQ(serial.notes.size(), 2u);
  EXPECT_THAT(serial.notes[0], HasSubstr("requests.jsonl: 1 bad line skipped"));
  EXPECT_THAT(serial.notes[1], HasSubstr("samples.jsonl: 1 bad line skipped"));
  EXPECT_EQ(concurrent.notes, serial.notes);
  EXPECT_EQ(arrays_bytes(concurrent.requests), arrays_bytes(serial.requests));
  EXPECT_EQ(concurrent.series.size(), serial.series.size());
  EXPECT_EQ(concurrent.sample_lines, serial.sample_lines);
  EXPECT_EQ(concurrent.sample_lines_skipped, 1u);
  EXPECT_EQ(concurrent.origin, serial.origin);
  EXPECT_EQ(report_json(concurrent), report_json(serial));
}

// A run.json without a summary: the summary is recomputed from one read of
// the whole file, whatever the ranges asked for.
TEST(LoadRun, TheSummaryIsRecomputedFromOneRead) {
  TempDir t;
  fs::copy_file(kTestdata / "partial/run.json", t.path() / "run.json");
  fs::copy_file(kTestdata / "partial/requests.jsonl", t.path() / "requests.jsonl");
  const RunData one = load_run(t.path(), LoadOptions{1});
  const RunData many = load_run(t.path(), LoadOptions{4});
  EXPECT_TRUE(many.summary_recomputed);
  EXPECT_EQ(many.summary, one.summary);
  EXPECT_EQ(arrays_bytes(many.requests), arrays_bytes(one.requests));
}

TEST(LoadReportInput, SweepsLoadTheirRatesInOrderAndDifferingSettingsAreNoted) {
  TempDir t;
  fs::create_directories(t.path() / "sweep");
  for (const char* rate : {"rate-10", "rate-2"})
    fs::copy(kTestdata / "sampled", t.path() / "sweep" / rate, fs::copy_options::recursive);
  std::ofstream(t.path() / "sweep/sweep.json")
      << R"({"curve":[{"rate_rps":2,"achieved_rps":1.9,"goodput_rps":1.9,"ttft_p99_ms":100,"tpot_p99_ms":10,)"
         R"("failed":0,"slo_pass":true}],"max_rate_meeting_slo":2,"partial":false})";
  const ReportInput in = load_report_input({t.path() / "sweep", kTestdata / "partial"});
  ASSERT_EQ(in.runs.size(), 3u);
  EXPECT_EQ(in.runs[0].name, "sweep/rate-2");
  EXPECT_EQ(in.runs[1].name, "sweep/rate-10");
  ASSERT_EQ(in.sweeps.size(), 1u);
  EXPECT_EQ(in.sweeps[0].runs, (std::vector<std::size_t>{0, 1}));
  ASSERT_EQ(in.notes.size(), 1u);
  EXPECT_THAT(in.notes[0], HasSubstr("differ in their effective settings (engine.gpu.name, "
                                     "engine.kv_cache_tokens, engine.tensor_parallel, load.rate_rps, "
                                     "target.in_process, target.model, target.url)"));
  EXPECT_THROW(load_report_input({}), UsageError);
}

TEST(LoadReportInput, ASweepDiffersInItsRateAloneAndAMissingRateIsANote) {
  TempDir t;
  fs::create_directories(t.path() / "sweep");
  for (const char* rate : {"rate-1", "rate-3"}) {
    fs::copy(kTestdata / "sampled", t.path() / "sweep" / rate, fs::copy_options::recursive);
    auto j = nlohmann::json::parse(read_file(t.path() / "sweep" / rate / "run.json"));
    j["settings"]["effective"]["load"]["rate_rps"] = std::atof(rate + 5);
    j["settings"]["effective"]["load"]["last_offset_s"] = std::atof(rate + 5) * 1.7;  // observed, not asked
    std::ofstream(t.path() / "sweep" / rate / "run.json", std::ios::trunc) << j.dump();
  }
  fs::create_directories(t.path() / "sweep" / "rate-9");  // a rate the sweep did not reach
  std::ofstream(t.path() / "sweep/sweep.json") << R"({"curve":[]})";
  const ReportInput in = load_report_input({t.path() / "sweep"});
  ASSERT_EQ(in.runs.size(), 2u);
  ASSERT_EQ(in.notes.size(), 1u) << in.notes[0];
  EXPECT_THAT(in.notes[0], HasSubstr("rate-9: left out: "));
  EXPECT_THAT(in.notes[0], HasSubstr("not a run directory"));
}

TEST(LoadReportInput, RunsNamedAlikeTakeTheirParentsNames) {
  TempDir t;
  for (const char* dir : {"a/run", "b/run"}) {
    fs::create_directories(t.path() / dir);
    fs::copy(kTestdata / "partial", t.path() / dir, fs::copy_options::recursive);
  }
  const ReportInput in = load_report_input({t.path() / "a" / "run", t.path() / "b" / "run"});
  ASSERT_EQ(in.runs.size(), 2u);
  EXPECT_EQ(in.runs[0].name, "a/run");
  EXPECT_EQ(in.runs[1].name, "b/run");
}

// ---- the data behind the page

TEST(Warnings, NameFailuresClientLagAndScrapeErrors) {
  RunData run = load_run(kTestdata / "sampled");
  // One request sent 80 ms after it was due: the client's lag. Another
  // waited 500 ms for a slot under a concurrency cap: not the client's.
  run.requests.t_send[0] = run.requests.t_sched[0] + 80'000'000;
  run.requests.t_dispatch[1] = run.requests.t_sched[1] + 500'000'000;
  run.requests.t_send[1] = run.requests.t_dispatch[1] + 1'000'000;
  run.summary["output_token_mismatches"] = 3;
  run.summary["output_tokens_total"] = 30;
  run.summary["output_tokens_client_counted"] = 27;
  std::string all;
  for (const auto& w : run_warnings(run)) all += w + "\n";
  EXPECT_THAT(all, HasSubstr("1 of 3 requests failed (http_error 1)"));
  EXPECT_THAT(all, HasSubstr("client lag: p99 send lag 80.0 ms (max 80.0 ms)"));
  EXPECT_THAT(all, HasSubstr("token check: 3 requests"));
  EXPECT_THAT(all, HasSubstr("27 events for 30 tokens: the server sent some tokens together"));
  EXPECT_THAT(all, HasSubstr("scrape errors: server (http://127.0.0.1:8000/metrics): 1 of 3 reads failed: "
                             "connection refused (1)"));
  EXPECT_THAT(all, Not(HasSubstr("unavailable")));
  std::string notes;
  for (const auto& n : run_notes(run)) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("sampling: gpu unavailable: no NVML library"));
}

TEST(ReportData, TimelineCountsPerWindow) {
  const ReportInput in = load_report_input({kTestdata / "partial"});
  ReportOptions o;
  o.window_s = 1.0;
  const nlohmann::json d = report_data(in, o);
  const auto& tl = d["runs"][0]["timeline"];
  EXPECT_EQ(tl["window_s"], 1.0);
  // Requests scheduled at 0 s, 1 s and 2 s from the origin; the run ends at 2.01 s.
  EXPECT_EQ(tl["planned_rps"], (nlohmann::json{1.0, 1.0, 1.0}));
  EXPECT_EQ(tl["completed_rps"], (nlohmann::json{1.0, 1.0, 0.0}));
  EXPECT_EQ(tl["failed_rps"], (nlohmann::json{0.0, 0.0, 1.0}));
  EXPECT_EQ(tl["ttft_p50_ms"], (nlohmann::json{100.0, 50.0, nullptr}));
  EXPECT_EQ(tl["in_flight"], (nlohmann::json{0.0, 0.0, 0.0}));
  EXPECT_EQ(tl["output_tokens_per_s"], (nlohmann::json{3.0, 3.0, 0.0}));
}

TEST(ReportData, HitRatePerWindowFromTheServersCounters) {
  const ReportInput in = load_report_input({kTestdata / "sampled"});
  ReportOptions o;
  o.window_s = 1.0;
  const nlohmann::json d = report_data(in, o);
  // 25 of 100 prompt tokens hit between the samples at 0 s and 1 s; no query after.
  EXPECT_EQ(d["runs"][0]["timeline"]["prefix_cache_hit_rate"], (nlohmann::json{0.25, nullptr, nullptr}));
  const ReportInput none = load_report_input({kTestdata / "partial"});
  const nlohmann::json without = report_data(none, o);
  for (const auto& v : without["runs"][0]["timeline"]["prefix_cache_hit_rate"]) EXPECT_TRUE(v.is_null());
}

TEST(ReportData, GoldenForThePartialAndTheSampledRun) {
  const ReportInput in = load_report_input({kTestdata / "partial", kTestdata / "sampled"});
  const nlohmann::json d = report_data(in);
  expect_golden(d.dump(1) + "\n", kTestdata / "golden/report_data.json");
}

TEST(Markdown, Golden) {
  const ReportInput in = load_report_input({kTestdata / "partial", kTestdata / "sampled"});
  expect_golden(render_markdown(report_data(in)), kTestdata / "golden/report.md");
}

// ---- the page

TEST(Html, IsOneSelfContainedFileWithTheDataIntact) {
  const ReportInput in = load_report_input({kTestdata / "partial", kTestdata / "sampled"});
  nlohmann::json d = report_data(in);
  d["notes"].push_back("a note with </script><!-- in it");
  const std::string html = render_html(d);
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr(std::string(assets::uplot_js().substr(0, 200))));
  EXPECT_THAT(html, HasSubstr(std::string(assets::report_js().substr(0, 200))));
  EXPECT_THAT(html, HasSubstr("uPlot " + std::string(assets::uplot_version())));
  // Nothing is loaded from elsewhere.
  EXPECT_THAT(html, ::testing::Not(HasSubstr("<script src")));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("<link")));
  // The data element holds exactly the data.
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto begin = html.find(open);
  ASSERT_NE(begin, std::string::npos);
  const auto end = html.find("</script>", begin);
  const auto back = nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
  EXPECT_EQ(back, d);
}

TEST(Html, AssetsAreTheInstalledUplot) {
  EXPECT_GT(assets::uplot_js().size(), 20000u);
  EXPECT_THAT(std::string(assets::uplot_js()), HasSubstr("uPlot"));
  EXPECT_THAT(std::string(assets::uplot_css()), HasSubstr(".uplot"));
  EXPECT_EQ(assets::uplot_version(), "1.6.32");
}

// ---- streaming reduction, slowest requests, steps, phases, probes

TEST(ColumnReducer, KeepsWhatMinMaxColumnsKeepsWithoutHoldingThePoints) {
  std::vector<double> x, y;
  for (int i = 0; i < 10000; ++i) {
    x.push_back(i * 0.01);
    y.push_back(std::sin(i * 0.05) + (i == 4321 ? 50.0 : 0.0));  // one spike
  }
  y[7000] = kNaN;  // a gap
  ColumnReducer r(x.front(), x.back(), 100);
  for (std::size_t i = 0; i < x.size(); ++i) r.add(x[i], y[i]);
  const XY got = r.result();
  const XY want = minmax_columns(x, y, 100);
  ASSERT_EQ(got.x.size(), want.x.size());
  for (std::size_t i = 0; i < got.x.size(); ++i) {
    EXPECT_DOUBLE_EQ(got.x[i], want.x[i]) << i;
    if (std::isnan(want.y[i]))
      EXPECT_TRUE(std::isnan(got.y[i])) << i;
    else
      EXPECT_DOUBLE_EQ(got.y[i], want.y[i]) << i;
  }
  EXPECT_LE(got.x.size(), 5u * 100);
  EXPECT_NE(std::find(got.y.begin(), got.y.end(), y[4321]), got.y.end());
}

TEST(ColumnReducer, AppendedReducersGiveWhatOneReducerOfEveryPointGives) {
  std::vector<double> x, y;
  for (int i = 0; i < 5000; ++i) {
    x.push_back(i * 0.01);
    y.push_back(std::cos(i * 0.07) * (i % 97 == 0 ? 9.0 : 1.0));
  }
  y[1234] = kNaN;
  ColumnReducer whole(0, 49.99, 37);
  for (std::size_t i = 0; i < x.size(); ++i) whole.add(x[i], y[i]);
  for (const std::size_t cut : {std::size_t{1}, std::size_t{777}, std::size_t{2500}, std::size_t{4999}}) {
    // The second part counted from 0: appended with the offset of the first.
    ColumnReducer first(0, 49.99, 37), second(0, 49.99, 37);
    for (std::size_t i = 0; i < cut; ++i) first.add(x[i], y[i]);
    for (std::size_t i = cut; i < x.size(); ++i) second.add(x[i], y[i] - 100.0);
    first.append(second, 100.0);
    const XY a = whole.result(), b = first.result();
    ASSERT_EQ(a.x, b.x) << cut;
    ASSERT_EQ(a.y.size(), b.y.size()) << cut;
    for (std::size_t i = 0; i < a.y.size(); ++i)
      if (std::isnan(a.y[i]))
        EXPECT_TRUE(std::isnan(b.y[i])) << cut << " " << i;
      else
        EXPECT_NEAR(a.y[i], b.y[i], 1e-9) << cut << " " << i;
  }
  ColumnReducer other(0, 1, 5);
  EXPECT_THROW(whole.append(other), std::invalid_argument);
}

TEST(ColumnReducer, PointsOutsideTheRangeGoToTheEdgeColumns) {
  ColumnReducer r(0, 10, 10);
  r.add(-5, 1);
  r.add(5, 2);
  r.add(50, 3);
  const XY got = r.result();
  EXPECT_EQ(got.x, (std::vector<double>{-5, 5, 50}));
  EXPECT_EQ(got.y, (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(ColumnReducer(0, 0, 10).result().x.empty());
}

SlowRequest slow(std::uint64_t id, Nanos e2e) {
  SlowRequest r;
  r.id = id;
  r.t_send = 1000;
  r.t_last_token = 1000 + e2e;
  return r;
}

TEST(SlowestRequests, KeepsTheNSlowestSlowestFirstAndMerges) {
  SlowestRequests a(3), b(3);
  for (std::uint64_t i = 0; i < 10; ++i) (i % 2 ? a : b).add(slow(i, static_cast<Nanos>((i * 7) % 10)));
  // e2e by id: 0 7 4 1 8 5 2 9 6 3 -> slowest: id 7 (9), id 4 (8), id 1 (7)
  EXPECT_FALSE(a.wants(0, 99));
  a.merge(std::move(b));
  const auto kept = a.take();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].id, 7u);
  EXPECT_EQ(kept[1].id, 4u);
  EXPECT_EQ(kept[2].id, 1u);
  // Ties: the lower id stays.
  SlowestRequests t(1);
  t.add(slow(5, 10));
  t.add(slow(2, 10));
  t.add(slow(9, 10));
  EXPECT_EQ(t.take().at(0).id, 2u);
}

TEST(SimRun, StepsSlowestRequestsAndHeatMap) {
  const RunData run = load_run(kTestdata / "sim");
  ASSERT_TRUE(run.steps.present);
  EXPECT_EQ(run.steps.steps, 273u);
  EXPECT_EQ(run.steps.lines_skipped, 0u);
  const auto find = [&](const char* name) -> const StepSeries* {
    for (const auto& s : run.steps.series)
      if (s.name == name) return &s;
    return nullptr;
  };
  for (const char* name : {"batch_seqs", "running", "waiting", "kv_usage", "prefill_tokens", "decode_tokens",
                           "preemptions_total", "tenant_switches_total"})
    ASSERT_NE(find(name), nullptr) << name;
  // 273 steps in 1000 columns: every step kept, on the run's time axis.
  EXPECT_EQ(find("batch_seqs")->t_s.size(), 273u);
  EXPECT_TRUE(std::is_sorted(find("kv_usage")->t_s.begin(), find("kv_usage")->t_s.end()));
  // Running totals never decrease.
  const auto& pre = find("preemptions_total")->v;
  EXPECT_TRUE(std::is_sorted(pre.begin(), pre.end()));

  ASSERT_EQ(run.slowest.size(), 16u);  // fewer requests than kSlowestKept: all of them
  for (std::size_t i = 1; i < run.slowest.size(); ++i)
    EXPECT_GE(run.slowest[i - 1].e2e(), run.slowest[i].e2e());
  EXPECT_EQ(run.slowest[0].event_times.size(), 24u);
  EXPECT_GE(run.slowest[0].t_first_scheduled, run.slowest[0].t_send);

  const nlohmann::json d = report_data(load_report_input({kTestdata / "sim"}));
  const auto& r = d["runs"][0];
  ASSERT_EQ(r["slowest"].size(), 16u);
  EXPECT_EQ(r["slowest"][0]["prefill_split"], "engine");
  EXPECT_EQ(r["slowest"][0]["events_ms"].size(), 24u);
  ASSERT_TRUE(r["heatmap"].is_object());
  EXPECT_EQ(r["heatmap"]["tokens_from"], "server");
  const auto& h = r["heatmap"]["ttft"];
  ASSERT_TRUE(h.is_object());
  EXPECT_EQ(h["x_edges"].size(), 11u);
  EXPECT_EQ(h["y_edges"].size(), 13u);
  double windows = 0;
  for (const auto& c : h["cells"]) {
    windows += c[2].get<double>();
    EXPECT_GE(c[3].get<double>(), h["tps_min"].get<double>());
    EXPECT_LE(c[3].get<double>(), h["tps_max"].get<double>());
  }
  EXPECT_EQ(windows, h["windows"].get<double>());
  // Two tenants: completed requests per tenant per window add up to all of them.
  const auto& tl = r["timeline"];
  ASSERT_EQ(tl["completed_rps_by_tenant"].size(), 2u);
  for (std::size_t k = 0; k < tl["t_s"].size(); ++k)
    EXPECT_NEAR(tl["completed_rps_by_tenant"][0]["completed_rps"][k].get<double>() +
                    tl["completed_rps_by_tenant"][1]["completed_rps"][k].get<double>(),
                tl["completed_rps"][k].get<double>(), 1e-9);
  EXPECT_EQ(r["steps"]["steps"], 273);
}

TEST(SimRun, ACutStepsFileIsReadUpToTheCutWithANote) {
  TempDir t;
  fs::copy(kTestdata / "sim", t.path() / "run");
  std::string steps = read_file(t.path() / "run" / "steps.jsonl");
  steps.resize(steps.size() - 40);  // a crash mid-line
  std::ofstream(t.path() / "run" / "steps.jsonl", std::ios::binary | std::ios::trunc) << steps;
  const RunData run = load_run(t.path() / "run");
  EXPECT_EQ(run.steps.steps, 272u);
  EXPECT_EQ(run.steps.lines_skipped, 1u);
  std::string notes;
  for (const auto& n : run.notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("steps.jsonl: 1 bad line skipped; the first: line 273"));
}

TEST(SimRun, StepsReadInRangesGiveWhatOneReadGives) {
  TempDir t;
  fs::copy(kTestdata / "sim", t.path() / "run");
  // A bad line in the middle of the file, so that it falls in a later range.
  std::string steps = read_file(t.path() / "run" / "steps.jsonl");
  std::size_t at = 0;
  for (int i = 0; i < 200; ++i) at = steps.find('\n', at) + 1;
  steps.insert(at, "{\"step\": oops}\n");
  std::ofstream(t.path() / "run" / "steps.jsonl", std::ios::binary | std::ios::trunc) << steps;
  const RunData one = load_run(t.path() / "run", LoadOptions{1});
  EXPECT_EQ(one.steps.steps, 273u);
  EXPECT_EQ(one.steps.lines_skipped, 1u);
  std::string notes;
  for (const auto& n : one.notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("steps.jsonl: 1 bad line skipped; the first: line 201: not a step record"));
  for (const unsigned n : {2u, 3u, 7u, 64u, 500u}) {
    const RunData many = load_run(t.path() / "run", LoadOptions{n});
    EXPECT_EQ(many.steps.steps, one.steps.steps) << n;
    EXPECT_EQ(many.notes, one.notes) << n;
    ASSERT_EQ(many.steps.series.size(), one.steps.series.size()) << n;
    for (std::size_t i = 0; i < one.steps.series.size(); ++i) {
      EXPECT_EQ(many.steps.series[i].name, one.steps.series[i].name);
      EXPECT_EQ(many.steps.series[i].t_s, one.steps.series[i].t_s) << n << " " << one.steps.series[i].name;
      EXPECT_EQ(many.steps.series[i].v, one.steps.series[i].v) << n << " " << one.steps.series[i].name;
    }
  }
}

// Step lines in the plain form sim writes are read by a fast path; the same
// lines in another form (their "t_ns" key spelled with a \u escape, which the
// fast path leaves to simdjson's DOM) give the same series and checklist
// inputs, value for value.
TEST(SimRun, StepLinesReadFastOrByTheDomGiveTheSameSteps) {
  TempDir t;
  fs::copy(kTestdata / "sim", t.path() / "plain");
  fs::copy(kTestdata / "sim", t.path() / "escaped");
  std::string steps = read_file(t.path() / "escaped" / "steps.jsonl");
  std::string out;
  std::size_t n = 0;
  for (std::size_t at = 0, next; at < steps.size(); at = next + 1) {
    next = steps.find('\n', at);
    if (next == std::string::npos) next = steps.size();
    std::string line = steps.substr(at, next - at);
    if (const auto k = line.find("\"t_ns\""); k != std::string::npos) {
      line.replace(k, 6, "\"t_\\u006es\"");
      ++n;
    }
    out += line + "\n";
  }
  ASSERT_GT(n, 200u);
  std::ofstream(t.path() / "escaped" / "steps.jsonl", std::ios::binary | std::ios::trunc) << out;
  const RunData plain = load_run(t.path() / "plain"), escaped = load_run(t.path() / "escaped");
  EXPECT_EQ(plain.steps.steps, escaped.steps.steps);
  EXPECT_EQ(plain.steps.lines_skipped, 0u);
  ASSERT_EQ(plain.steps.series.size(), escaped.steps.series.size());
  for (std::size_t i = 0; i < plain.steps.series.size(); ++i) {
    EXPECT_EQ(plain.steps.series[i].t_s, escaped.steps.series[i].t_s) << plain.steps.series[i].name;
    EXPECT_EQ(plain.steps.series[i].v, escaped.steps.series[i].v) << plain.steps.series[i].name;
  }
  EXPECT_EQ(plain.steps.stats.shapes.size(), escaped.steps.stats.shapes.size());
}

TEST(SimRun, RunningTotalsCarryOnAcrossRanges) {
  TempDir t;
  std::ofstream(t.path() / "requests.jsonl") << "";
  {
    std::ofstream steps(t.path() / "steps.jsonl");
    for (int i = 0; i < 5000; ++i)
      steps << R"({"step":)" << i << R"(,"t_ns":)" << i * 1000000LL << R"(,"seqs":)" << i % 7
            << R"(,"preemptions":)" << (i % 3 == 0 ? 2 : 0) << R"(,"kv_usage":0.5})"
            << "\n";
  }
  const RunData one = load_run(t.path(), LoadOptions{1});
  const auto total = [](const RunData& r) {
    for (const auto& s : r.steps.series)
      if (s.name == "preemptions_total") return s.v.back();
    return -1.0;
  };
  EXPECT_EQ(total(one), 2.0 * 1667);
  for (const unsigned n : {2u, 5u, 33u}) {
    const RunData many = load_run(t.path(), LoadOptions{n});
    ASSERT_EQ(many.steps.series.size(), one.steps.series.size());
    for (std::size_t i = 0; i < one.steps.series.size(); ++i) {
      EXPECT_EQ(many.steps.series[i].t_s, one.steps.series[i].t_s) << n;
      EXPECT_EQ(many.steps.series[i].v, one.steps.series[i].v) << n << " " << one.steps.series[i].name;
    }
  }
  // Fields the lines do not have are left out, not drawn as zeros.
  for (const auto& s : one.steps.series) EXPECT_NE(s.name, "waiting");
  for (const auto& n : one.notes) EXPECT_THAT(n, Not(HasSubstr("steps.jsonl")));
  // A last line out of time order: the steps before it are outside the axis, and said so.
  std::ofstream(t.path() / "steps.jsonl", std::ios::app) << R"({"step":1,"t_ns":2000000,"seqs":1})"
                                                         << "\n";
  std::string notes;
  for (const auto& n : load_run(t.path(), LoadOptions{3}).notes) notes += n + "\n";
  EXPECT_THAT(notes,
              HasSubstr("steps.jsonl: 4997 steps outside the time between the first and the last line"));
}

TEST(Phases, ReadFromPhasesJsonOnTheRunsTimeAxis) {
  TempDir t;
  fs::copy(kTestdata / "sim", t.path() / "run");
  const RunData plain = load_run(t.path() / "run");
  const Nanos o = plain.origin;
  std::ofstream(t.path() / "run" / "phases.json")
      << R"({"phases":[{"phase":"warm-up","start_ns":)" << o << R"(,"end_ns":)" << o + 1'000'000'000
      << R"(},{"phase":"steady","start_ns":)" << o + 1'000'000'000 << R"(,"end_ns":)" << o + 3'500'000'000
      << "}]}";
  const nlohmann::json d = report_data(load_report_input({t.path() / "run"}));
  const auto& p = d["runs"][0]["phases"];
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0]["phase"], "warm-up");
  EXPECT_EQ(p[0]["start_s"], 0.0);
  EXPECT_EQ(p[1]["start_s"], 1.0);
  EXPECT_EQ(p[1]["end_s"], 3.5);

  std::ofstream(t.path() / "run" / "phases.json", std::ios::trunc)
      << R"({"phases":[{"phase":"steady","start_ns":5}]})";
  const RunData bad = load_run(t.path() / "run");
  EXPECT_TRUE(bad.phases.empty());
  std::string notes;
  for (const auto& n : bad.notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("phases.json: phases[0]: expected"));
}

TEST(Probes, ResultFilesAndDirectoriesAreRead) {
  TempDir t;
  fs::create_directories(t.path() / "probes");
  std::ofstream(t.path() / "probes" / "cache-line.json")
      << R"({"probe":"cache-line","format_version":1,"environment":{"hostname":"h","cpu":{"model":"M"}},)"
      << R"("false_sharing":{"verdict":"costs 2x","ratios":[{"name":"packed/padded64","ratio":)"
      << R"({"n":3,"median":2,"ci95_low":null,"ci95_high":null,"values":[1.9,2,2.1]}}]}})";
  std::ofstream(t.path() / "probes" / "notes.json") << R"({"something":"else"})";
  const ReportInput in = load_report_input({t.path() / "probes"});
  ASSERT_EQ(in.probes.size(), 1u);
  EXPECT_EQ(in.probes[0].probe, "cache-line");
  EXPECT_TRUE(in.runs.empty());
  const nlohmann::json d = report_data(in);
  ASSERT_EQ(d["probes"].size(), 1u);
  const auto& p = d["probes"][0];
  EXPECT_EQ(p["false_sharing"]["ratios"][0]["ratio"]["median"], 2);
  EXPECT_FALSE(p["false_sharing"]["ratios"][0]["ratio"].contains("values"));  // repetitions left out
  EXPECT_EQ(p["environment"]["cpu"], "M");
  // One file; a JSON file that is not a probe's result is named.
  EXPECT_EQ(load_report_input({t.path() / "probes" / "cache-line.json"}).probes.size(), 1u);
  try {
    load_report_input({t.path() / "probes" / "notes.json"});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("notes.json: not a probe result"));
  }
  // The page holds the probe; rendering needs no run.
  EXPECT_THAT(render_html(d), HasSubstr("cache-line"));
}

// ---- agentic tasks (src/report/testdata/tasks: a warm-up task, one ok with
// a retrieval and a tool call side by side, one failed by its tool after
// retries, one cancelled)

TEST(Tasks, TheSectionHoldsTheSummaryTheCountsAndTheWaterfall) {
  const nlohmann::json d = report_data(load_report_input({kTestdata / "tasks"}));
  const auto& r = d["runs"][0];
  ASSERT_TRUE(r.contains("tasks")) << r.dump();
  const auto& t = r["tasks"];
  // run.json's summary as it is: what the tables show.
  EXPECT_EQ(t["summary"]["pass_rate"], 0.5);
  EXPECT_EQ(t["summary"]["completion_ms"]["p99"]["value"], 1999.0);
  EXPECT_EQ(t["summary"]["failures_by_class"]["http"], 1);
  EXPECT_EQ(t["summary"]["tasks_failed_by_class"]["http"], 1);
  EXPECT_EQ(t["summary"]["failures_by_step"]["api"], 1);
  EXPECT_EQ(t["summary"]["retried_by_class"]["http"], 2);
  EXPECT_EQ(t["summary"]["by_class"]["research"]["slo"]["met"], false);
  // The records' counts, the warm-up task apart as in the summary.
  EXPECT_EQ(t["records"],
            nlohmann::json({{"tasks", 3}, {"ok", 1}, {"failed", 1}, {"cancelled", 1}, {"warmup", 1}}));

  const auto& w = t["waterfall"];
  EXPECT_EQ(w["tasks"], 4);
  EXPECT_EQ(w["shown"], 4);
  EXPECT_EQ(w["slowest"], 3);  // every task after the warm-up
  EXPECT_EQ(w["sampled"], 1);  // the warm-up task
  ASSERT_EQ(w["rows"].size(), 4u);
  std::vector<int> ids;
  for (const auto& row : w["rows"]) ids.push_back(row["id"]);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3}));  // in start order
  EXPECT_EQ(w["rows"][0]["shown_as"], "sample");
  EXPECT_EQ(w["rows"][0]["warmup"], true);
  // On the run's time axis: seconds from the origin (the first request's t_sched, 1 s).
  const auto& ok = w["rows"][1];
  EXPECT_EQ(ok["shown_as"], "slowest");
  EXPECT_EQ(ok["sched_s"], 1.0);
  EXPECT_EQ(ok["start_s"], 1.001);
  EXPECT_EQ(ok["end_s"], 3.0);
  EXPECT_EQ(ok["duration_ms"], 1999.0);
  ASSERT_EQ(ok["steps"].size(), 4u);
  EXPECT_EQ(ok["steps"][1]["kind"], "retrieval");
  EXPECT_EQ(ok["steps"][2]["kind"], "tool");
  EXPECT_EQ(ok["steps"][1]["start_s"], ok["steps"][2]["start_s"]);  // side by side
  // The failed task: its failure and step, the failed step with its attempts;
  // the step it skipped is not drawn but counted.
  const auto& failed = w["rows"][2];
  EXPECT_EQ(failed["outcome"], "failed");
  EXPECT_EQ(failed["failure"], "http");
  EXPECT_EQ(failed["failed_step"], "api");
  EXPECT_EQ(failed["steps_total"], 4);
  EXPECT_EQ(failed["steps_started"], 3);
  ASSERT_EQ(failed["steps"].size(), 3u);
  const auto& api = failed["steps"][2];
  EXPECT_EQ(api["id"], "api");
  EXPECT_EQ(api["name"], "weather");
  EXPECT_EQ(api["outcome"], "failed");
  EXPECT_EQ(api["failure"], "http");
  EXPECT_EQ(api["attempts"], 3);
  EXPECT_EQ(api["retried"], nlohmann::json({"http", "http"}));
  EXPECT_EQ(api["duration_ms"], 500.0);
  EXPECT_EQ(w["rows"][3]["outcome"], "cancelled");

  // The Markdown has a row of the run's tasks; the page carries the data.
  EXPECT_THAT(render_markdown(d), HasSubstr("#### Agentic tasks"));
  EXPECT_THAT(render_markdown(d),
              HasSubstr("| tasks | 3 | 1 | 1 | 1 | 50.0% | 1999 | 1999 | 0.28 | http 1 |"));
  EXPECT_THAT(render_html(d), HasSubstr("\"failures_by_step\":{\"api\":1}"));
}

TEST(Tasks, RunsWithoutTasksHaveNoSection) {
  const nlohmann::json d = report_data(load_report_input({kTestdata / "partial", kTestdata / "sampled"}));
  for (const auto& r : d["runs"]) EXPECT_FALSE(r.contains("tasks")) << r["name"];
  EXPECT_THAT(render_markdown(d), Not(HasSubstr("Agentic tasks")));
  // Beside a run with tasks, a run without still has none.
  const nlohmann::json both = report_data(load_report_input({kTestdata / "sampled", kTestdata / "tasks"}));
  EXPECT_FALSE(both["runs"][0].contains("tasks"));
  EXPECT_TRUE(both["runs"][1].contains("tasks"));
}

TEST(Tasks, AWaterfallOfManyTasksIsBounded) {
  // 5,000 tasks 10 ms apart, of durations spread by a multiplicative hash;
  // every 50th failed; the first 10 warm-up tasks the slowest of all (cold
  // caches), which the slowest rows leave out; one task of 300 steps.
  TempDir dir;
  std::ofstream(dir.path() / "run.json") << kRunJsonWithSummary;
  std::ofstream f(dir.path() / "tasks.jsonl");
  constexpr int kTasks = 5000;
  const auto duration_ms = [](int i) { return i < 10 ? 100'000LL : 1 + (i * 7919LL) % 4999; };
  for (int i = 0; i < kTasks; ++i) {
    const long long start = 1'000'000'000LL + i * 10'000'000LL, end = start + duration_ms(i) * 1'000'000;
    const bool failed = i % 50 == 7;
    f << fmt::format(R"({{"id":{},"class":"c","outcome":"{}",{}"warmup":{},"t_sched_ns":{},"t_start_ns":{},)",
                     i, failed ? "failed" : "ok", failed ? R"("failure":"timeout","failed_step":"s0",)" : "",
                     i < 10 ? "true" : "false", start, start, end)
      << fmt::format(R"("t_end_ns":{},"steps":[)", end);
    const int steps = i == 4321 ? 300 : 2;
    for (int k = 0; k < steps; ++k) {
      const long long a = start + (end - start) * k / steps, b = start + (end - start) * (k + 1) / steps;
      f << fmt::format(
          R"({}{{"id":"s{}","kind":"{}","name":"n","outcome":"{}","t_start_ns":{},"t_end_ns":{}}})",
          k ? "," : "", k, k % 2 ? "tool" : "model", failed && k == 0 ? "failed" : "ok", a, b);
    }
    f << "]}\n";
  }
  f.close();
  const nlohmann::json d = report_data(load_report_input({dir.path()}));
  const auto& w = d["runs"][0]["tasks"]["waterfall"];
  EXPECT_EQ(w["tasks"], kTasks);
  ASSERT_EQ(w["rows"].size(), kTaskRowsShown);
  EXPECT_EQ(w["shown"], kTaskRowsShown);
  EXPECT_EQ(w["slowest"], kTaskSlowestShown);
  EXPECT_EQ(w["failed"], kTaskFailedShown);
  EXPECT_EQ(w["sampled"], kTaskRowsShown - kTaskSlowestShown - kTaskFailedShown);
  // The slowest after the warm-up, by duration: the ids whose hash is highest.
  std::vector<int> by_duration;
  for (int i = 10; i < kTasks; ++i) by_duration.push_back(i);
  std::stable_sort(by_duration.begin(), by_duration.end(),
                   [&](int a, int b) { return duration_ms(a) > duration_ms(b); });
  std::set<int> want(by_duration.begin(), by_duration.begin() + kTaskSlowestShown), slowest, failed;
  double prev = -1, first_sample = 1e9, last_sample = -1;
  for (const auto& row : w["rows"]) {
    const double start = row["start_s"];
    EXPECT_GE(start, prev);  // in start order
    prev = start;
    if (row["shown_as"] == "slowest") slowest.insert(row["id"].get<int>());
    if (row["shown_as"] == "failed") {
      failed.insert(row["id"].get<int>());
      EXPECT_EQ(row["outcome"], "failed");
    }
    if (row["shown_as"] == "sample") {
      first_sample = std::min(first_sample, start);
      last_sample = std::max(last_sample, start);
    }
    EXPECT_LE(row["steps"].size(), kTaskStepsShown);
  }
  EXPECT_EQ(slowest, want);
  EXPECT_EQ(failed.size(), kTaskFailedShown);
  // The sample spreads over the run (50 s of starts), not its first tasks.
  EXPECT_LT(first_sample, 5.0);
  EXPECT_GT(last_sample, 45.0);
  // A small page whatever the number of tasks.
  EXPECT_LT(d.dump().size(), 100'000u);
}

}  // namespace
}  // namespace tokenscope::report
