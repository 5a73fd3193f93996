#include "bench/mock_tools.h"

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cctype>
#include <set>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_schema.h"
#include "net/http_server.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::bench {

namespace asio = boost::asio;

namespace {
// JSON from outside (a model's answer or arguments, a tool's body), parsed
// only within the nesting bound: nlohmann's parser recurses per level.
nlohmann::json parse_tool_arguments(std::string_view text) {
  if (json_too_deep_at(text) != std::string_view::npos) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
}
}  // namespace

namespace {
constexpr std::size_t kTopicWords = 8;

std::string_view word_of(std::uint64_t seed, std::uint32_t doc, std::uint32_t k) {
  const auto words = tokenizers::prompt_words();
  return words[mix64(hash_combine64(hash_combine64(seed, doc), k)) % words.size()];
}
}  // namespace

DocumentStore::DocumentStore(const DocumentStoreSpec& spec, std::uint64_t seed) : seed_(seed) {
  Rng rng(hash_combine64(seed, 0x646f6373ULL));
  tokens_.resize(spec.count);
  for (std::uint32_t i = 0; i < spec.count; ++i) {
    tokens_[i] = std::max<std::uint32_t>(1, spec.tokens.sample(rng));
    // The topic: the first distinct words.
    std::vector<std::string_view> topic;
    for (std::uint32_t k = 0; k < tokens_[i] && topic.size() < kTopicWords; ++k) {
      const auto w = word_of(seed_, i, k);
      if (std::find(topic.begin(), topic.end(), w) == topic.end()) topic.push_back(w);
    }
    for (const auto w : topic) index_[w].push_back(i);
  }
}

std::string DocumentStore::text(std::uint32_t i) const {
  std::string out;
  if (i >= tokens_.size()) return out;
  out.reserve(tokens_[i] * 6);
  for (std::uint32_t k = 0; k < tokens_[i]; ++k) {
    if (k) out += ' ';
    out += word_of(seed_, i, k);
  }
  return out;
}

std::vector<std::uint32_t> DocumentStore::search(std::string_view query, std::uint32_t top_k) const {
  const std::uint64_t qh = hash_string64(query);
  std::unordered_map<std::uint32_t, std::uint32_t> score;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    if (const auto it = index_.find(word); it != index_.end())
      for (const auto d : it->second) ++score[d];
    word.clear();
  };
  for (const char c : query) {
    if (std::isalpha(static_cast<unsigned char>(c)))
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else
      flush();
  }
  flush();
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranked(score.begin(), score.end());
  std::sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return mix64(qh ^ a.first) < mix64(qh ^ b.first);
  });
  const std::uint32_t want = std::min<std::uint32_t>(top_k, size());
  std::vector<std::uint32_t> out;
  for (const auto& [d, s] : ranked) {
    if (out.size() >= want) break;
    out.push_back(d);
  }
  // Too few matches: documents drawn from the query's hash.
  for (std::uint64_t j = 0; out.size() < want && j < 64ULL * want + 64; ++j) {
    const auto d = static_cast<std::uint32_t>(mix64(hash_combine64(qh, j)) % size());
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  for (std::uint32_t d = 0; out.size() < want; ++d)
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  return out;
}

namespace {

struct ExpressionParser {
  std::string_view s;
  std::size_t at = 0;
  int depth = 0;
  std::string why;

