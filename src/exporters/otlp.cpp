// The OTLP/JSON encoding written from the OTLP specification
// (opentelemetry-proto docs/specification.md, "JSON Protobuf Encoding") and
// the message definitions of opentelemetry-proto (trace/v1/trace.proto,
// metrics/v1/metrics.proto, common/v1/common.proto): field names in
// lowerCamelCase, traceId (16 bytes) and spanId (8 bytes) as hex, enum values
// as integers (Span.kind CLIENT = 3, Status.code ERROR = 2,
// AggregationTemporality CUMULATIVE = 2), 64-bit integers (fixed64 times,
// counts, AnyValue.intValue) as decimal strings, doubles as JSON numbers
// with proto3 JSON's "NaN", "Infinity", "-Infinity".
#include "exporters/otlp.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_out.h"
#include "core/random.h"
#include "net/http_fetch.h"
#include "observe/canonical.h"

namespace tokenscope::exporters {

using namespace rundir;   // the run directory's readers
using namespace observe;  // observations and the canonical series

namespace {

using jsonout::append_int;
using jsonout::append_string;
using jsonout::append_uint;

// splitmix64's step from x (core/random.h): a bijection, so distinct inputs
// give distinct ids.
std::uint64_t mix(std::uint64_t x) {
  return splitmix64_next(x);
}

void append_hex(std::string& out, std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 15];
}

void append_nanos_string(std::string& out, std::int64_t v) {
  out += '"';
  append_int(out, v);
  out += '"';
}

// A proto3 JSON double.
void append_proto_double(std::string& out, double v) {
  if (std::isnan(v))
    out += "\"NaN\"";
  else if (std::isinf(v))
    out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  else
    append_double(out, v);
}

// Attributes: KeyValue {key, value: AnyValue}. `first` tracks the comma.
class Attributes {
 public:
  explicit Attributes(std::string& out) : out_(out) { out_ += "\"attributes\":["; }
  void str(std::string_view key, std::string_view v) {
    open(key);
    out_ += "{\"stringValue\":";
    append_string(out_, v);
    out_ += "}}";
  }
  void integer(std::string_view key, std::int64_t v) {
    open(key);
    out_ += "{\"intValue\":\"";
    append_int(out_, v);
    out_ += "\"}}";
  }
  void real(std::string_view key, double v) {
    open(key);
    out_ += "{\"doubleValue\":";
    append_proto_double(out_, v);
    out_ += "}}";
  }
  void boolean(std::string_view key, bool v) {
    open(key);
    out_ += v ? "{\"boolValue\":true}}" : "{\"boolValue\":false}}";
  }
  // ArrayValue {values: [AnyValue]}: a string[] attribute.
  void strings(std::string_view key, const std::vector<std::string>& v) {
    open(key);
    out_ += "{\"arrayValue\":{\"values\":[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) out_ += ',';
      out_ += "{\"stringValue\":";
      append_string(out_, v[i]);
      out_ += '}';
    }
    out_ += "]}}}";
  }
  // An int[] attribute (int64: values past it are cut to 63 bits, as the
  // request ids are).
  void integers(std::string_view key, const std::vector<std::uint64_t>& v) {
    open(key);
    out_ += "{\"arrayValue\":{\"values\":[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) out_ += ',';
      out_ += "{\"intValue\":\"";
      append_uint(out_, v[i] & 0x7fffffffffffffffULL);
      out_ += "\"}";
    }
    out_ += "]}}}";
  }
  void close() { out_ += ']'; }

 private:
  void open(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += "{\"key\":";
    append_string(out_, key);
    out_ += ",\"value\":";
  }
  std::string& out_;
  bool first_ = true;
};

// The OTLP envelope of one export request: everything before the list of
// spans (metrics) and after it.
std::string resource_prefix(const RunInfo& run, const OtlpOptions& o, const char* resource_key,
                            const char* scope_key, const char* items_key) {
  std::string s = fmt::format("{{\"{}\":[{{\"resource\":{{", resource_key);
  Attributes a(s);
  a.str("service.name", o.service_name);
  if (!run.version.empty()) a.str("service.version", run.version);
  if (!run.command.empty()) a.str("tokenscope.run.command", run.command);
  a.close();
  s += fmt::format("}},\"{}\":[{{\"scope\":{{\"name\":\"tokenscope\"", scope_key);
  if (!run.version.empty()) {
    s += ",\"version\":";
    append_string(s, run.version);
  }
  s += fmt::format("}},\"{}\":[", items_key);
  return s;
}
constexpr std::string_view kEnvelopeEnd = "]}]}]}";

// Collects items (spans, metrics) into bounded export requests.
class Batcher {
 public:
  Batcher(std::string prefix, std::size_t max_items, std::size_t max_bytes, const OtlpBatchSink& sink,
          std::uint64_t& requests)
      : prefix_(std::move(prefix)),
        max_items_(std::max<std::size_t>(max_items, 1)),
        max_bytes_(max_bytes),
        sink_(sink),
        requests_(requests) {
    body_ = prefix_;
  }
  // The body to append one item's JSON to (its comma is written).
  std::string& item() {
    if (items_ > 0) body_ += ',';
    return body_;
  }
  void done(std::uint64_t count = 1) {
    items_ += count;
    if (items_ >= max_items_ || body_.size() >= max_bytes_) flush();
  }
  bool empty() const { return items_ == 0; }
  void flush() {
    if (items_ == 0) return;
    body_ += kEnvelopeEnd;
    sink_(body_, items_);
    ++requests_;
    body_ = prefix_;
    items_ = 0;
  }

