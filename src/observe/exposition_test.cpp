#include "observe/exposition.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace tokenscope::observe {
namespace {

const MetricFamily* family(const Exposition& e, std::string_view name) {
  for (const auto& f : e.families)
    if (f.name == name) return &f;
  return nullptr;
}

// The reasons of the rejected lines, one "LINE: REASON" each, for failure messages.
std::string rejections(const Exposition& e) {
  std::string s;
  for (const auto& r : e.rejected) s += std::to_string(r.line) + ": " + r.reason + "\n";
  return s;
}

// One line of Prometheus text 0.0.4 and the single rejection it must give.
void expect_rejected(const std::string& text, std::size_t line, std::string_view reason_part,
                     ExpositionFormat format = ExpositionFormat::kPrometheusText) {
  const Exposition e = parse_exposition(text, format);
  ASSERT_EQ(e.rejected_lines, 1u) << text << "\n" << rejections(e);
  ASSERT_EQ(e.rejected.size(), 1u);
  EXPECT_EQ(e.rejected[0].line, line) << text;
  EXPECT_NE(e.rejected[0].reason.find(reason_part), std::string::npos)
      << "reason: " << e.rejected[0].reason << "\nexpected to contain: " << reason_part;
}

// A vLLM V1 /metrics page as prometheus_client writes it (text 0.0.4):
// counters named with _total and their _created series as gauges of their own.
constexpr std::string_view kVllm = R"(# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 13215.0
python_gc_objects_collected_total{generation="1"} 2431.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 81920.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7330368e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.25
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7330368e+09
)";