  void skip() {
    while (at < s.size() && (s[at] == ' ' || s[at] == '\t')) ++at;
  }
  std::optional<double> primary() {
    skip();
    if (at >= s.size()) return fail("the expression ends early");
    if (s[at] == '(') {
      if (++depth > 64) return fail("nested deeper than 64 parentheses");
      ++at;
      auto v = sum();
      skip();
      if (!v) return v;
      if (at >= s.size() || s[at] != ')') return fail("a '(' without its ')'");
      ++at;
      --depth;
      return v;
    }
    if (s[at] == '-') {
      ++at;
      if (++depth > 64) return fail("nested deeper than 64 signs");
      auto v = primary();
      --depth;
      return v ? std::optional<double>(-*v) : v;
    }
    const std::size_t start = at;
    while (at < s.size() && (std::isdigit(static_cast<unsigned char>(s[at])) || s[at] == '.')) ++at;
    if (start == at) return fail(fmt::format("unexpected '{}' at {}", s[at], at));
    const std::string number(s.substr(start, at - start));
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return fail("a malformed number: " + number);
    return v;
  }
  std::optional<double> product() {
    auto v = primary();
    while (v) {
      skip();
      if (at >= s.size() || (s[at] != '*' && s[at] != '/')) break;
      const char op = s[at++];
      const auto r = primary();
      if (!r) return r;
      if (op == '/' && *r == 0) return fail("a division by zero");
      v = op == '*' ? *v * *r : *v / *r;
    }
    return v;
  }
  std::optional<double> sum() {
    auto v = product();
    while (v) {
      skip();
      if (at >= s.size() || (s[at] != '+' && s[at] != '-')) break;
      const char op = s[at++];
      const auto r = product();
      if (!r) return r;
      v = op == '+' ? *v + *r : *v - *r;
    }
    return v;
  }
  std::optional<double> fail(std::string w) {
    if (why.empty()) why = std::move(w);
    return std::nullopt;
  }
};

std::string error_json(std::string_view message) {
  return nlohmann::json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                              nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::optional<double> evaluate_expression(std::string_view text, std::string* why) {
  ExpressionParser p;
  p.s = text;
  auto v = p.sum();
  p.skip();
  if (v && p.at != text.size()) v = p.fail(fmt::format("unexpected '{}' at {}", text[p.at], p.at));
  if (v && !std::isfinite(*v)) v = p.fail("the value is not finite");
  if (!v && why) *why = p.why;
  return v;
}

MockToolServer::Answer MockToolServer::answer(std::string_view tool_name, std::string_view body) {
  const ToolSpec* tool = nullptr;
  for (const auto& t : catalog_.tools)
    if (t.name == tool_name && t.kind != ToolSpec::Kind::kUrl) tool = &t;
  if (!tool) return {404, error_json(fmt::format("no tool named '{}'", tool_name)), Nanos{0}};
  std::lock_guard lock(mutex_);
  auto count = [&](auto field) {
    std::lock_guard l(injected_mutex_);
    auto& e = injected_[tool->name];
    if (field) ++(e.*field);
  };
  {
    std::lock_guard l(injected_mutex_);
    ++injected_[tool->name].calls;
  }
  const auto args = parse_tool_arguments(body);
  if (args.is_discarded() || !args.is_object()) {
    count(&InjectedToolErrors::invalid_arguments);
    return {400, error_json("the arguments are not a JSON object"), Nanos{0}};
  }
  if (const auto why = tool->parameters_checker->violations(args, 1); !why.empty()) {
    count(&InjectedToolErrors::invalid_arguments);
    return {400, error_json("invalid arguments: " + why.front()), Nanos{0}};
  }
  const Nanos delay =
      tool->latency_ms ? static_cast<Nanos>(tool->latency_ms->sample(rng_)) * kNanosPerMilli : 0;
  const double u = rng_.uniform01();
  if (u < tool->error_5xx) {
    count(&InjectedToolErrors::http_5xx);
    return {500, error_json("injected fault: internal server error"), delay};
  }
  if (u < tool->error_5xx + tool->error_timeout) {
    count(&InjectedToolErrors::timeout);
    return {200, "", std::nullopt};
  }
  const bool malformed = u < tool->error_5xx + tool->error_timeout + tool->error_malformed;
  nlohmann::json out;
  std::string payload;
  if (tool->payload_tokens) {
    const auto words = tokenizers::prompt_words();
    const std::uint32_t n = tool->payload_tokens->sample(rng_);
    for (std::uint32_t k = 0; k < n; ++k) {
      if (k) payload += ' ';
      payload += words[rng_.uniform_int(0, words.size() - 1)];
    }
  }
  switch (tool->kind) {
    case ToolSpec::Kind::kSearch: {
      out = search_answer(args);
      if (!payload.empty()) out["payload"] = payload;
      break;
    }
    case ToolSpec::Kind::kCalculator: {
      const auto e = args.find("expression");
      if (e == args.end() || !e->is_string()) {
        count(&InjectedToolErrors::invalid_arguments);
        return {400, error_json("invalid arguments: 'expression' must be a string"), delay};
      }
      std::string why;
      const auto v = evaluate_expression(e->get<std::string>(), &why);
      if (!v) {
        count(&InjectedToolErrors::invalid_arguments);
        return {400, error_json("invalid arguments: " + why), delay};
      }
      out = {{"value", *v}};
      if (!payload.empty()) out["payload"] = payload;
      break;
    }
    default: {
      out =
          draw_instance(tool->response, *tool->response_checker, rng_, "tools: " + tool->name + ".response");
      if (!payload.empty() && out.is_object() && !out.contains("payload")) {
        out["payload"] = payload;
        if (!tool->response_checker->valid(out)) out.erase("payload");
      }
    }
  }
  std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (malformed) {
    count(&InjectedToolErrors::malformed);
    text.resize(std::max<std::size_t>(1, text.size() / 2));
  }
  return {200, std::move(text), delay};
}

nlohmann::json MockToolServer::search_answer(const nlohmann::json& args) const {
  std::string query;
  if (const auto q = args.find("query"); q != args.end() && q->is_string()) query = q->get<std::string>();
  std::uint32_t k = 3;
  if (const auto t = args.find("top_k"); t != args.end() && t->is_number_integer())
    k = static_cast<std::uint32_t>(std::clamp<std::int64_t>(t->get<std::int64_t>(), 1, 50));
  nlohmann::json docs = nlohmann::json::array();
  for (const auto d : docs_.search(query, k)) docs.push_back({{"id", docs_.id(d)}, {"text", docs_.text(d)}});
  return {{"documents", std::move(docs)}};
}

MockToolServer::Answer MockToolServer::builtin_search(std::string_view body) {
  const auto args = parse_tool_arguments(body);
  if (args.is_discarded() || !args.is_object())
    return {400, error_json("the arguments are not a JSON object"), Nanos{0}};
  return {200, search_answer(args).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), Nanos{0}};
}

std::map<std::string, InjectedToolErrors> MockToolServer::injected() const {
  std::lock_guard l(injected_mutex_);
  return injected_;
}

namespace {
// X-Tokenscope-Replay-Ms: a whole number of milliseconds up to 10 minutes; nullopt otherwise.
std::optional<Nanos> replay_delay(std::string_view v) {
  if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  const long ms = std::stol(std::string(v));
  return ms <= 600'000 ? std::optional<Nanos>(ms * kNanosPerMilli) : std::nullopt;
}
}  // namespace

struct MockToolServer::Impl final : net::HttpHandler {
  explicit Impl(MockToolServer& owner) : self(owner) {}
  MockToolServer& self;
  asio::io_context ioc{1};
  SteadyClock clock;
  std::unique_ptr<net::HttpServer> server;
  std::thread thread;
  std::mutex held_mutex;
  std::vector<std::shared_ptr<net::Responder>> held;
  bool stopped = false;
  std::set<std::shared_ptr<asio::steady_timer>> timers;  // delayed answers (the io_context's thread only)