 private:
  std::string prefix_;
  std::size_t max_items_;
  std::size_t max_bytes_;
  const OtlpBatchSink& sink_;
  std::uint64_t& requests_;
  std::string body_;
  std::uint64_t items_ = 0;
};

struct Server {
  std::string address;
  int port = -1;
};

Server server_of(const std::string& url) {
  if (url.empty()) return {};
  try {
    const auto e = net::Endpoint::parse_url(url);
    return {e.host, e.port};
  } catch (const std::exception&) {
    return {};  // not an address to report; the spans do without it
  }
}

// The ids of a task's trace: a trace of its own, from the run and the task
// id, as a request's are from the run and its id. The run key is salted
// first: task ids and request ids are both small integers.
struct TaskIds {
  std::uint64_t hi = 0, lo = 0;  // the trace id
  std::uint64_t root = 0;        // the invoke_agent span
  // A step's span, from its id (unique in its task): a request of the step
  // finds its parent from its record's "task" and "step" alone.
  std::uint64_t step(std::string_view step_id) const {
    std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (const char c : step_id) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    return mix(lo ^ mix(h ^ hi)) | 1;
  }
};

TaskIds task_ids(std::uint64_t run_key, std::uint64_t task_id) {
  const std::uint64_t key = mix(run_key ^ 0x7461736b73ULL);  // "tasks"
  TaskIds ids;
  ids.hi = mix(key ^ mix(task_id)) | 1;  // never all zeros (an invalid id)
  ids.lo = mix(ids.hi ^ key);
  ids.root = mix(ids.lo ^ key) | 1;
  return ids;
}

void append_trace_and_span(std::string& b, std::uint64_t hi, std::uint64_t lo, std::uint64_t span,
                           std::uint64_t parent) {
  b += "{\"traceId\":\"";
  append_hex(b, hi);
  append_hex(b, lo);
  b += "\",\"spanId\":\"";
  append_hex(b, span);
  if (parent != 0) {
    b += "\",\"parentSpanId\":\"";
    append_hex(b, parent);
  }
  b += '"';
}

// parent: the step span of a task's model call (its trace is the task's),
// nullptr for a request of its own.
void write_span(std::string& b, const RequestRecord& r, std::uint64_t k, std::uint64_t run_key,
                const RunInfo& run, const ClockAnchor& clock, const std::string& operation,
                const std::string& provider, const Server& server, const OtlpOptions& o, OtlpStats& stats,
                const TaskIds* task, std::uint64_t parent) {
  const std::uint64_t hi = mix(run_key ^ mix(r.id)), lo = mix(hi ^ mix(k + 1)), span = mix(lo ^ run_key);
  if (task)
    append_trace_and_span(b, task->hi, task->lo, span | 1, parent);
  else
    append_trace_and_span(b, hi | 1, lo, span | 1, 0);
  b += ",\"name\":";
  append_string(b, run.model.empty() ? operation : operation + " " + run.model);
  b += ",\"kind\":3,\"startTimeUnixNano\":";
  append_nanos_string(b, clock.to_unix(r.start()));
  b += ",\"endTimeUnixNano\":";
  append_nanos_string(b, clock.to_unix(r.end()));
  b += ',';
  {
    Attributes a(b);
    a.str("gen_ai.operation.name", operation);
    a.str("gen_ai.provider.name", provider);
    if (!run.model.empty()) a.str("gen_ai.request.model", run.model);
    if (r.output_tokens_planned >= 0) a.integer("gen_ai.request.max_tokens", r.output_tokens_planned);
    if (r.prompt_tokens >= 0) a.integer("gen_ai.usage.input_tokens", r.prompt_tokens);
    if (r.output_tokens >= 0) a.integer("gen_ai.usage.output_tokens", r.output_tokens);
    if (!r.response_id.empty()) a.str("gen_ai.response.id", r.response_id);
    if (r.session >= 0)
      a.str("gen_ai.conversation.id", std::to_string(r.session));
    else if (r.task >= 0)  // a task's model call: the task is the conversation
      a.str("gen_ai.conversation.id", std::to_string(r.task));
    if (r.outcome != Outcome::kOk) a.str("error.type", outcome_name(r.outcome));
    if (!server.address.empty()) {
      a.str("server.address", server.address);
      a.integer("server.port", server.port);
    }
    if (r.http_status >= 0) a.integer("http.response.status_code", r.http_status);
    a.integer("tokenscope.request.id", static_cast<std::int64_t>(r.id & 0x7fffffffffffffffULL));
    a.str("tokenscope.outcome", outcome_name(r.outcome));
    if (!r.tenant.empty()) a.str("tokenscope.tenant", r.tenant);
    if (!r.task_class.empty()) a.str("tokenscope.class", r.task_class);
    if (r.session >= 0) a.integer("tokenscope.turn", r.turn);
    if (r.task >= 0) {
      a.integer("tokenscope.task.id", r.task);
      a.str("tokenscope.step.id", r.step);
    }
    if (r.warmup) a.boolean("tokenscope.warmup", true);
    if (r.t_sched >= 0 && r.t_send >= r.t_sched)
      a.real("tokenscope.queue_s", nanos_to_s(r.t_send - r.t_sched));
    // The server's time to first token as the client saw it: from the
    // request's send, so the client's queue is not in it.
    if (const Nanos first = r.first_token(); first >= 0 && r.t_send >= 0 && first >= r.t_send)
      a.real("tokenscope.time_to_first_token_s", nanos_to_s(first - r.t_send));
    if (r.server_prompt_ms >= 0) a.real("tokenscope.server_prompt_ms", r.server_prompt_ms);
    if (r.cached_tokens >= 0) a.integer("tokenscope.cached_tokens", r.cached_tokens);
    if (r.events_dropped > 0)
      a.integer("tokenscope.events_dropped",
                static_cast<std::int64_t>(r.events_dropped & 0x7fffffffffffffffULL));
    a.close();
  }
  b += ",\"events\":[";
  bool first_event = true;
  auto event = [&](Nanos t, std::string_view name, std::int64_t tokens) {
    if (!first_event) b += ',';
    first_event = false;
    b += "{\"timeUnixNano\":";
    append_nanos_string(b, clock.to_unix(t));
    b += ",\"name\":\"";
    b += name;
    b += '"';
    if (tokens >= 0) {
      b += ",\"attributes\":[{\"key\":\"tokenscope.tokens\",\"value\":{\"intValue\":\"";
      append_int(b, tokens);
      b += "\"}}]";
    }
    b += '}';
    ++stats.span_events;
  };
  if (r.t_send >= 0) event(r.t_send, "tokenscope.sent", -1);
  if (r.t_headers >= 0) event(r.t_headers, "tokenscope.headers", -1);
  if (o.token_events)
    for (std::size_t i = 0; i < r.event_times.size(); ++i)
      event(r.event_times[i], "tokenscope.token", r.event_tokens[i]);
  b += ']';
  if (r.outcome != Outcome::kOk) {
    b += ",\"status\":{\"code\":2,\"message\":";
    const std::string_view detail = r.detail.empty() ? outcome_name(r.outcome) : std::string_view(r.detail);
    append_string(b, utf8_prefix(detail, 500));
    b += '}';
  }
  b += '}';
  ++stats.spans;
}

