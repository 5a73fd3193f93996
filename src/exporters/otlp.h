// A run as OpenTelemetry data, in the OTLP/JSON encoding ("JSON Protobuf
// Encoding" of the OTLP specification, opentelemetry-proto
// docs/specification.md: proto3 JSON with lowerCamelCase keys, traceId and
// spanId as hex, enums as integers, 64-bit integers as decimal strings).
//
//  * Traces: one span per request (ExportTraceServiceRequest >
//    resourceSpans > scopeSpans > spans), a trace of its own each (ids
//    derived from the run's clock anchor and the request id, so that the
//    same run exports the same ids). Span kind CLIENT, named
//    "{gen_ai.operation.name} {gen_ai.request.model}" with the attributes of
//    the OpenTelemetry GenAI semantic conventions ("Semantic conventions for
//    generative client AI spans", Inference) where the record has them, and
//    tokenscope.* for the rest; one span event per output event.
//  * Tasks (tasks.jsonl, docs/tasks.md): a trace each, after the GenAI
//    agent conventions: an "invoke_agent {class}" root span over the task,
//    and a child span per step that ran ("execute_tool {tool}" for tool and
//    retrieval steps, "chat {model}" for model steps). The request span of a
//    task's model call moves into the task's trace as a child of its step's
//    span (requests.jsonl's "task" and "step" name it). otlp.cpp lists the
//    conventions' choices.
//  * Metrics: samples.jsonl's canonical series (ExportMetricsServiceRequest),
//    gauges as Gauge, counters as cumulative monotonic Sum, histogram
//    families as cumulative Histogram, a data point per observation.
//
// Times: the run's monotonic ns mapped to Unix ns with run.json's clock
// anchor (rundir/readers.h ClockAnchor); without one the export stops with a
// UsageError (or takes OtlpOptions::clock).
//
// Files: otlp_traces.json and otlp_metrics.json are JSON Lines, one export
// request object per line, as the OpenTelemetry Collector's file exporter
// writes them: a large run is many bounded requests, and no file needs to
// be held whole to be read back or sent. Push: the same request objects,
// POSTed to ENDPOINT/v1/traces and ENDPOINT/v1/metrics (OTLP/HTTP).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "exporters/output.h"
#include "net/http_client.h"

namespace tokenscope::exporters {

struct OtlpOptions {
  // Bounds of one export request: it is closed at this many spans (metric
  // data points), or once its text passes max_request_bytes (the OTLP
  // specification recommends receivers accept up to 20 MiB).
  std::size_t spans_per_request = 512;
  std::size_t points_per_request = 4096;
  std::size_t max_request_bytes = 4u << 20;
  bool token_events = true;  // a span event per output event
  bool include_warmup = true;
  BadLines bad_lines = BadLines::kFail;
  std::optional<ClockAnchor> clock;  // instead of run.json's
  std::string service_name = "tokenscope";
};

struct OtlpStats {
  std::uint64_t spans = 0;
  std::uint64_t span_events = 0;
  std::uint64_t metric_points = 0;    // data points, all metric types
  std::uint64_t trace_requests = 0;   // ExportTraceServiceRequest objects
  std::uint64_t metric_requests = 0;  // ExportMetricsServiceRequest objects
  std::uint64_t bytes = 0;
  std::uint64_t warmup_left_out = 0;
  std::uint64_t requests_without_times = 0;
  bool samples_found = false;
  std::uint64_t observations = 0;
  std::uint64_t observations_without_series = 0;
  ReadStats requests_read;
  ReadStats samples_read;
  // tasks.jsonl (agentic tasks, docs/tasks.md); their spans count in `spans` too
  bool tasks_found = false;
  std::uint64_t tasks = 0;              // invoke_agent spans
  std::uint64_t task_steps = 0;         // step spans (steps that ran)
  std::uint64_t requests_in_tasks = 0;  // request spans made children of their step's span
  std::uint64_t tasks_without_times = 0;
  std::uint64_t warmup_tasks_left_out = 0;
  ReadStats tasks_read;
};

// The export requests in order, each handed whole to `traces` / `metrics`
// (one JSON object, no newline) with how many spans or points it holds.
// Throws InputError (bad input), UsageError (no clock anchor).
using OtlpBatchSink = std::function<void(std::string_view body, std::uint64_t items)>;
OtlpStats write_otlp(const RunSource& source, const RunInfo& run, const OtlpOptions& options,
                     const OtlpBatchSink& traces, const OtlpBatchSink& metrics);

// Writes out_dir/otlp_traces.json and out_dir/otlp_metrics.json (the latter
// only when the run has samples.jsonl), each through NAME.tmp.
OtlpStats export_otlp(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir,
                      const OtlpOptions& options = {});

struct PushOptions {
  OtlpOptions otlp;
  net::ClientOptions client;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. authorization
  double timeout_s = 30.0;                                   // per POST
  // Retryable answers (429, 502, 503, 504, or no answer) are sent again up
  // to max_retries times, after retry_delay_s, doubled each time.
  int max_retries = 2;
  double retry_delay_s = 1.0;
  // After this many requests in a row failed for good, the rest is not sent
  // (an endpoint that is down would otherwise cost every batch its retries).
  int max_consecutive_failures = 3;
  std::size_t body_excerpt_bytes = 300;
};

struct PushFailure {
  std::string signal;       // "traces" or "metrics"
  std::uint64_t batch = 0;  // 0-based index among that signal's requests
  int status = 0;           // HTTP status, 0 when no answer came
  std::string error;        // why no answer came ("" when one did)
  std::string body;         // the answer's body, quoted and cut (quote_input)
  int attempts = 0;
};

struct PushResult {
  OtlpStats stats;
  std::uint64_t requests_sent = 0;  // POSTs answered 2xx
  std::uint64_t requests_failed = 0;
  std::uint64_t requests_not_sent = 0;  // after giving up
  std::uint64_t retries = 0;
  // Partial success (a 2xx whose body names rejected items).
  std::uint64_t rejected_spans = 0;
  std::uint64_t rejected_points = 0;
  std::vector<std::string> partial_success_messages;  // the first few
  std::vector<PushFailure> failures;                  // the first few (all are counted)
  bool gave_up = false;
  bool ok() const {
    return requests_failed == 0 && requests_not_sent == 0 && rejected_spans == 0 && rejected_points == 0;
  }
  // One paragraph for the terminal: what was sent, and the first failures.
  std::string describe() const;
};

// Sends the run to an OTLP/HTTP endpoint (base URL: /v1/traces and
// /v1/metrics are appended). Failures of the endpoint are in the result,
// never thrown: pushing is a side job of a run. Throws UsageError for an
// endpoint that is not an http(s) URL, and what write_otlp throws.
// sleep is how a retry waits (tests pass one that does not).
PushResult push_otlp(const std::filesystem::path& run_dir, const std::string& endpoint_url,
                     const PushOptions& options = {}, const std::function<void(double seconds)>& sleep = {});

// The answer of one POST, as push_otlp judges it (exposed for tests).
// OTLP/HTTP: 2xx is accepted (a body may report partial success), 429, 502,
// 503 and 504 are worth retrying, any other status is final.
bool otlp_retryable(int status);

}  // namespace tokenscope::exporters