TEST(Exposition, ReadsAVllmPageInPrometheusText) {
  const Exposition e = parse_exposition(kVllm);
  EXPECT_EQ(e.format, ExpositionFormat::kPrometheusText);
  EXPECT_EQ(e.rejected_lines, 0u) << rejections(e);
  EXPECT_EQ(e.lines, 23u);
  EXPECT_EQ(e.samples, 11u);
  ASSERT_EQ(e.families.size(), 6u);
  EXPECT_FALSE(e.eof_marker);

  const auto* running = family(e, "vllm:num_requests_running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->type, MetricType::kGauge);
  EXPECT_EQ(running->help, "Number of requests in model execution batches.");
  ASSERT_EQ(running->samples.size(), 1u);
  EXPECT_EQ(running->samples[0].labels,
            (Labels{{"engine", "0"}, {"model_name", "meta-llama/Llama-3.1-8B-Instruct"}}));
  EXPECT_EQ(running->samples[0].value, 3.0);
  EXPECT_FALSE(running->samples[0].timestamp_ns);

  // A 0.0.4 counter is named as its samples, _total included.
  const auto* prompt = family(e, "vllm:prompt_tokens_total");
  ASSERT_NE(prompt, nullptr);
  EXPECT_EQ(prompt->type, MetricType::kCounter);
  ASSERT_EQ(prompt->samples.size(), 1u);
  EXPECT_EQ(prompt->samples[0].value, 81920.0);
  // The declared gauge x_created keeps its own samples, though histogram x
  // would also take an x_created sample.
  const auto* created = family(e, "vllm:time_to_first_token_seconds_created");
  ASSERT_NE(created, nullptr);
  EXPECT_EQ(created->type, MetricType::kGauge);
  ASSERT_EQ(created->samples.size(), 1u);
  EXPECT_EQ(created->samples[0].value, 1.7330368e9);

  const auto* ttft = family(e, "vllm:time_to_first_token_seconds");
  ASSERT_NE(ttft, nullptr);
  EXPECT_EQ(ttft->type, MetricType::kHistogram);
  ASSERT_EQ(ttft->samples.size(), 5u);
  EXPECT_EQ(ttft->samples[0].name, "vllm:time_to_first_token_seconds_bucket");
  EXPECT_EQ(ttft->samples[2].labels[1], (Label{"le", "+Inf"}));
  EXPECT_EQ(ttft->samples[2].value, 42.0);
  EXPECT_EQ(ttft->samples[3].name, "vllm:time_to_first_token_seconds_count");
  EXPECT_EQ(ttft->samples[4].name, "vllm:time_to_first_token_seconds_sum");
  EXPECT_EQ(ttft->samples[4].value, 7.25);

  // Families in order of first appearance; flatten keeps that order.
  EXPECT_EQ(e.families[0].name, "python_gc_objects_collected_total");
  const auto flat = flatten(e);
  ASSERT_EQ(flat.size(), e.samples);
  EXPECT_EQ(flat[0].name, "python_gc_objects_collected_total");
  EXPECT_EQ(flat[0].labels, (Labels{{"generation", "0"}}));
  EXPECT_EQ(flat[0].value, 13215.0);
  EXPECT_EQ(flat.back().name, "vllm:time_to_first_token_seconds_created");

  // Moving the samples out gives the same series.
  Exposition copy = e;
  const auto moved = flatten(std::move(copy));
  ASSERT_EQ(moved.size(), flat.size());
  for (std::size_t i = 0; i < flat.size(); ++i) {
    EXPECT_EQ(moved[i].name, flat[i].name);
    EXPECT_EQ(moved[i].labels, flat[i].labels);
    EXPECT_EQ(moved[i].value, flat[i].value);
  }
}

// OpenMetrics 1.0 as prometheus_client writes it for
// application/openmetrics-text: counter families without _total, _created
// samples inside their family, exemplars, # UNIT and # EOF.
constexpr std::string_view kOpenMetrics = R"(# HELP vllm:prompt_tokens Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 81920.0 # {trace_id="4bf92f3577b34da6"} 512.0 1733036800.5
vllm:prompt_tokens_created{model_name="m"} 1.7330368e+09
# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
# UNIT vllm:e2e_request_latency_seconds seconds
vllm:e2e_request_latency_seconds_bucket{model_name="m",le="0.3"} 1.0
vllm:e2e_request_latency_seconds_bucket{model_name="m",le="1.0"} 5.0 # {trace_id="a"} 0.67
vllm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 7.0 # {} 12.5 1733036801
vllm:e2e_request_latency_seconds_count{model_name="m"} 7.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 21.5
vllm:e2e_request_latency_seconds_created{model_name="m"} 1.7330368e+09
# TYPE kv_blocks gaugehistogram
kv_blocks_bucket{le="16"} 3
kv_blocks_bucket{le="+Inf"} 4
kv_blocks_gcount 4
kv_blocks_gsum 50
# TYPE build info
build_info{version="0.9.2",revision="abc"} 1
# TYPE cache_mode stateset
cache_mode{cache_mode="lru"} 1
cache_mode{cache_mode="fifo"} 0
# TYPE step unknown
step 17 1733036802.125
# EOF
)";

TEST(Exposition, ReadsOpenMetricsWithExemplarsCreatedAndUnits) {
  const Exposition e = parse_exposition(kOpenMetrics);
  EXPECT_EQ(e.format, ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(e.rejected_lines, 0u) << rejections(e);
  EXPECT_TRUE(e.eof_marker);
  ASSERT_EQ(e.families.size(), 6u);

  const auto* prompt = family(e, "vllm:prompt_tokens");
  ASSERT_NE(prompt, nullptr);
  EXPECT_EQ(prompt->type, MetricType::kCounter);
  ASSERT_EQ(prompt->samples.size(), 2u);
  EXPECT_EQ(prompt->samples[0].name, "vllm:prompt_tokens_total");
  EXPECT_EQ(prompt->samples[0].value, 81920.0);   // the exemplar's 512 is dropped
  EXPECT_FALSE(prompt->samples[0].timestamp_ns);  // and so is its timestamp
  EXPECT_EQ(prompt->samples[1].name, "vllm:prompt_tokens_created");

  const auto* e2e = family(e, "vllm:e2e_request_latency_seconds");
  ASSERT_NE(e2e, nullptr);
  EXPECT_EQ(e2e->type, MetricType::kHistogram);
  EXPECT_EQ(e2e->unit, "seconds");
  ASSERT_EQ(e2e->samples.size(), 6u);
  EXPECT_EQ(e2e->samples[2].value, 7.0);
  EXPECT_EQ(e2e->samples[5].name, "vllm:e2e_request_latency_seconds_created");

  const auto* kv = family(e, "kv_blocks");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type, MetricType::kGaugeHistogram);
  ASSERT_EQ(kv->samples.size(), 4u);
  EXPECT_EQ(kv->samples[3].name, "kv_blocks_gsum");

  const auto* build = family(e, "build");
  ASSERT_NE(build, nullptr);
  EXPECT_EQ(build->type, MetricType::kInfo);
  ASSERT_EQ(build->samples.size(), 1u);
  EXPECT_EQ(build->samples[0].name, "build_info");

  const auto* mode = family(e, "cache_mode");
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->type, MetricType::kStateSet);
  EXPECT_EQ(mode->samples.size(), 2u);

  const auto* step = family(e, "step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->type, MetricType::kUntyped);
  ASSERT_EQ(step->samples.size(), 1u);
  EXPECT_EQ(step->samples[0].timestamp_ns, 1'733'036'802'125'000'000);
  EXPECT_EQ(flatten(e).size(), 16u);
}