// UCUM units (the OpenTelemetry metric convention) for the canonical units.
// ---------------------------------------------------------------- tasks
//
// A task is a trace, after the OpenTelemetry semantic conventions for GenAI
// agent spans (semantic-conventions docs/gen-ai/gen-ai-agent-spans.md,
// "Invoke agent span") and GenAI spans (docs/gen-ai/gen-ai-spans.md,
// "Execute tool span"), both of status Development, as read for this
// exporter:
//  * the root span: gen_ai.operation.name "invoke_agent", named
//    "invoke_agent {gen_ai.agent.name}", kind INTERNAL (the conventions take
//    INTERNAL for agents running in the caller's process, CLIENT for remote
//    agent services; the task driver is bench itself). The agent's name is
//    the task's class; the task is the conversation (gen_ai.conversation.id).
//    gen_ai.agent.id is left out: it identifies an agent of an agent service
//    (an assistant's id), and a class has no identity beyond its name.
//  * tool steps: "execute_tool", named "execute_tool {gen_ai.tool.name}",
//    kind INTERNAL, gen_ai.tool.type "function" (a tool the client runs with
//    the arguments the agent made); retrieval steps the same with
//    gen_ai.tool.type "datastore" (the conventions' type of a tool that
//    queries external data for retrieval-augmented tasks). The conventions
//    also define a "retrieval" operation, a CLIENT call to a vector store or
//    search service; a retrieval step is the agent calling its search tool,
//    so it is a tool execution.
//  * model steps: "chat" (what the task driver sends), kind INTERNAL: the
//    step spans its attempts, and each attempt is the request's CLIENT span,
//    a child of the step, in the task's trace.
// Failed steps and tasks: status ERROR, error.type the failure class
// (docs/tasks.md lists them).

struct TaskSpanContext {
  const RunInfo& run;
  const ClockAnchor& clock;
  const std::string& provider;
};

void append_status_error(std::string& b, std::string_view message) {
  b += ",\"status\":{\"code\":2,\"message\":";
  append_string(b, utf8_prefix(message, 500));
  b += '}';
}

