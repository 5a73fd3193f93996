// `tokenscope check` on whatever a run directory holds: run.json,
// requests.jsonl, samples.jsonl, steps.jsonl, a collectives file
// (collectives.json) and a directory-of-runs file (sweep.json), separated by
// NUL bytes (a missing part is a missing file). sweep.json is read as check
// reads repeats (rundir/run_set.h), and the run's summary stands for two
// repeats on each side of the headline's run-by-run comparison. The run is read (it may be refused:
// UsageError, InputError), then every item of the checklist runs on it against itself and alone, and
// check.json is made: items may find no data or refuse a bad collectives
// file with an InputError, but never crash, hang or throw anything else.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "analyze/checklist.h"
#include "analyze/run_data.h"
#include "core/error.h"
#include "rundir/run_set.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using namespace tokenscope;
  static const fs::path dir = fs::temp_directory_path() / ("fuzz_check_run_" + std::to_string(::getpid()));
  static const char* kFiles[] = {"run.json",    "requests.jsonl",   "samples.jsonl",
                                 "steps.jsonl", "collectives.json", "sweep.json"};
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const char* name : kFiles) {
    if (input.data() == nullptr) break;
    const std::size_t end = input.find('\0');
    std::ofstream(dir / name, std::ios::binary) << input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
  }
  if (const auto set = rundir::read_run_set(dir)) (void)set->runs.size();
  analyze::RunData run;
  try {
    run = analyze::load_run(dir, {.request_ranges = 1, .concurrent = false});
  } catch (const UsageError&) {
    return 0;
  }
  analyze::Thresholds t;
  t.min_requests = 2;  // let every item look at small runs
  const analyze::RunData* self = &run;
  for (const analyze::RunData* base : {self, static_cast<const analyze::RunData*>(nullptr)}) {
    try {
      const auto r = analyze::run_checklist(base, run, t);
      (void)analyze::to_json(r).dump();
    } catch (const InputError&) {
      // A collectives file that is not one.
    }
  }
  // Repeats: the run's summary twice on each side.
  analyze::ExtraInputs repeats;
  repeats.base_repeats = repeats.cand_repeats = {run.summary, run.summary};
  (void)rundir::repeat_statistics(repeats.base_repeats).dump();
  try {
    (void)analyze::to_json(analyze::run_checklist(self, run, t, repeats)).dump();
  } catch (const InputError&) {
  }
  return 0;
}
