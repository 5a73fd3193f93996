#include "bench/bench_workload.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/random.h"
#include "core/text_reader.h"
#include "core/yaml_fields.h"
#include "workload/arrivals.h"
#include "workload/lengths.h"
#include "workload/synthetic.h"

namespace tokenscope::bench {

namespace {

constexpr std::uint32_t kMaxTurns = 1000;
// Multimodal inputs: at most this many images per request, this many pixels
// a side, this long an audio clip (docs/workloads.md "Images and audio").
// Bounded so that the largest body (8 images of 4,096 px: 8 x 3.4 MB of
// base64; 120 s of audio: 5.1 MB) stays within a server's body limit (serve:
// --max-body-bytes, 8 MiB by default; bench's in-process server: 64 MiB).
constexpr std::uint32_t kMaxImages = 8;
constexpr std::uint32_t kMaxImageSide = 4096;
constexpr std::uint32_t kMaxAudioMs = 120'000;

// The largest value a distribution draws (nullopt: unbounded).
std::optional<double> upper_bound(const workload::LengthDistribution& d) {
  if (d.max > 0) return d.max;
  switch (d.kind) {
    case workload::LengthKind::kFixed:
      return d.a;
    case workload::LengthKind::kUniform:
      return d.b;
    case workload::LengthKind::kEmpirical:
      return d.values.empty() ? 0.0
                              : static_cast<double>(*std::max_element(d.values.begin(), d.values.end()));
    default:
      return std::nullopt;
  }
}

// Typed access to a YAML mapping with errors naming file, line and field
// (core/yaml_fields.h), and what only workload files hold.
struct Reader : yaml::Fields {
  using Fields::Fields;
  double number(const YAML::Node& n, const std::string& field, double min, bool min_inclusive) const {
    return Fields::number(n, field, min, std::numeric_limits<double>::infinity(), !min_inclusive,
                          fmt::format("a number {} {}", min_inclusive ? ">=" : ">", min));
  }
  std::optional<double> opt_number(const YAML::Node& map, const char* key, const std::string& prefix,
                                   double min, bool inclusive) const {
    const YAML::Node n = map[key];
    if (!n) return std::nullopt;
    return number(n, prefix + key, min, inclusive);
  }
  std::uint64_t integer(const YAML::Node& n, const std::string& field, double min, double max) const {
    return whole(n, field, min, max);
  }
  workload::LengthDistribution length(const YAML::Node& n, const std::string& field,
                                      workload::LengthRole role) const {
    const std::string spec = string(n, field);
    try {
      return workload::parse_length_spec(spec, field, role);
    } catch (const UsageError& e) {
      fail(n, field, e.what());
    }
  }
};

struct ClassSpec {
  std::string name;
  double share = 1.0;
  workload::LengthDistribution input, output, turn_input;
  std::uint32_t prefix_groups = 0, prefix_tokens = 0;
  std::uint32_t turns = 1;
  double think_ms = 0.0;
  std::vector<std::uint32_t> tenants;  // allowed tenant indices (empty: all)
  std::uint32_t images = 0;            // per request
  workload::LengthDistribution image_width, image_height, audio_ms;
  bool audio = false;
  std::vector<std::pair<std::string, double>> models;  // `model`: one, or a mix by weight
  Slo slo;
  std::uint32_t group_base = 0;
  std::shared_ptr<const TaskSpec> task;  // a task class
  TaskSlo task_slo;
};

std::size_t pick(Rng& rng, const std::vector<double>& cumulative) {
  const double u = rng.uniform01() * cumulative.back();
  for (std::size_t i = 0; i < cumulative.size(); ++i)
    if (u < cumulative[i]) return i;
  return cumulative.size() - 1;
}

}  // namespace

std::vector<std::pair<std::string, double>> parse_model_mix(std::string_view text, std::string_view what) {
  std::vector<std::pair<std::string, double>> mix;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const std::string entry(text.substr(at, comma - at));
    at = comma + 1;
    const auto eq = entry.rfind('=');
    const std::string name = entry.substr(0, eq);
    double weight = 1.0;
    bool ok = !name.empty() && name.size() <= 256 && eq != std::string::npos;
    if (ok) {
      char* end = nullptr;
      weight = std::strtod(entry.c_str() + eq + 1, &end);
      ok = end && *end == '\0' && end != entry.c_str() + eq + 1 && std::isfinite(weight) && weight > 0;
    }
    if (!ok)
      throw UsageError(fmt::format("{} {}: expected NAME=WEIGHT (a weight > 0), entries separated by commas",
                                   what, quote_input(entry)));
    for (const auto& [n, w] : mix)
      if (n == name) throw UsageError(fmt::format("{}: {} is named twice", what, quote_input(name)));
    mix.emplace_back(name, weight);
    if (mix.size() > 1024) throw UsageError(fmt::format("{}: at most 1,024 models", what));
  }
  double total = 0;
  for (const auto& [n, w] : mix) total += w;
  if (!std::isfinite(total)) throw UsageError(fmt::format("{}: the weights' sum is not finite", what));
  return mix;
}