void write_task_span(std::string& b, const TaskRecord& t, const TaskIds& ids, const TaskSpanContext& c) {
  append_trace_and_span(b, ids.hi, ids.lo, ids.root, 0);
  b += ",\"name\":";
  append_string(b, t.task_class.empty() ? std::string("invoke_agent") : "invoke_agent " + t.task_class);
  b += ",\"kind\":1,\"startTimeUnixNano\":";
  append_nanos_string(b, c.clock.to_unix(t.t_start));
  b += ",\"endTimeUnixNano\":";
  append_nanos_string(b, c.clock.to_unix(t.t_end));
  b += ',';
  std::int64_t input = -1, output = -1;
  std::vector<std::string> not_run;
  for (const auto& s : t.steps) {
    if (s.prompt_tokens >= 0) input = std::max<std::int64_t>(input, 0) + s.prompt_tokens;
    if (s.output_tokens >= 0) output = std::max<std::int64_t>(output, 0) + s.output_tokens;
    if (s.t_start < 0) not_run.push_back(s.id);
  }
  const bool failed = t.outcome != "ok";
  const std::string& failure = t.failure.empty() ? t.outcome : t.failure;
  {
    Attributes a(b);
    a.str("gen_ai.operation.name", "invoke_agent");
    a.str("gen_ai.provider.name", c.provider);
    if (!t.task_class.empty()) a.str("gen_ai.agent.name", t.task_class);
    a.str("gen_ai.conversation.id", std::to_string(t.id));
    if (!c.run.model.empty()) a.str("gen_ai.request.model", c.run.model);
    if (input >= 0) a.integer("gen_ai.usage.input_tokens", input);
    if (output >= 0) a.integer("gen_ai.usage.output_tokens", output);
    if (failed) a.str("error.type", failure);
    a.integer("tokenscope.task.id", static_cast<std::int64_t>(t.id & 0x7fffffffffffffffULL));
    a.str("tokenscope.task.outcome", t.outcome);
    if (!t.mode.empty()) a.str("tokenscope.task.mode", t.mode);
    if (!t.tenant.empty()) a.str("tokenscope.tenant", t.tenant);
    if (!t.failed_step.empty()) a.str("tokenscope.task.failed_step", t.failed_step);
    if (t.warmup) a.boolean("tokenscope.warmup", true);
    if (t.t_sched >= 0 && t.t_start >= t.t_sched)
      a.real("tokenscope.task.start_lag_s", nanos_to_s(t.t_start - t.t_sched));
    a.integer("tokenscope.task.steps", static_cast<std::int64_t>(t.steps.size()));
    if (!not_run.empty()) a.strings("tokenscope.task.steps_not_run", not_run);
    if (t.critical_path) {
      const TaskCriticalPath& p = *t.critical_path;
      a.strings("tokenscope.critical_path.steps", p.steps);
      const std::pair<const char*, double> parts[] = {{"tokenscope.critical_path.total_ms", p.total_ms},
                                                      {"tokenscope.critical_path.model_ms", p.model_ms},
                                                      {"tokenscope.critical_path.tool_ms", p.tool_ms},
                                                      {"tokenscope.critical_path.client_ms", p.client_ms},
                                                      {"tokenscope.critical_path.queue_ms", p.queue_ms}};
      for (const auto& [k, v] : parts)
        if (v >= 0) a.real(k, v);
    }
    a.close();
  }
  if (failed) {
    std::string message = failure;
    if (!t.failed_step.empty()) message += " at step " + t.failed_step;
    for (const auto& s : t.steps)
      if (s.id == t.failed_step && !s.detail.empty()) message += ": " + s.detail;
    append_status_error(b, message);
  }
  b += '}';
}

void write_step_span(std::string& b, const TaskRecord& t, const TaskStepRecord& s, bool critical,
                     const TaskIds& ids, const TaskSpanContext& c) {
  const bool model = s.kind == "model";
  append_trace_and_span(b, ids.hi, ids.lo, ids.step(s.id), ids.root);
  b += ",\"name\":";
  if (model)
    append_string(b, c.run.model.empty() ? std::string("chat") : "chat " + c.run.model);
  else
    append_string(b, "execute_tool " + s.name);
  b += ",\"kind\":1,\"startTimeUnixNano\":";
  append_nanos_string(b, c.clock.to_unix(s.t_start));
  b += ",\"endTimeUnixNano\":";
  append_nanos_string(b, c.clock.to_unix(s.t_end));
  b += ',';
  const bool failed = s.outcome == "failed";
  {
    Attributes a(b);
    if (model) {
      a.str("gen_ai.operation.name", "chat");
      a.str("gen_ai.provider.name", c.provider);
      if (!c.run.model.empty()) a.str("gen_ai.request.model", c.run.model);
      a.str("gen_ai.conversation.id", std::to_string(t.id));
      if (s.prompt_tokens >= 0) a.integer("gen_ai.usage.input_tokens", s.prompt_tokens);
      if (s.output_tokens >= 0) a.integer("gen_ai.usage.output_tokens", s.output_tokens);
    } else {
      a.str("gen_ai.operation.name", "execute_tool");
      a.str("gen_ai.tool.name", s.name);
      a.str("gen_ai.tool.type", s.kind == "retrieval" ? "datastore" : "function");
    }
    if (failed) a.str("error.type", s.failure.empty() ? std::string("failed") : s.failure);
    a.integer("tokenscope.task.id", static_cast<std::int64_t>(t.id & 0x7fffffffffffffffULL));
    a.str("tokenscope.step.id", s.id);
    a.str("tokenscope.step.kind", s.kind);
    if (!s.outcome.empty()) a.str("tokenscope.step.outcome", s.outcome);
    a.integer("tokenscope.step.attempts", s.attempts);
    if (!s.retried.empty()) a.strings("tokenscope.step.retried", s.retried);
    if (!s.requests.empty()) a.integers("tokenscope.step.requests", s.requests);
    if (s.cached_tokens >= 0) a.integer("tokenscope.cached_tokens", s.cached_tokens);
    if (!s.documents.empty()) a.strings("tokenscope.step.documents", s.documents);
    if (s.t_ready >= 0 && s.t_start >= s.t_ready)
      a.real("tokenscope.step.ready_to_start_s", nanos_to_s(s.t_start - s.t_ready));
    if (critical) a.boolean("tokenscope.step.critical", true);
    a.close();
  }
  if (failed)
    append_status_error(b, s.detail.empty() ? (s.failure.empty() ? "failed" : s.failure) : s.detail);
  b += '}';
}

