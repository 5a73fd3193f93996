// The run cache: what load_run derives from a run's JSONL files
// (RunFilesRead: the per-request columns, the inter-token histogram, the
// sampled series, the CUPTI kernel inventory, the reduced steps), kept in
// one binary file in the run directory, `.tokenscope-cache`, so that the
// next `check` or `report` of the run reads a few dozen MB instead of
// parsing GBs of JSON again
// (docs/check.md "The run cache").
//
// The cache is an optimisation only, never a source of truth: it holds the
// size and modification time of each file it was made from (run.json,
// requests.jsonl, samples.jsonl, steps.jsonl), the format version and the
// build's layout, and a cache that does not match them in every respect, or
// that is cut, or that is not a cache at all, is ignored (the JSONL files
// are read, and a new cache written). Writing is best effort: a run
// directory that cannot be written to (read-only, a full disk) is read
// without one, and the write is atomic (a temporary file renamed), so a
// reader never sees half a cache.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "observe/run_listener.h"
#include "rundir/run_files.h"

namespace tokenscope::rundir {

// The cache file's name in a run directory.
inline constexpr const char* kRunCacheFile = ".tokenscope-cache";

// What a cache was made from: per source file, whether it exists, its size
// and its modification time (ns since the epoch).
struct RunFileStamp {
  bool exists = false;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const RunFileStamp&) const = default;
};
struct RunFilesKey {
  // run.json, requests.jsonl, samples.jsonl, steps.jsonl, in that order.
  std::array<RunFileStamp, 4> files;
  bool operator==(const RunFilesKey&) const = default;
};

// The key of the files in dir as they are now.
RunFilesKey run_files_key(const std::filesystem::path& dir);

// The first bytes of every cache made from files with this key (its
// format, the build's layout, the key); what follows is the content.
std::string run_cache_header(const RunFilesKey& key);

// The cache's bytes for these files and what was read of them.
std::string encode_run_cache(const RunFilesKey& key, const RunFilesRead& read);
// The cache's content when bytes are a whole cache of this format, made from
// files with this key; nullopt otherwise (any difference, a cut or foreign
// file). Never throws for bad bytes.
std::optional<RunFilesRead> decode_run_cache(std::string_view bytes, const RunFilesKey& key);

// The cache of dir when it holds a valid one for key; nullopt otherwise.
std::optional<RunFilesRead> load_run_cache(const std::filesystem::path& dir, const RunFilesKey& key);
// Writes dir's cache (atomically); false when it could not be written (the
// reason is not an error: the run is read without a cache next time).
bool save_run_cache(const std::filesystem::path& dir, const RunFilesKey& key, const RunFilesRead& read);

// A run's listener (observe/run_listener.h) that builds its cache from the
// lines as they are written (RunFilesBuilder) and, when the run reached its
// end, saves it in the run directory: the run cache of bench and sim,
// without reading the run back. Thread-safe.
std::unique_ptr<observe::RunListener> run_cache_writer();

}  // namespace tokenscope::rundir