void apply_model_mix(workload::Workload& w, const std::vector<TurnLink>& turns,
                     const std::vector<std::pair<std::string, double>>& mix, std::uint64_t seed) {
  if (mix.empty()) return;
  std::vector<std::uint16_t> index;
  std::vector<double> cum;
  double total = 0;
  for (const auto& [name, weight] : mix) {
    auto it = std::find(w.models.begin(), w.models.end(), name);
    if (it == w.models.end()) {
      if (w.models.size() >= 65534) throw UsageError("a model mix of more than 65,534 models");
      w.models.push_back(name);
      it = w.models.end() - 1;
    }
    index.push_back(static_cast<std::uint16_t>(it - w.models.begin() + 1));
    cum.push_back(total += weight);
  }
  for (std::size_t i = 0; i < w.requests.size(); ++i) {
    auto& r = w.requests[i];
    if (r.model > 0) continue;
    const bool session = i < turns.size() && turns[i].session >= 0;
    const std::uint64_t key = session ? static_cast<std::uint64_t>(turns[i].session) : r.id;
    const double u =
        static_cast<double>(mix64(hash_combine64(seed, key + (session ? 0x8000000000000000ULL : 0))) >> 11) *
        0x1.0p-53 * total;
    std::size_t k = 0;
    while (k + 1 < cum.size() && u >= cum[k]) ++k;
    r.model = index[k];
  }
}