TEST(Exposition, ChoosesTheFormat) {
  EXPECT_EQ(format_from_content_type("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(format_from_content_type("Application/OpenMetrics-Text"), ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(format_from_content_type("text/plain; version=0.0.4; charset=utf-8"),
            ExpositionFormat::kPrometheusText);
  EXPECT_EQ(format_from_content_type("application/openmetrics-textual"), ExpositionFormat::kPrometheusText);
  EXPECT_EQ(format_from_content_type(""), ExpositionFormat::kPrometheusText);

  EXPECT_EQ(parse_exposition("a 1\n# EOF\n").format, ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(parse_exposition("a 1\r\n# EOF").format, ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(parse_exposition("a 1\n# EOF\nb 2\n").format, ExpositionFormat::kPrometheusText);
  EXPECT_EQ(parse_exposition("a 1\n").format, ExpositionFormat::kPrometheusText);
  // Given, not guessed: "# EOF" is a comment in 0.0.4.
  const auto e = parse_exposition("a 1\n# EOF\n", ExpositionFormat::kPrometheusText);
  EXPECT_EQ(e.format, ExpositionFormat::kPrometheusText);
  EXPECT_FALSE(e.eof_marker);
  EXPECT_EQ(e.rejected_lines, 0u);
}

TEST(Exposition, UnescapesLabelValuesAndHelp) {
  const Exposition e = parse_exposition(
      "# HELP x A \\\\ backslash,\\na newline and \\\"quotes\\\" kept as written\n"
      "x{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",text=\"two\\nlines\",other=\"\\d\"} 1\n");
  ASSERT_EQ(e.rejected_lines, 0u) << rejections(e);
  ASSERT_EQ(e.families.size(), 1u);
  // 0.0.4 help escapes are \\ and \n only.
  EXPECT_EQ(e.families[0].help, "A \\ backslash,\na newline and \\\"quotes\\\" kept as written");
  EXPECT_EQ(e.families[0].samples[0].labels,
            (Labels{{"path", "C:\\dir"}, {"quote", "say \"hi\""}, {"text", "two\nlines"}, {"other", "\\d"}}));

  const Exposition om = parse_exposition("# HELP x say \\\"hi\\\"\\n\nx{a=\"\\\"\\\\\\n\"} 1\n# EOF\n");
  ASSERT_EQ(om.rejected_lines, 0u) << rejections(om);
  EXPECT_EQ(om.families[0].help, "say \"hi\"\n");
  EXPECT_EQ(om.families[0].samples[0].labels[0].value, "\"\\\n");
  // OpenMetrics knows no other escape.
  expect_rejected("x{a=\"\\d\"} 1\n# EOF\n", 1, "bad escape in a label value",
                  ExpositionFormat::kOpenMetrics);
  expect_rejected("# HELP x \\t\n# EOF\n", 1, "bad escape in the help text", ExpositionFormat::kOpenMetrics);
  // UTF-8 is kept as it is.
  const auto utf8 = parse_exposition("# HELP y Durée\ny{name=\"café ☕\"} 1\n");
  ASSERT_EQ(utf8.rejected_lines, 0u);
  EXPECT_EQ(utf8.families[0].help, "Durée");
  EXPECT_EQ(utf8.families[0].samples[0].labels[0].value, "café ☕");
}

TEST(Exposition, ReadsLabelSetsWithBlanksAndATrailingComma) {
  const Exposition e = parse_exposition("x { a = \"1\" ,\tb=\"2\", } 5\ny{} 6\nz{a=\"\"} 7\n  w 8  \n");
  ASSERT_EQ(e.rejected_lines, 0u) << rejections(e);
  ASSERT_EQ(e.families.size(), 4u);
  EXPECT_EQ(e.families[0].samples[0].labels, (Labels{{"a", "1"}, {"b", "2"}}));
  EXPECT_TRUE(e.families[1].samples[0].labels.empty());
  EXPECT_EQ(e.families[2].samples[0].labels, (Labels{{"a", ""}}));
  EXPECT_EQ(e.families[3].samples[0].value, 8.0);
}

TEST(Exposition, ReadsEverySpellingOfNumbers) {
  struct Case {
    const char* text;
    double value;
  };
  const Case cases[] = {{"1", 1.0},
                        {"-0.5", -0.5},
                        {".5", 0.5},
                        {"5.", 5.0},
                        {"+3", 3.0},
                        {"1e3", 1000.0},
                        {"1E-3", 0.001},
                        {"2.5e+2", 250.0},
                        {"+Inf", INFINITY},
                        {"-Inf", -INFINITY},
                        {"Inf", INFINITY},
                        {"inf", INFINITY},
                        {"+infinity", INFINITY},
                        {"-Infinity", -INFINITY},
                        {"1e-400", 0.0},
                        {"1.7976931348623157e308", 1.7976931348623157e308}};
  for (const auto& c : cases) {
    const auto e = parse_exposition(std::string("x ") + c.text + "\n");
    ASSERT_EQ(e.rejected_lines, 0u) << c.text << ": " << rejections(e);
    EXPECT_EQ(e.families[0].samples[0].value, c.value) << c.text;
  }
  for (const char* nan : {"NaN", "nan", "NAN"}) {
    const auto e = parse_exposition(std::string("x ") + nan + "\n");
    ASSERT_EQ(e.rejected_lines, 0u) << nan;
    EXPECT_TRUE(std::isnan(e.families[0].samples[0].value)) << nan;
  }
  // What Prometheus refuses: signed NaN, hex floats, digit underscores,
  // overflow, and anything that is not a number at all.
  for (const char* bad : {"+NaN", "-nan", "0x1p3", "0x10", "1_000", "1e400", "-1e400", "1e", "--1", "+-1",
                          ".", "e5", "1.2.3", "12abc", "Infinit", "nan(1)", "1,5"}) {
    SCOPED_TRACE(bad);
    expect_rejected(std::string("x ") + bad + "\n", 1, "bad value");
  }
}

TEST(Exposition, ReadsTimestampsAsEpochNanoseconds) {
  // 0.0.4: integer milliseconds.
  const auto e = parse_exposition("a 1 1733036800123\nb 2 -5\nc 3 +7\n");
  ASSERT_EQ(e.rejected_lines, 0u) << rejections(e);
  EXPECT_EQ(e.families[0].samples[0].timestamp_ns, 1'733'036'800'123'000'000);
  EXPECT_EQ(e.families[1].samples[0].timestamp_ns, -5'000'000);
  EXPECT_EQ(e.families[2].samples[0].timestamp_ns, 7'000'000);
  expect_rejected("a 1 1733036800.5\n", 1, "bad timestamp (expected integer milliseconds");
  expect_rejected("a 1 9300000000000\n", 1, "bad timestamp");  // past 2262 in nanoseconds
  expect_rejected("a 1 +-5\n", 1, "bad timestamp");

  // OpenMetrics: seconds, read exactly (a double would lose the last digits).
  const auto om =
      parse_exposition("a 1 1733036800.123456789\nb 2 1.5e9\nc 3 -1.25\nd 4 1733036800\ne 5 .5\n# EOF\n");
  ASSERT_EQ(om.rejected_lines, 0u) << rejections(om);
  EXPECT_EQ(om.families[0].samples[0].timestamp_ns, 1'733'036'800'123'456'789);
  EXPECT_EQ(om.families[1].samples[0].timestamp_ns, 1'500'000'000'000'000'000);
  EXPECT_EQ(om.families[2].samples[0].timestamp_ns, -1'250'000'000);
  EXPECT_EQ(om.families[3].samples[0].timestamp_ns, 1'733'036'800'000'000'000);
  EXPECT_EQ(om.families[4].samples[0].timestamp_ns, 500'000'000);
  expect_rejected("a 1 NaN\n# EOF\n", 1, "bad timestamp (expected seconds", ExpositionFormat::kOpenMetrics);
  expect_rejected("a 1 1e10\n# EOF\n", 1, "bad timestamp", ExpositionFormat::kOpenMetrics);  // past 2262
  expect_rejected("a 1 1.5e\n# EOF\n", 1, "bad timestamp", ExpositionFormat::kOpenMetrics);
}

TEST(Exposition, GroupsSamplesIntoDeclaredFamiliesOnly) {
  const Exposition e = parse_exposition(
      "lat_bucket{le=\"1\"} 1\n"  // no TYPE yet: a family of its own
      "# TYPE lat histogram\n"
      "lat_bucket{le=\"1\"} 2\n"
      "lat_bucket{le=\"+Inf\"} 3\n"
      "lat_sum 4\n"
      "lat_count 3\n"
      "# TYPE rpc summary\n"
      "rpc{quantile=\"0.5\"} 0.1\n"
      "rpc{quantile=\"0.99\"} 0.9\n"
      "rpc_sum 12\n"
      "rpc_count 40\n"
      "rpc_total 5\n"  // not a summary suffix: its own untyped family
      "free_count 9\n");
  ASSERT_EQ(e.rejected_lines, 0u) << rejections(e);
  ASSERT_EQ(e.families.size(), 5u);
  EXPECT_EQ(e.families[0].name, "lat_bucket");
  EXPECT_EQ(e.families[0].type, MetricType::kUntyped);
  EXPECT_EQ(e.families[0].samples.size(), 1u);
  EXPECT_EQ(e.families[1].name, "lat");
  EXPECT_EQ(e.families[1].samples.size(), 4u);
  EXPECT_EQ(e.families[2].name, "rpc");
  EXPECT_EQ(e.families[2].type, MetricType::kSummary);
  EXPECT_EQ(e.families[2].samples.size(), 4u);
  EXPECT_EQ(e.families[3].name, "rpc_total");
  EXPECT_EQ(e.families[4].name, "free_count");
  EXPECT_EQ(e.families[4].type, MetricType::kUntyped);
}

TEST(Exposition, KeepsDescriptorsOfFamiliesWithoutSamples) {
  const Exposition e =
      parse_exposition("# HELP idle Nothing yet.\n# TYPE idle histogram\n# TYPE other gauge\n");
  ASSERT_EQ(e.rejected_lines, 0u);
  ASSERT_EQ(e.families.size(), 2u);
  EXPECT_EQ(e.families[0].help, "Nothing yet.");
  EXPECT_EQ(e.families[0].type, MetricType::kHistogram);
  EXPECT_TRUE(e.families[0].samples.empty());
  EXPECT_EQ(e.samples, 0u);
  EXPECT_TRUE(flatten(e).empty());
}

TEST(Exposition, IgnoresBlankLinesCommentsAndCarriageReturnsInPrometheusText) {
  const Exposition e = parse_exposition(
      "\r\n# a comment\r\n#another\r\n   \r\n# HELP x Some help\r\n# TYPE x gauge\r\n#\r\nx{a=\"b\"} "
      "1\r\n\r\n"
      "# UNIT x seconds\r\ny 2 1000\r\n");
  ASSERT_EQ(e.rejected_lines, 0u) << rejections(e);
  EXPECT_EQ(e.lines, 11u);
  ASSERT_EQ(e.families.size(), 2u);
  EXPECT_EQ(e.families[0].help, "Some help");  // no '\r' left in it
  EXPECT_EQ(e.families[0].unit, "");           // # UNIT is a comment in 0.0.4
  EXPECT_EQ(e.families[0].samples[0].labels[0].value, "b");
  EXPECT_EQ(e.families[1].samples[0].value, 2.0);
  EXPECT_EQ(e.families[1].samples[0].timestamp_ns, 1'000'000'000);
}

TEST(Exposition, OpenMetricsHasNoBlankLinesNorComments) {
  const Exposition e =
      parse_exposition("a 1\r\n\n# just a comment\n#x\nb 2\n# EOF\r\n", ExpositionFormat::kOpenMetrics);
  EXPECT_EQ(e.rejected_lines, 3u) << rejections(e);
  ASSERT_EQ(e.rejected.size(), 3u);
  EXPECT_EQ(e.rejected[0].line, 2u);
  EXPECT_NE(e.rejected[0].reason.find("blank line"), std::string::npos);
  EXPECT_EQ(e.rejected[1].line, 3u);
  EXPECT_NE(e.rejected[1].reason.find("no comments"), std::string::npos);
  EXPECT_EQ(e.rejected[2].line, 4u);
  EXPECT_EQ(e.samples, 2u);  // the samples around them are kept
  EXPECT_TRUE(e.eof_marker);
}

TEST(Exposition, RejectsMalformedLinesWithLineAndReason) {
  // Each case: one bad line among good ones, its line number and reason.
  expect_rejected("ok 1\nx{a=\"1\",a=\"2\"} 1\n", 2, "label name 'a' given twice");
  expect_rejected("{a=\"1\"} 1\n", 1, "expected a metric name");
  expect_rejected("ok 1\n1x 2\n", 2, "expected a metric name");
  expect_rejected("x abc\n", 1, "bad value (expected a decimal number, NaN, +Inf or -Inf): 'abc'");
  expect_rejected("x{a=\"open} 1\n", 1, "unterminated quoted label value");
  expect_rejected("x{a=\"ends in a backslash\\", 1, "unterminated quoted label value");
  expect_rejected("x{a=\"1\" 1\n", 1, "expected ',' or '}' after the label value");
  expect_rejected("x{a=\"1\"\n", 1, "unterminated label set");
  expect_rejected("x{a=\"1\",\n", 1, "unterminated label set");
  expect_rejected("x{a 1\n", 1, "expected '=' after the label name");
  expect_rejected("x{a=1} 1\n", 1, "expected '\"' to open the label value");
  expect_rejected("x{1a=\"1\"} 1\n", 1, "expected a label name");
  expect_rejected("x{,} 1\n", 1, "expected a label name");
  expect_rejected("x\n", 1, "no value");
  expect_rejected("x{a=\"1\"}\n", 1, "no value");
  expect_rejected("x 1 2 3\n", 1, "text after the timestamp: '3'");
  expect_rejected("x/y 1\n", 1, "expected '{' or a blank after the metric name");
  expect_rejected("# HELP\n", 1, "expected a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) after '# HELP'");
  expect_rejected("# TYPE x\n", 1, "unknown metric type");
  expect_rejected("# TYPE x counters\n", 1,
                  "unknown metric type (0.0.4: counter, gauge, histogram, summary, untyped): 'counters'");
  expect_rejected("# TYPE x info\n", 1, "unknown metric type");  // OpenMetrics only
  expect_rejected("# TYPE x gauge extra\n", 1, "text after the metric type");
  expect_rejected("# TYPE x gauge\n# TYPE x counter\n", 2, "a second '# TYPE' for the metric: 'x'");
  expect_rejected("# HELP x a\n# HELP x b\n", 2, "a second '# HELP'");
  expect_rejected("x 1\n# TYPE x gauge\n", 2, "'# TYPE' after samples of its metric");
  expect_rejected("# TYPE h histogram\nh_bucket 1\n", 2, "a histogram bucket needs an 'le' label");
  expect_rejected("# TYPE h histogram\nh_bucket{le=\"big\"} 1\n", 2, "bad 'le' label");
  expect_rejected("# TYPE h histogram\nh 1\n", 2, "a sample named as its histogram family");
  expect_rejected("# TYPE s summary\ns 1\n", 2, "a summary quantile needs a 'quantile' label");
  expect_rejected("x 1 # {a=\"b\"\n", 1, "unterminated label set");
  expect_rejected("x 1 # oops\n", 1, "expected an exemplar");
  expect_rejected("x 1 # {a=\"b\"} nope\n", 1, "bad exemplar value");
  expect_rejected("x 1 # {a=\"b\"} 1 2 3\n", 1, "text after the exemplar");
}

TEST(Exposition, RejectsOpenMetricsViolations) {
  const auto om = ExpositionFormat::kOpenMetrics;
  expect_rejected("a 1\n", 2, "no '# EOF' line at the end", om);
  expect_rejected("a 1\n# EOF\nb 2\n", 3, "text after '# EOF'", om);
  const auto eof_now = parse_exposition("a 1\n# EOF now\n", om);  // not an EOF line, so no EOF either
  ASSERT_EQ(eof_now.rejected.size(), 2u);
  EXPECT_EQ(eof_now.rejected[0].line, 2u);
  EXPECT_NE(eof_now.rejected[0].reason.find("text after '# EOF' on its line: 'now'"), std::string::npos);
  EXPECT_EQ(eof_now.rejected[1].line, 3u);
  expect_rejected("# TYPE c counter\nc 1\n# EOF\n", 2,
                  "a sample named as its counter family (expected a suffix such as _total)", om);
  expect_rejected("# TYPE i info\ni 1\n# EOF\n", 2, "_info", om);
  expect_rejected("# TYPE x untyped\n# EOF\n", 1, "unknown metric type (OpenMetrics", om);
  expect_rejected("# UNIT x_bytes seconds\n# EOF\n", 1, "must end with '_' and its unit", om);
  expect_rejected("# UNIT x_seconds sec-onds\n# EOF\n", 1, "a unit is made of", om);
  expect_rejected("# UNIT x_seconds seconds\n# UNIT x_seconds seconds\n# EOF\n", 2, "a second '# UNIT'", om);
  // Every line after # EOF counts; the missing-EOF rejection is line N+1.
  const auto after = parse_exposition("a 1\n# EOF\nb 2\nc 3\n\n", om);
  EXPECT_EQ(after.rejected_lines, 3u);
  EXPECT_EQ(after.samples, 1u);
  EXPECT_EQ(after.rejected.back().line, 5u);
  const auto cut = parse_exposition("a 1\nb 2", om);
  ASSERT_EQ(cut.rejected.size(), 1u);
  EXPECT_EQ(cut.rejected[0].line, 3u);
  EXPECT_EQ(cut.samples, 2u);  // what came before the cut is kept
}

TEST(Exposition, RejectsInvalidUtf8) {
  expect_rejected("x{a=\"caf\xc3\"} 1\n", 1, "label value is not valid UTF-8: 'caf\\xc3'");
  expect_rejected("x{a=\"\xed\xa0\x80\"} 1\n", 1, "not valid UTF-8");  // a surrogate
  expect_rejected("x{a=\"\xc0\xaf\"} 1\n", 1, "not valid UTF-8");      // overlong
  expect_rejected("x{a=\"\\n\xff\"} 1\n", 1, "not valid UTF-8");       // on the escaped path too
  expect_rejected("# HELP x bad \xfe byte\n", 1, "help text is not valid UTF-8");
  expect_rejected("x\xe2\x82\xac 1\n", 1, "expected '{' or a blank");  // names are ASCII
  // In a comment, it does no harm: the comment is not kept.
  EXPECT_EQ(parse_exposition("# \xff\nx 1\n").rejected_lines, 0u);
}

TEST(Exposition, KeepsGoingAfterRejectedLinesAndBoundsWhatItKeeps) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += "garbage line " + std::to_string(i) + "\nok{i=\"" + std::to_string(i) + "\"} 1\n";
  const auto e = parse_exposition(text);
  EXPECT_EQ(e.lines, 2000u);
  EXPECT_EQ(e.samples, 1000u);
  EXPECT_EQ(e.rejected_lines, 1000u);
  ASSERT_EQ(e.rejected.size(), kMaxRejectedKept);
  EXPECT_EQ(e.rejected[0].line, 1u);
  EXPECT_EQ(e.rejected[99].line, 199u);
  // The offending text is quoted, bounded, and escaped.
  const auto long_line = parse_exposition("x " + std::string(10000, 'z') + "\n");
  ASSERT_EQ(long_line.rejected.size(), 1u);
  EXPECT_LT(long_line.rejected[0].reason.size(), 200u);
  EXPECT_NE(long_line.rejected[0].reason.find("'…"), std::string::npos);
  const auto binary = parse_exposition(std::string("x \0\x01", 4));
  ASSERT_EQ(binary.rejected.size(), 1u);
  EXPECT_NE(binary.rejected[0].reason.find("'\\0\\x01'"), std::string::npos) << binary.rejected[0].reason;
}

TEST(Exposition, ChecksManyLabelsWithoutComparingEveryPair) {
  std::string labels;
  for (int i = 0; i < 20000; ++i) labels += "l" + std::to_string(i) + "=\"v\",";
  const auto ok = parse_exposition("x{" + labels + "} 1\n");
  ASSERT_EQ(ok.rejected_lines, 0u);
  EXPECT_EQ(ok.families[0].samples[0].labels.size(), 20000u);
  const auto dup = parse_exposition("x{" + labels + "l777=\"again\"} 1\n");
  ASSERT_EQ(dup.rejected.size(), 1u);
  EXPECT_NE(dup.rejected[0].reason.find("label name 'l777' given twice"), std::string::npos);
}

TEST(Exposition, SeriesPastTheBoundAreCountedNotParsed) {
  std::string page = "# TYPE up gauge\nup 1\n";
  for (int i = 0; i < 1000; ++i) page += "x_" + std::to_string(i) + "{a=\"b\"} 1\n";
  page += "# TYPE late gauge\nlate 2\nnot a valid line at all\n";
  const auto e = parse_exposition(page, ExpositionFormat::kAuto, 100);
  EXPECT_EQ(e.samples, 100u);
  EXPECT_EQ(e.series_over_limit, 903u);  // x_99..x_999, late, and the bad line (not parsed: not rejected)
  EXPECT_EQ(e.rejected_lines, 0u);
  EXPECT_EQ(e.families.back().samples.size(), 1u);
  const auto all = parse_exposition(page);
  EXPECT_EQ(all.samples, 1002u);
  EXPECT_EQ(all.series_over_limit, 0u);
  // Families without samples are bounded too (a page of '# TYPE' lines).
  std::string types;
  for (int i = 0; i < 1000; ++i) types += "# TYPE t" + std::to_string(i) + " gauge\n";
  EXPECT_EQ(parse_exposition(types, ExpositionFormat::kAuto, 10).families.size(), 10u);
}

TEST(Exposition, SurvivesGarbage) {
  // Every byte value, lines of every length, nothing that parses: counted.
  std::string garbage;
  std::uint32_t x = 12345;
  for (int i = 0; i < 1 << 20; ++i) {
    x = x * 1664525u + 1013904223u;
    garbage += static_cast<char>(x >> 24);
  }
  for (const auto format : {ExpositionFormat::kAuto, ExpositionFormat::kOpenMetrics}) {
    const auto e = parse_exposition(garbage, format);
    EXPECT_GT(e.lines, 1000u);
    EXPECT_EQ(e.rejected.size(), std::min<std::size_t>(e.rejected_lines, kMaxRejectedKept));
    EXPECT_GT(e.rejected_lines, e.lines / 2);
    EXPECT_EQ(flatten(e).size(), e.samples);
  }
  EXPECT_EQ(parse_exposition("").lines, 0u);
  EXPECT_EQ(parse_exposition("").families.size(), 0u);
}

TEST(Exposition, NamesItsTypes) {
  EXPECT_EQ(metric_type_name(MetricType::kUntyped), "untyped");
  EXPECT_EQ(metric_type_name(MetricType::kGaugeHistogram), "gaugehistogram");
  EXPECT_EQ(metric_type_name(MetricType::kStateSet), "stateset");
}

}  // namespace
}  // namespace tokenscope::observe