std::string_view ucum(std::string_view unit) {
  if (unit == "requests") return "{request}";
  if (unit == "tokens") return "{token}";
  if (unit == "ratio" || unit == "bitmask") return "1";
  if (unit == "bytes") return "By";
  if (unit == "B/s") return "By/s";
  if (unit == "C") return "Cel";
  if (unit == "count") return "{count}";
  if (unit == "threads") return "{thread}";
  return unit;  // s, W, Hz
}

// One metric of one export request, its data points collected as text.
struct MetricBuffer {
  std::string name;
  const CanonicalDefinition* definition = nullptr;
  SeriesKind kind = SeriesKind::kGauge;
  std::string points;
  std::uint64_t count = 0;
};

class MetricsWriter {
 public:
  MetricsWriter(const RunInfo& run, const ClockAnchor& clock, const OtlpOptions& o, const OtlpBatchSink& sink,
                OtlpStats& stats)
      : prefix_(resource_prefix(run, o, "resourceMetrics", "scopeMetrics", "metrics")),
        clock_(clock),
        o_(o),
        sink_(sink),
        stats_(stats) {}

  void observation(const Observation& obs) {
    const std::int64_t t = clock_.to_unix(obs.t_ns);
    struct Histogram {
      const CanonicalDefinition* definition = nullptr;
      Labels labels;                                   // without le
      std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
      std::optional<double> sum, count;
    };
    std::vector<Histogram> histograms;
    for (const auto& s : obs.canonical) {
      const CanonicalName c = resolve_canonical(s.name);
      const SeriesKind kind = c.definition ? c.definition->kind : SeriesKind::kGauge;
      if (kind != SeriesKind::kHistogram) {
        MetricBuffer& m = metric(s.name, c.definition, kind);
        if (m.count++ > 0) m.points += ',';
        m.points += '{';
        point_attributes(m.points, s.labels, obs.source);
        if (kind == SeriesKind::kCounter) {
          m.points += ",\"startTimeUnixNano\":";
          append_nanos_string(m.points, start_of(obs.source, s.name, s.labels, t, s.value));
        }
        m.points += ",\"timeUnixNano\":";
        append_nanos_string(m.points, t);
        m.points += ",\"asDouble\":";
        append_proto_double(m.points, s.value);
        m.points += '}';
        ++points_;
        continue;
      }
      Labels labels;
      double le = 0;
      bool bad_le = false;
      for (const auto& l : s.labels) {
        if (l.name != "le") {
          labels.push_back(l);
        } else if (l.value == "+Inf") {
          le = INFINITY;
        } else {
          const char* end = l.value.data() + l.value.size();
          bad_le = std::from_chars(l.value.data(), end, le).ptr != end;
        }
      }
      if (c.member == CanonicalName::Member::kSeries ||
          (c.member == CanonicalName::Member::kBucket && bad_le))
        continue;  // a bare family name, or a bucket without a bound: nothing to place it in
      auto it = std::find_if(histograms.begin(), histograms.end(), [&](const Histogram& h) {
        return h.definition == c.definition && h.labels == labels;
      });
      if (it == histograms.end()) {
        histograms.push_back({c.definition, std::move(labels), {}, {}, {}});
        it = histograms.end() - 1;
      }
      if (c.member == CanonicalName::Member::kBucket) it->buckets.emplace_back(le, s.value);
      if (c.member == CanonicalName::Member::kSum) it->sum = s.value;
      if (c.member == CanonicalName::Member::kCount) it->count = s.value;
    }
    for (auto& h : histograms)
      histogram_point(h.definition, h.labels, h.buckets, h.sum, h.count, obs.source, t);
    if (points_ >= o_.points_per_request || bytes() >= o_.max_request_bytes) flush();
  }

  void flush() {
    if (points_ == 0) return;
    std::string body = prefix_;
    bool first = true;
    for (auto& m : metrics_) {
      if (m.count == 0) continue;
      if (!first) body += ',';
      first = false;
      body += "{\"name\":";
      append_string(body, m.name);
      if (m.definition) {
        body += ",\"description\":";
        append_string(body, m.definition->definition);
        body += ",\"unit\":";
        append_string(body, ucum(m.definition->unit));
      }
      switch (m.kind) {
        case SeriesKind::kGauge:
          body += ",\"gauge\":{\"dataPoints\":[";
          break;
        case SeriesKind::kCounter:
          body += ",\"sum\":{\"aggregationTemporality\":2,\"isMonotonic\":true,\"dataPoints\":[";
          break;
        case SeriesKind::kHistogram:
          body += ",\"histogram\":{\"aggregationTemporality\":2,\"dataPoints\":[";
          break;
      }
      body += m.points;
      body += "]}}";
      m.points.clear();
      m.count = 0;
    }
    body += kEnvelopeEnd;
    sink_(body, points_);
    stats_.metric_points += points_;
    ++stats_.metric_requests;
    points_ = 0;
  }