BenchWorkload parse_workload_yaml(const std::string& text, const std::string& file, std::uint64_t master_seed,
                                  std::optional<double> rate, std::uint64_t max_requests) {
  const YAML::Node root = yaml::load(text, file);
  const Reader rd{file};
  try {
    if (!root.IsMap()) throw InputError(file, 1, "", "expected a mapping with 'classes'");
    rd.only_keys(root, "",
                 {"duration_s", "num_requests", "seed", "arrival", "tenants", "classes", "tools", "documents",
                  "warmup_tasks"});
    const TaskCatalog catalog = parse_task_catalog(root, rd);
    std::uint64_t seed = master_seed;
    if (root["seed"]) seed = rd.integer(root["seed"], "seed", 0, 1.8e19);
    const auto seeds = workload::WorkloadSeeds::from_master(seed);

    // Arrivals.
    workload::ArrivalSettings arrival;
    arrival.rate_rps = 1.0;
    if (const YAML::Node a = root["arrival"]) {
      rd.only_keys(a, "arrival", {"process", "rate_rps", "burstiness"});
      if (a["process"]) {
        const std::string p = rd.string(a["process"], "arrival.process");
        if (p != "poisson" && p != "gamma" && p != "constant")
          rd.fail(a["process"], "arrival.process", "expected poisson, gamma or constant");
        arrival.kind = workload::parse_arrival_kind(p);
      }
      if (auto v = rd.opt_number(a, "rate_rps", "arrival.", 0, false)) arrival.rate_rps = *v;
      if (auto v = rd.opt_number(a, "burstiness", "arrival.", 0, false)) arrival.burstiness = *v;
    }
    if (rate) arrival.rate_rps = *rate;
    std::uint64_t num_requests = 0;
    double duration_s = 0;
    if (root["num_requests"])
      num_requests = rd.integer(root["num_requests"], "num_requests", 1, static_cast<double>(max_requests));
    if (root["duration_s"]) duration_s = rd.number(root["duration_s"], "duration_s", 0, false);
    if (num_requests == 0 && duration_s == 0)
      throw InputError(file, 1, "duration_s", "missing: give duration_s or num_requests");
    if (num_requests > 0 && duration_s > 0)
      rd.fail(root["num_requests"], "num_requests", "give either duration_s or num_requests, not both");

    // Tenants.
    BenchWorkload out;
    auto& w = out.workload;
    std::vector<double> tenant_shares;
    if (const YAML::Node t = root["tenants"]) {
      if (!t.IsSequence() || t.size() == 0) rd.fail(t, "tenants", "expected a non-empty list");
      w.tenants.clear();
      for (std::size_t i = 0; i < t.size(); ++i) {
        const std::string f = fmt::format("tenants[{}]", i);
        rd.only_keys(t[i], f, {"name", "share"});
        if (!t[i]["name"]) rd.fail(t[i], f + ".name", "missing (expected a string)");
        const std::string name = rd.string(t[i]["name"], f + ".name");
        for (const auto& n : w.tenants)
          if (n == name) rd.fail(t[i], f + ".name", "duplicate tenant " + quote_input(name));
        w.tenants.push_back(name);
        tenant_shares.push_back(t[i]["share"] ? rd.number(t[i]["share"], f + ".share", 0, false) : 1.0);
      }
    } else {
      tenant_shares = {1.0};
    }

    // Classes.
    const YAML::Node cl = root["classes"];
    if (!cl) throw InputError(file, 1, "classes", "missing (expected a list of task classes)");
    if (!cl.IsSequence() || cl.size() == 0) rd.fail(cl, "classes", "expected a non-empty list");
    std::vector<ClassSpec> classes;
    std::vector<std::string> model_names;  // every class's, to bound their number
    std::uint32_t groups_so_far = 0;
    for (std::size_t i = 0; i < cl.size(); ++i) {
      const YAML::Node c = cl[i];
      const std::string f = fmt::format("classes[{}]", i);
      rd.only_keys(c, f,
                   {"name", "share", "input_len", "output_len", "prefix", "turns", "tenants", "slo", "images",
                    "audio", "model", "task"});
      ClassSpec s;
      if (!c["name"]) rd.fail(c, f + ".name", "missing (expected a string)");
      s.name = rd.string(c["name"], f + ".name");
      for (const auto& o : classes)
        if (o.name == s.name) rd.fail(c["name"], f + ".name", "duplicate class " + quote_input(s.name));
      if (c["share"]) s.share = rd.number(c["share"], f + ".share", 0, false);
      if (const YAML::Node task = c["task"]) {
        // An agentic task: its steps have their own lengths.
        for (const char* k : {"input_len", "output_len", "prefix", "turns", "images", "audio"})
          if (c[k])
            rd.fail(c[k], f + "." + k,
                    "a task class's lengths are its steps' (model: input_len, output_len; task: input_len)");
        if (!task.IsMap())
          rd.fail(task, f + ".task", "expected a mapping with steps (or mode: model-driven)");
        s.task = std::make_shared<const TaskSpec>(parse_task(task, f + ".task", catalog, rd));
        s.input = workload::parse_length_spec("fixed:1", f, workload::LengthRole::kInput);
        s.output = s.input;
        s.turn_input = s.input;
      }
      if (!s.task && !c["input_len"])
        rd.fail(c, f + ".input_len", "missing (a length spec, e.g. lognormal:600:0.6)");
      if (!s.task && !c["output_len"])
        rd.fail(c, f + ".output_len", "missing (a length spec, e.g. fixed:200)");
      if (!s.task) {
        s.input = rd.length(c["input_len"], f + ".input_len", workload::LengthRole::kInput);
        s.output = rd.length(c["output_len"], f + ".output_len", workload::LengthRole::kOutput);
        s.turn_input = s.input;
      }
      if (const YAML::Node p = c["prefix"]) {
        rd.only_keys(p, f + ".prefix", {"groups", "tokens"});
        if (!p["groups"] || !p["tokens"]) rd.fail(p, f + ".prefix", "expected both 'groups' and 'tokens'");
        s.prefix_groups = static_cast<std::uint32_t>(rd.integer(p["groups"], f + ".prefix.groups", 1, 1e6));
        s.prefix_tokens = static_cast<std::uint32_t>(rd.integer(p["tokens"], f + ".prefix.tokens", 1, 1e7));
        s.group_base = groups_so_far;
        groups_so_far += s.prefix_groups;
      }
      if (const YAML::Node t = c["turns"]) {
        rd.only_keys(t, f + ".turns", {"count", "think_ms", "input_len"});
        if (!t["count"]) rd.fail(t, f + ".turns.count", "missing (turns per session)");
        s.turns = static_cast<std::uint32_t>(rd.integer(t["count"], f + ".turns.count", 1, kMaxTurns));
        if (t["think_ms"]) s.think_ms = rd.number(t["think_ms"], f + ".turns.think_ms", 0, true);
        if (t["input_len"])
          s.turn_input = rd.length(t["input_len"], f + ".turns.input_len", workload::LengthRole::kInput);
      }
      // A distribution of pixels or milliseconds whose largest draw is within a limit.
      auto bounded = [&](const YAML::Node& parent, const char* key, const std::string& field,
                         std::uint32_t limit, const char* unit) {
        const YAML::Node n = parent[key];
        if (!n)
          rd.fail(parent, field, fmt::format("missing (a distribution of {}, e.g. uniform:256:1024)", unit));
        auto d = rd.length(n, field, workload::LengthRole::kInput);
        const auto top = upper_bound(d);
        if (!top)
          rd.fail(n, field,
                  fmt::format("unbounded: give a largest value (:max=N, at most {} {})", limit, unit));
        if (*top > limit)
          rd.fail(n, field, fmt::format("draws up to {} {}, over the limit of {}", *top, unit, limit));
        return d;
      };
      if (const YAML::Node im = c["images"]) {
        rd.only_keys(im, f + ".images", {"count", "width", "height"});
        s.images =
            im["count"]
                ? static_cast<std::uint32_t>(rd.integer(im["count"], f + ".images.count", 0, kMaxImages))
                : 1;
        s.image_width = bounded(im, "width", f + ".images.width", kMaxImageSide, "pixels");
        s.image_height = bounded(im, "height", f + ".images.height", kMaxImageSide, "pixels");
      }
      if (const YAML::Node au = c["audio"]) {
        rd.only_keys(au, f + ".audio", {"duration_ms"});
        s.audio_ms = bounded(au, "duration_ms", f + ".audio.duration_ms", kMaxAudioMs, "ms");
        s.audio = true;
      }
      if (const YAML::Node m = c["model"]) {
        if (m.IsScalar()) {
          s.models.emplace_back(rd.string(m, f + ".model"), 1.0);
        } else if (m.IsMap() && m.size() > 0) {
          for (const auto& kv : m) {
            const std::string name = rd.string(kv.first, f + ".model");
            const double weight = rd.number(kv.second, f + ".model." + name, 0, false);
            for (const auto& [n, wt] : s.models)
              if (n == name) rd.fail(kv.first, f + ".model", "model " + quote_input(name) + " named twice");
            s.models.emplace_back(name, weight);
          }
        } else {
          rd.fail(m, f + ".model", "expected a model name, or a mapping of model names to weights");
        }
        if (s.models.size() > 1024) rd.fail(m, f + ".model", "at most 1,024 models");
        double total = 0;
        for (const auto& [n, wt] : s.models) total += wt;
        if (!std::isfinite(total)) rd.fail(m, f + ".model", "the weights' sum is not finite");
        for (const auto& [n, wt] : s.models)
          if (std::find(model_names.begin(), model_names.end(), n) == model_names.end())
            model_names.push_back(n);
        if (model_names.size() > 65534) rd.fail(m, f + ".model", "more than 65,534 models in all classes");
      }
      if (const YAML::Node t = c["tenants"]) {
        if (!t.IsSequence() || t.size() == 0)
          rd.fail(t, f + ".tenants", "expected a non-empty list of tenant names");
        for (std::size_t j = 0; j < t.size(); ++j) {
          const std::string name = rd.string(t[j], fmt::format("{}.tenants[{}]", f, j));
          std::uint32_t idx = 0;
          while (idx < w.tenants.size() && w.tenants[idx] != name) ++idx;
          if (idx == w.tenants.size())
            rd.fail(t[j], fmt::format("{}.tenants[{}]", f, j),
                    "unknown tenant " + quote_input(name) + " (not in 'tenants')");
          s.tenants.push_back(idx);
        }
      }
      if (const YAML::Node slo = c["slo"]) {
        const std::string sf = f + ".slo";
        if (s.task) {
          // Task SLOs: the task's completion time at a percentile, and the share of tasks that pass.
          rd.only_keys(slo, sf, {"task_ms", "pass_rate", "percentile"});
          s.task_slo.task_ms = rd.opt_number(slo, "task_ms", sf + ".", 0, false);
          if (slo["pass_rate"])
            s.task_slo.pass_rate =
                rd.Fields::number(slo["pass_rate"], sf + ".pass_rate", 0, 1, false, "a share in [0, 1]");
          if (auto p = rd.opt_number(slo, "percentile", sf + ".", 0, false)) {
            if (*p > 100) rd.fail(slo["percentile"], sf + ".percentile", "expected a percentile in (0, 100]");
            s.task_slo.percentile = *p;
          }
          if (!s.task_slo.task_ms && !s.task_slo.pass_rate)
            rd.fail(slo, sf, "expected task_ms or pass_rate (a task class's SLO)");
          classes.push_back(std::move(s));
          continue;
        }
        rd.only_keys(slo, sf, {"ttft_ms", "tpot_ms", "e2e_ms", "ttfo_ms", "percentile"});
        s.slo.ttft_ms = rd.opt_number(slo, "ttft_ms", sf + ".", 0, false);
        s.slo.tpot_ms = rd.opt_number(slo, "tpot_ms", sf + ".", 0, false);
        s.slo.e2e_ms = rd.opt_number(slo, "e2e_ms", sf + ".", 0, false);
        s.slo.ttfo_ms = rd.opt_number(slo, "ttfo_ms", sf + ".", 0, false);
        if (auto p = rd.opt_number(slo, "percentile", sf + ".", 0, false)) {
          if (*p > 100) rd.fail(slo["percentile"], sf + ".percentile", "expected a percentile in (0, 100]");
          s.slo.percentile = *p;
        }
        if (s.slo.empty()) rd.fail(slo, sf, "expected at least one of ttft_ms, tpot_ms, e2e_ms, ttfo_ms");
      }
      classes.push_back(std::move(s));
    }

    // The schedule of arrivals (sessions start at arrivals), then the requests.
    try {
      workload::validate(arrival);
    } catch (const UsageError& e) {
      throw InputError(file, root["arrival"] ? yaml::line_of(root["arrival"]) : 1, "arrival", e.what());
    }
    if (duration_s > 0 && arrival.rate_rps * duration_s > 0.9 * static_cast<double>(max_requests))
      rd.fail(root["duration_s"], "duration_s",
              fmt::format("rate x duration plans about {:.3g} requests; at most {} are allowed",
                          arrival.rate_rps * duration_s, max_requests));
    Rng arrival_rng(seeds.arrival);
    const std::vector<Nanos> starts =
        num_requests > 0
            ? workload::generate_arrivals(arrival, num_requests, arrival_rng)
            : workload::generate_arrivals_until(arrival, seconds_to_nanos(duration_s), arrival_rng);
    Rng class_rng(derive_seed(seed, "class")), tenant_rng(seeds.tenant), in_rng(seeds.input_len),
        out_rng(seeds.output_len), prefix_rng(seeds.prefix), media_rng(derive_seed(seed, "media")),
        model_rng(derive_seed(seed, "models"));
    std::vector<double> class_cum, tenant_cum;
    double acc = 0;
    for (const auto& c : classes) class_cum.push_back(acc += c.share);
    acc = 0;
    for (double s : tenant_shares) tenant_cum.push_back(acc += s);
    w.classes.clear();
    for (const auto& c : classes) w.classes.push_back(c.name);
    w.token_seed = seeds.tokens;
    bool sessions = false;
    for (const auto& c : classes) sessions |= c.turns > 1;
    std::int64_t session = 0;
    std::shared_ptr<TaskSet> tasks;
    for (const auto& c : classes)
      if (c.task && !tasks) {
        tasks = std::make_shared<TaskSet>();
        tasks->catalog = catalog;
      }
    if (tasks && root["warmup_tasks"])
      tasks->warmup_tasks = rd.integer(root["warmup_tasks"], "warmup_tasks", 0, 1e9);
    if (!tasks && root["warmup_tasks"])
      rd.fail(root["warmup_tasks"], "warmup_tasks",
              "belongs to a file with task classes (a class with task)");
    if (tasks)
      for (const auto& c : classes) {
        tasks->by_class.push_back(c.task);
        tasks->slo_by_class.push_back(c.task_slo);
      }
    Rng task_rng(derive_seed(seed, "tasks"));
    for (Nanos t : starts) {
      const std::size_t ci = pick(class_rng, class_cum);
      const ClassSpec& c = classes[ci];
      std::uint32_t tenant = 0;
      if (c.tenants.empty()) {
        tenant = static_cast<std::uint32_t>(pick(tenant_rng, tenant_cum));
      } else {
        std::vector<double> cum;
        double a2 = 0;
        for (std::uint32_t ti : c.tenants) cum.push_back(a2 += tenant_shares[ti]);
        tenant = c.tenants[pick(tenant_rng, cum)];
      }
      if (c.task) {
        TaskArrival a;
        a.t = t;
        a.id = tasks->arrivals.size();
        a.task_class = static_cast<std::uint16_t>(ci);
        a.tenant = tenant;
        a.input_tokens = std::max<std::uint32_t>(1, c.task->input_len.sample(task_rng));
        tasks->arrivals.push_back(a);
        continue;
      }
      std::uint16_t model = 0;  // the session's model (0: the run's)
      if (!c.models.empty()) {
        std::vector<double> cum;
        double a3 = 0;
        for (const auto& m : c.models) cum.push_back(a3 += m.second);
        const std::string& name = c.models[c.models.size() == 1 ? 0 : pick(model_rng, cum)].first;
        auto it = std::find(w.models.begin(), w.models.end(), name);
        if (it == w.models.end()) {
          w.models.push_back(name);
          it = w.models.end() - 1;
        }
        model = static_cast<std::uint16_t>(it - w.models.begin() + 1);
      }
      std::uint32_t group = 0;
      if (c.prefix_groups > 0)
        group = c.group_base + static_cast<std::uint32_t>(prefix_rng.next_u64() % c.prefix_groups);
      for (std::uint32_t turn = 0; turn < c.turns; ++turn) {
        if (w.requests.size() >= max_requests)
          throw InputError(file, 1, "", fmt::format("more than {} requests (turns included)", max_requests));
        workload::Request r;
        r.id = w.requests.size();
        r.arrival_ns = t;
        r.input_tokens = std::max<std::uint32_t>(1, (turn == 0 ? c.input : c.turn_input).sample(in_rng));
        r.output_tokens = std::max<std::uint32_t>(1, c.output.sample(out_rng));
        r.tenant = tenant;
        r.task_class = static_cast<std::uint16_t>(ci);
        r.model = model;
        if (turn == 0 && c.images > 0) {
          r.images = static_cast<std::uint8_t>(c.images);
          r.image_width =
              static_cast<std::uint16_t>(std::max<std::uint32_t>(1, c.image_width.sample(media_rng)));
          r.image_height =
              static_cast<std::uint16_t>(std::max<std::uint32_t>(1, c.image_height.sample(media_rng)));
        }
        if (turn == 0 && c.audio) r.audio_ms = std::max<std::uint32_t>(1, c.audio_ms.sample(media_rng));
        if (turn == 0 && c.prefix_groups > 0) {
          r.source = workload::PromptSource::kPrefixGroup;
          r.source_begin = group;
          r.source_count = c.prefix_tokens;
        }
        if (sessions) {
          TurnLink link;
          link.session = c.turns > 1 ? session : -1;
          link.turn = turn;
          link.think_ns = seconds_to_nanos(c.think_ms / 1e3);
          link.next = turn + 1 < c.turns ? static_cast<std::int32_t>(w.requests.size() + 1) : -1;
          out.turns.push_back(link);
        }
        w.requests.push_back(r);
      }
      if (c.turns > 1) ++session;
    }
    for (const auto& c : classes)
      if (!c.slo.empty()) out.slos[c.name] = c.slo;
    w.description = fmt::format("{}: {} requests ({} sessions){} in {} classes, {} tenants, {} {} {}/s", file,
                                w.requests.size(), session,
                                tasks ? fmt::format(", {} tasks", tasks->arrivals.size()) : std::string(),
                                classes.size(), w.tenants.size(), workload::arrival_kind_name(arrival.kind),
                                arrival.rate_rps, tasks ? "arrivals" : "req");
    out.tasks = tasks;
    nlohmann::json cls = nlohmann::json::array();
    for (const auto& c : classes) {
      cls.push_back(
          {{"name", c.name},
           {"share", c.share},
           {"input_len", c.input.spec},
           {"output_len", c.output.spec},
           {"turns", c.turns},
           {"prefix_groups", c.prefix_groups},
           {"images", c.images > 0 ? nlohmann::json{{"count", c.images},
                                                    {"width", c.image_width.spec},
                                                    {"height", c.image_height.spec}}
                                   : nlohmann::json(nullptr)},
           {"audio", c.audio ? nlohmann::json{{"duration_ms", c.audio_ms.spec}} : nlohmann::json(nullptr)}});
      if (!c.models.empty()) {  // only then: run.json of workloads without models stays as it was
        nlohmann::json models = nlohmann::json::object();
        for (const auto& [name, weight] : c.models) models[name] = weight;
        cls.back()["model"] = models;
      }
    }
    out.effective = {{"file", file},
                     {"description", w.description},
                     {"requests", w.requests.size()},
                     {"sessions", session},
                     {"arrival", workload::arrival_kind_name(arrival.kind)},
                     {"rate_rps", arrival.rate_rps},
                     {"tenants", w.tenants},
                     {"classes", cls},
                     {"seed", seed}};
    return out;
  } catch (const InputError&) {
    throw;
  } catch (const YAML::ParserException& e) {
    throw yaml::load_error(e, file);
  } catch (const YAML::Exception& e) {
    throw InputError(file, e.mark.line >= 0 ? static_cast<std::size_t>(e.mark.line) + 1 : 0, "", e.msg);
  }
}

BenchWorkload load_workload_file(const std::string& path, std::uint64_t master_seed,
                                 std::optional<double> rate) {
  return parse_workload_yaml(read_regular_file(path, "workload file", kMaxWorkloadFileBytes), path,
                             master_seed, rate);
}

std::size_t TaskSet::judged_steps() const {
  std::size_t n = 0;
  bool replayed = false;  // each task its own graph (bench/task_replay.h)
  for (const auto& a : arrivals)
    if (a.spec) {
      replayed = true;
      for (const auto& step : a.spec->steps) n += step.judge ? 1 : 0;
    }
  if (replayed) return n;
  for (const auto& spec : by_class) {
    if (!spec) continue;
    if (spec->judge) ++n;
    for (const auto& step : spec->steps) n += step.judge ? 1 : 0;
  }
  return n;
}

}  // namespace tokenscope::bench