  void handle(net::HttpRequest request, std::shared_ptr<net::Responder> responder) override {
    const std::string_view path = request.path();
    const bool builtin = request.method == "POST" && path == "/builtin/search";
    if (!builtin && (request.method != "POST" || path.rfind("/tools/", 0) != 0)) {
      net::HttpResponse r;
      r.status = 404;
      r.body = error_json("POST /tools/NAME with the arguments as a JSON object");
      responder->respond(std::move(r));
      return;
    }
    Answer a;
    try {
      a = builtin ? self.builtin_search(request.body) : self.answer(path.substr(7), request.body);
    } catch (const std::exception& e) {  // a response schema no draw satisfies
      a = {500, error_json(e.what()), Nanos{0}};
    }
    // A replayed call (bench/task_replay.h) takes the latency it had when recorded.
    if (const auto replay = replay_delay(request.header("x-tokenscope-replay-ms")); replay && a.delay)
      a.delay = *replay;
    if (!a.delay) {
      std::lock_guard lock(held_mutex);
      if (stopped) {
        responder->reset();
        return;
      }
      held.push_back(std::move(responder));
      return;
    }
    net::HttpResponse r;
    r.status = a.status;
    r.body = std::move(a.body);
    if (*a.delay <= 0) {
      responder->respond(std::move(r));
      return;
    }
    auto timer = std::make_shared<asio::steady_timer>(ioc, std::chrono::nanoseconds(*a.delay));
    timers.insert(timer);
    timer->async_wait(
        [this, timer, responder, r = std::move(r)](const boost::system::error_code& ec) mutable {
          timers.erase(timer);
          if (ec)
            responder->reset();
          else
            responder->respond(std::move(r));
        });
  }
  net::HttpResponse connection_error(int status, std::string_view message) override {
    net::HttpResponse r;
    r.status = status;
    r.body = error_json(message);
    return r;
  }
};

MockToolServer::MockToolServer(const TaskCatalog& catalog, std::uint64_t seed)
    : catalog_(catalog),
      docs_(catalog.documents, hash_combine64(seed, 0x646f63ULL)),
      rng_(hash_combine64(seed, 0x746f6f6c73ULL)),
      impl_(std::make_unique<Impl>(*this)) {
  net::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.single_thread = true;
  net::ServerLimits limits;
  impl_->server = std::make_unique<net::HttpServer>(impl_->ioc, options, limits, *impl_, impl_->clock);
  impl_->server->start();
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
}

MockToolServer::~MockToolServer() {
  stop();
}

std::uint16_t MockToolServer::port() const {
  return impl_->server->port();
}

void MockToolServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  asio::post(impl_->ioc, [this] {
    std::vector<std::shared_ptr<net::Responder>> held;
    {
      std::lock_guard lock(impl_->held_mutex);
      impl_->stopped = true;
      held.swap(impl_->held);
    }
    for (auto& r : held) r->reset();
    for (const auto& t : impl_->timers) t->cancel();  // their answers end with a reset
    impl_->server->drain();
  });
  // The connections close (the callers' clients are gone, or close idle ones
  // now) before the io_context stops: a session destroyed with pending
  // handlers after the server would touch the server's state.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (impl_->server->connections() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool drained = impl_->server->connections() == 0;
  asio::post(impl_->ioc, [this] { impl_->ioc.stop(); });
  impl_->thread.join();
  // A connection still open after 5 s: the server's state is left alive (a
  // bounded leak at the end of a run) rather than freed under its session.
  if (!drained) static_cast<void>(impl_.release());
}

}  // namespace tokenscope::bench
