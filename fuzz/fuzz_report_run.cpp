// `tokenscope report`'s readers of a run directory and of probe results,
// and the page and Markdown made from whatever they hold. Input: run.json,
// requests.jsonl, samples.jsonl, steps.jsonl, phases.json and a probe's
// <probe>.json, separated by NUL bytes (a missing part is a missing file).
// Reading may refuse a run (UsageError, InputError) but never crashes, and
// what it reads always renders.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/run_data.h"
#include "core/error.h"
#include "report/render.h"
#include "report/report_data.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using namespace tokenscope;
  static const fs::path dir = fs::temp_directory_path() / ("fuzz_report_run_" + std::to_string(::getpid()));
  static const char* kFiles[] = {"run/run.json",    "run/requests.jsonl", "run/samples.jsonl",
                                 "run/steps.jsonl", "run/phases.json",    "probes/probe.json"};
  fs::remove_all(dir);
  fs::create_directories(dir / "run");
  fs::create_directories(dir / "probes");
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const char* name : kFiles) {
    if (input.data() == nullptr) break;
    const std::size_t end = input.find('\0');
    std::ofstream(dir / name, std::ios::binary) << input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
  }
  for (const std::vector<fs::path>& paths :
       {std::vector<fs::path>{dir / "run"}, std::vector<fs::path>{dir / "probes"}}) {
    try {
      const auto in = report::load_report_input(paths);
      report::ReportOptions o;
      o.columns = 50;
      const auto d = report::report_data(in, o);
      const std::string html = report::render_html(d);
      if (html.find("</html>") == std::string::npos) __builtin_trap();
      (void)report::render_markdown(d);
    } catch (const UsageError&) {  // InputError too: a bad file, named
    }
  }
  return 0;
}