 private:
  MetricBuffer& metric(std::string_view name, const CanonicalDefinition* d, SeriesKind kind) {
    const auto it = index_.find(std::string(name));
    if (it != index_.end()) return metrics_[it->second];
    index_.emplace(std::string(name), metrics_.size());
    metrics_.push_back({std::string(name), d, kind, {}, 0});
    return metrics_.back();
  }

  std::size_t bytes() const {
    std::size_t n = prefix_.size();
    for (const auto& m : metrics_) n += m.points.size() + 200;
    return n;
  }

  static void point_attributes(std::string& out, const Labels& labels, const std::string& source) {
    Attributes a(out);
    for (const auto& l : labels) a.str(l.name, l.value);
    a.str("tokenscope.source", source);
    a.close();
  }

  // The start of a cumulative series: its first observation, and after a
  // reset (a value below the last) the observation before the reset.
  std::int64_t start_of(const std::string& source, std::string_view name, const Labels& labels,
                        std::int64_t t, double value) {
    std::string key = source;
    key += '\x1f';
    key += name;
    for (const auto& l : labels) {
      key += '\x1f';
      key += l.name;
      key += '=';
      key += l.value;
    }
    State& st = cumulative_[key];
    if (!st.seen) {
      st.start_unix = t;
      st.last = value;
      st.seen = true;
    } else {
      if (value < st.last) st.start_unix = st.last_t;
      st.last = value;
    }
    st.last_t = t;
    return st.start_unix;
  }

  void histogram_point(const CanonicalDefinition* d, const Labels& labels,
                       std::vector<std::pair<double, double>>& buckets, std::optional<double> sum,
                       std::optional<double> count, const std::string& source, std::int64_t t) {
    std::sort(buckets.begin(), buckets.end());
    // Prometheus buckets are cumulative (le); OTLP's are per bucket, with
    // the finite bounds listed and one more bucket above the last.
    double total = count.value_or(0);
    if (!buckets.empty() && std::isinf(buckets.back().first)) total = buckets.back().second;
    if (!std::isfinite(total) || total < 0) return;  // nothing countable
    const auto as_count = [](double v) { return static_cast<std::uint64_t>(std::llround(std::max(v, 0.0))); };
    MetricBuffer& m = metric(d->name, d, SeriesKind::kHistogram);
    if (m.count++ > 0) m.points += ',';
    m.points += '{';
    point_attributes(m.points, labels, source);
    m.points += ",\"startTimeUnixNano\":";
    append_nanos_string(m.points, start_of(source, d->name, labels, t, total));
    m.points += ",\"timeUnixNano\":";
    append_nanos_string(m.points, t);
    const std::uint64_t n = as_count(total);
    m.points += ",\"count\":\"";
    append_uint(m.points, n);
    m.points += '"';
    if (sum && std::isfinite(*sum)) {
      m.points += ",\"sum\":";
      append_double(m.points, *sum);
    }
    std::vector<double> bounds;
    std::vector<std::uint64_t> counts;
    std::uint64_t below = 0;
    for (const auto& [le, cum] : buckets) {
      if (std::isinf(le)) break;
      const std::uint64_t c = std::max(as_count(cum), below);  // cumulative counts never fall
      bounds.push_back(le);
      counts.push_back(c - below);
      below = c;
    }
    if (!bounds.empty()) {
      counts.push_back(n > below ? n - below : 0);
      m.points += ",\"bucketCounts\":[";
      for (std::size_t i = 0; i < counts.size(); ++i) {
        if (i) m.points += ',';
        m.points += '"';
        append_uint(m.points, counts[i]);
        m.points += '"';
      }
      m.points += "],\"explicitBounds\":[";
      for (std::size_t i = 0; i < bounds.size(); ++i) {
        if (i) m.points += ',';
        append_proto_double(m.points, bounds[i]);
      }
      m.points += ']';
    }
    m.points += '}';
    ++points_;
  }

  std::string prefix_;
  const ClockAnchor& clock_;
  const OtlpOptions& o_;
  const OtlpBatchSink& sink_;
  OtlpStats& stats_;
  std::vector<MetricBuffer> metrics_;
  std::unordered_map<std::string, std::size_t> index_;
  struct State {
    std::int64_t start_unix = 0;
    double last = 0;  // a sum's value, a histogram's count
    std::int64_t last_t = 0;
    bool seen = false;
  };
  std::unordered_map<std::string, State> cumulative_;
  std::uint64_t points_ = 0;
};

}  // namespace

