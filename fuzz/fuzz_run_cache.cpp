// libFuzzer target: the run cache (rundir/run_cache.h) that `check` and
// `report` read instead of a run's JSONL files. The input is a cache's
// content after a valid header for the files of a run directory, written
// into that directory as its .tokenscope-cache; then:
//   - decoding either refuses it or yields content whose encoding decodes
//     to content that encodes the same (nothing is lost or made up twice);
//   - the run is loaded with the cache on (from the cache when it decodes,
//     else from the files, the cache rewritten), and every checklist item
//     runs on it, alone and against itself: no crash, no hang, nothing
//     thrown but the InputError an item may raise.
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
#include "rundir/run_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using namespace tokenscope;
  static const fs::path dir = fs::temp_directory_path() / ("fuzz_run_cache_" + std::to_string(::getpid()));
  static const rundir::RunFilesKey key = [] {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "run.json") << R"({"tool":{"command":"sim"},"summary":{"requests_total":0}})";
    return rundir::run_files_key(dir);
  }();
  const std::string bytes =
      rundir::run_cache_header(key) + std::string(reinterpret_cast<const char*>(data), size);
  if (const auto read = rundir::decode_run_cache(bytes, key)) {
    const std::string again = rundir::encode_run_cache(key, *read);
    const auto reread = rundir::decode_run_cache(again, key);
    if (!reread || rundir::encode_run_cache(key, *reread) != again) __builtin_trap();
  }
  {
    std::ofstream out(dir / rundir::kRunCacheFile, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  analyze::LoadOptions options;
  options.request_ranges = 1;
  options.concurrent = false;
  options.cache = analyze::RunCache::kReadWrite;
  const analyze::RunData run = analyze::load_run(dir, options);
  const analyze::Thresholds t;
  for (const analyze::RunData* base : {static_cast<const analyze::RunData*>(nullptr), &run}) {
    try {
      (void)analyze::to_json(analyze::run_checklist(base, run, t, {}));
    } catch (const InputError&) {
    }
  }
  return 0;
}