OtlpStats write_otlp(const RunSource& source, const RunInfo& run, const OtlpOptions& o,
                     const OtlpBatchSink& traces, const OtlpBatchSink& metrics) {
  const std::optional<ClockAnchor> anchor = o.clock ? o.clock : run.clock;
  if (!anchor)
    throw UsageError(
        "the run has no wall-clock anchor (run.json \"clock\": {\"monotonic_ns\", \"unix_ns\"}), which OTLP "
        "needs "
        "to turn the run's monotonic times into Unix times; runs written before it was recorded cannot be "
        "exported to OTLP");
  const ClockAnchor clock = *anchor;
  OtlpStats stats;
  const std::string operation = run.api == "chat" ? "chat" : "text_completion", chat = "chat";
  // The OpenAI API is what the client spoke (the convention's "best
  // knowledge"); the simulator in virtual time speaks none.
  const std::string provider = run.command == "sim" ? "tokenscope" : "openai";
  const Server server = server_of(run.target_url);
  const std::uint64_t run_key = mix(static_cast<std::uint64_t>(clock.unix_ns)) ^
                                mix(static_cast<std::uint64_t>(clock.monotonic_ns) + 0x51ed27);
  {
    Batcher batch(resource_prefix(run, o, "resourceSpans", "scopeSpans", "spans"), o.spans_per_request,
                  o.max_request_bytes, traces, stats.trace_requests);
    // The tasks first: their step spans are the parents of their model
    // calls' request spans, which are re-parented only where the step's span
    // was written (8 bytes kept per step that ran).
    std::unordered_set<std::uint64_t> step_spans;
    if (auto tasks = source.open_tasks(o.bad_lines)) {
      stats.tasks_found = true;
      const TaskSpanContext context{run, clock, provider};
      TaskRecord t;
      std::unordered_set<std::string_view> critical;  // the task's critical path
      while (tasks->next(t)) {
        if (t.warmup && !o.include_warmup) {
          ++stats.warmup_tasks_left_out;
          continue;
        }
        if (t.t_start < 0 || t.t_end < 0) {
          ++stats.tasks_without_times;
          continue;
        }
        const TaskIds ids = task_ids(run_key, t.id);
        write_task_span(batch.item(), t, ids, context);
        batch.done();
        ++stats.spans;
        ++stats.tasks;
        critical.clear();
        if (t.critical_path) critical.insert(t.critical_path->steps.begin(), t.critical_path->steps.end());
        for (const auto& s : t.steps) {
          if (s.t_start < 0) continue;  // never ran
          write_step_span(batch.item(), t, s, critical.contains(s.id), ids, context);
          batch.done();
          ++stats.spans;
          ++stats.task_steps;
          step_spans.insert(ids.step(s.id));
        }
      }
      stats.tasks_read = tasks->stats();
    }
    auto reader = source.open_requests(o.bad_lines);
    RequestRecord r;
    for (std::uint64_t k = 0; reader.next(r); ++k) {
      if (r.warmup && !o.include_warmup) {
        ++stats.warmup_left_out;
        continue;
      }
      if (r.start() < 0) {
        ++stats.requests_without_times;
        continue;
      }
      TaskIds task;
      std::uint64_t parent = 0;
      if (r.task >= 0 && !step_spans.empty()) {
        task = task_ids(run_key, static_cast<std::uint64_t>(r.task));
        parent = task.step(r.step);
        if (!step_spans.contains(parent)) parent = 0;  // its task's record is not in tasks.jsonl
      }
      // A task's model calls are chat requests whatever --api says (the
      // task driver sends chat: tools and messages).
      write_span(batch.item(), r, k, run_key, run, clock, r.task >= 0 ? chat : operation, provider, server, o,
                 stats, parent != 0 ? &task : nullptr, parent);
      if (parent != 0) ++stats.requests_in_tasks;
      batch.done();
    }
    batch.flush();
    stats.requests_read = reader.stats();
  }
  if (auto samples = source.open_samples(o.bad_lines)) {
    stats.samples_found = true;
    MetricsWriter writer(run, clock, o, metrics, stats);
    Observation obs;
    while (samples->next(obs)) {
      ++stats.observations;
      writer.observation(obs);
    }
    writer.flush();
    stats.samples_read = samples->stats();
    stats.observations_without_series = samples->without_series();
  }
  return stats;
}

OtlpStats export_otlp(const std::filesystem::path& run_dir, const std::filesystem::path& out_dir,
                      const OtlpOptions& options) {
  RunSource source;
  source.dir = run_dir;
  const RunInfo run = read_run_info(run_dir);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create directory: {}", out_dir.string(), ec.message()));
  OutputFile traces(out_dir / "otlp_traces.json");
  std::optional<OutputFile> metrics;
  OtlpStats stats = write_otlp(
      source, run, options, [&](std::string_view body, std::uint64_t) { traces.write_line(body); },
      [&](std::string_view body, std::uint64_t) {
        if (!metrics) metrics.emplace(out_dir / "otlp_metrics.json");
        metrics->write_line(body);
      });
  // A run with samples.jsonl but no series in it still gets its (empty) file.
  if (stats.samples_found && !metrics) metrics.emplace(out_dir / "otlp_metrics.json");
  traces.commit();
  stats.bytes = traces.bytes();
  if (metrics) {
    metrics->commit();
    stats.bytes += metrics->bytes();
  }
  return stats;
}

bool otlp_retryable(int status) {
  return status == 0 || status == 429 || status == 502 || status == 503 || status == 504;
}

namespace {

constexpr std::size_t kKeptFailures = 5;

std::uint64_t rejected_count(const nlohmann::json& v) {
  // int64 in proto3 JSON: a string, or a number on decode.
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer())
    return static_cast<std::uint64_t>(std::max<std::int64_t>(v.get<std::int64_t>(), 0));
  if (v.is_string()) {
    std::uint64_t n = 0;
    const auto& s = v.get_ref<const std::string&>();
    if (std::from_chars(s.data(), s.data() + s.size(), n).ec == std::errc()) return n;
  }
  return 0;
}

}  // namespace

PushResult push_otlp(const std::filesystem::path& run_dir, const std::string& endpoint_url,
                     const PushOptions& options, const std::function<void(double)>& sleep) {
  const net::Endpoint endpoint = net::Endpoint::parse_url(endpoint_url);
  const auto wait =
      sleep ? sleep : [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
  PushResult result;
  int consecutive_failures = 0;
  std::uint64_t batches[2] = {0, 0};
  const auto send = [&](int signal, std::string_view body) {
    const char* name = signal == 0 ? "traces" : "metrics";
    const std::uint64_t batch = batches[signal]++;
    if (result.gave_up) {
      ++result.requests_not_sent;
      return;
    }
    net::FetchRequest req;
    req.method = "POST";
    req.path = signal == 0 ? "/v1/traces" : "/v1/metrics";
    req.body.assign(body);
    req.headers = options.headers;
    req.timeout_s = options.timeout_s;
    req.max_body_bytes = 64u << 10;
    net::FetchResult answer;
    int attempts = 0;
    double delay = options.retry_delay_s;
    for (;;) {
      ++attempts;
      try {
        answer = net::fetch(endpoint, options.client, req);
      } catch (const std::exception& e) {  // the host did not resolve
        answer = {};
        answer.error = e.what();
      }
      if (answer.ok() || !otlp_retryable(answer.error.empty() ? answer.status : 0) ||
          attempts > options.max_retries)
        break;
      ++result.retries;
      wait(delay);
      delay *= 2;
    }
    if (answer.ok()) {
      consecutive_failures = 0;
      ++result.requests_sent;
      const auto j = json_too_deep_at(answer.body) != std::string_view::npos
                         ? nlohmann::json(nlohmann::json::value_t::discarded)
                         : nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("partialSuccess") && j["partialSuccess"].is_object()) {
        const auto& p = j["partialSuccess"];
        std::uint64_t rejected = 0;
        if (p.contains("rejectedSpans")) rejected = rejected_count(p["rejectedSpans"]);
        if (p.contains("rejectedDataPoints")) rejected = rejected_count(p["rejectedDataPoints"]);
        (signal == 0 ? result.rejected_spans : result.rejected_points) += rejected;
        if (p.contains("errorMessage") && p["errorMessage"].is_string() &&
            result.partial_success_messages.size() < kKeptFailures)
          result.partial_success_messages.push_back(fmt::format(
              "{} batch {}: {}", name, batch, quote_input(p["errorMessage"].get<std::string>(), 300)));
      }
      return;
    }
    ++result.requests_failed;
    if (result.failures.size() < kKeptFailures)
      result.failures.push_back(
          {name, batch, answer.status, answer.error,
           answer.body.empty() ? "" : quote_input(answer.body, options.body_excerpt_bytes), attempts});
    if (++consecutive_failures >= std::max(options.max_consecutive_failures, 1)) result.gave_up = true;
  };
  RunSource source;
  source.dir = run_dir;
  const RunInfo run = read_run_info(run_dir);
  result.stats = write_otlp(
      source, run, options.otlp, [&](std::string_view body, std::uint64_t) { send(0, body); },
      [&](std::string_view body, std::uint64_t) { send(1, body); });
  return result;
}

std::string PushResult::describe() const {
  std::string s =
      fmt::format("OTLP push: {} of {} export requests accepted ({} spans, {} metric points)", requests_sent,
                  requests_sent + requests_failed + requests_not_sent, stats.spans, stats.metric_points);
  if (retries > 0) s += fmt::format(", {} retries", retries);
  if (rejected_spans > 0 || rejected_points > 0)
    s += fmt::format("; the endpoint rejected {} spans and {} data points", rejected_spans, rejected_points);
  if (requests_failed > 0) s += fmt::format("; {} failed", requests_failed);
  if (gave_up) s += fmt::format("; gave up after failures in a row, {} not sent", requests_not_sent);
  for (const auto& f : failures) {
    s += fmt::format("\n  {} batch {}: ", f.signal, f.batch);
    if (!f.error.empty())
      s += f.error;
    else
      s += fmt::format("HTTP {}", f.status);
    if (!f.body.empty()) s += " " + f.body;
    if (f.attempts > 1) s += fmt::format(" ({} attempts)", f.attempts);
  }
  for (const auto& m : partial_success_messages) s += "\n  partial success: " + m;
  return s;
}

}  // namespace tokenscope::exporters
