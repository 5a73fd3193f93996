// Records sampled memory accesses of a C++ program to a trace that
// `tokenscope probe line-sim` replays (binary format of access_trace.h).
// Header-only, standard library only, so any program can include it:
//
//   tokenscope::probe::AccessRecorder rec(/*sample_every=*/1);
//   rec.name(&table[0], sizeof table, "block_table");      // layout map entry
//   ... in any thread:  rec.record(&lens[seq], sizeof lens[seq], /*write=*/true);
//   rec.write_trace("run.tsat");  rec.write_layout("run.layout");
//
// Thread-safe: each thread appends to its own buffer; a global sequence
// number (one relaxed fetch_add per sampled access) orders the accesses of
// all threads as they happened, which is what the simulator needs. With
// sample_every = N only every N-th access of each thread is kept (cheaper,
// but sharing between unsampled accesses is missed). Threads get ids 0, 1, 2
// ... in the order of their first recorded access.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tokenscope::probe {

class AccessRecorder {
 public:
  explicit AccessRecorder(std::uint32_t sample_every = 1)
      : sample_every_(sample_every == 0 ? 1 : sample_every), id_(next_id().fetch_add(1) + 1) {}
  AccessRecorder(const AccessRecorder&) = delete;
  AccessRecorder& operator=(const AccessRecorder&) = delete;

  void record(const void* address, std::size_t size, bool write) {
    Slot& s = slot();
    if (s.counter++ % sample_every_ != 0) return;
    const std::uint64_t seq = seq_.fetch_add(1, std::memory_order_relaxed);
    s.records.push_back({seq, reinterpret_cast<std::uintptr_t>(address), s.thread,
                         static_cast<std::uint16_t>(std::clamp<std::size_t>(size, 1, 4096)), write});
  }

  // Names the object at [address, address + size) in the layout map.
  void name(const void* address, std::size_t size, std::string object_name) {
    for (char& c : object_name)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    std::lock_guard<std::mutex> lock(mutex_);
    layout_.push_back({reinterpret_cast<std::uintptr_t>(address), size, std::move(object_name)});
  }

  // Writes every recorded access, in global order. Call after the recording
  // threads have finished (or stopped recording). Throws std::runtime_error.
  void write_trace(const std::string& path) const {
    std::vector<Rec> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& s : slots_) all.insert(all.end(), s->records.begin(), s->records.end());
    }
    std::sort(all.begin(), all.end(), [](const Rec& a, const Rec& b) { return a.seq < b.seq; });
    std::string out = {'T', 'S', 'A', 'T'};
    put(out, std::uint32_t{1}, 4);
    put(out, std::uint32_t{16}, 4);
    put(out, std::uint32_t{0}, 4);
    for (const auto& r : all) {
      put(out, r.address, 8);
      put(out, r.thread, 4);
      put(out, r.size, 2);
      out += static_cast<char>(r.write ? 1 : 0);
      out += '\0';
    }
    write_file(path, out);
  }

  void write_layout(const std::string& path) const {
    std::string out = "# tokenscope layout map: ADDRESS SIZE NAME\n";
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : layout_) {
      char buf[64];
      const int n = std::snprintf(buf, sizeof buf, "0x%llx %llu ", static_cast<unsigned long long>(e.address),
                                  static_cast<unsigned long long>(e.size));
      out.append(buf, static_cast<std::size_t>(n));
      out += e.name;
      out += '\n';
    }
    write_file(path, out);
  }

  std::uint64_t recorded() const { return seq_.load(); }

 private:
  struct Rec {
    std::uint64_t seq;
    std::uint64_t address;
    std::uint32_t thread;
    std::uint16_t size;
    bool write;
  };
  struct Slot {
    std::uint32_t thread = 0;
    std::uint64_t counter = 0;
    std::vector<Rec> records;
  };
  struct Entry {
    std::uint64_t address;
    std::uint64_t size;
    std::string name;
  };

  static std::atomic<std::uint64_t>& next_id() {
    static std::atomic<std::uint64_t> id{0};
    return id;
  }

  Slot& slot() {
    // This thread's slot of each recorder it used, newest first (ids are
    // never reused, so a recorder at a recycled address is a new one).
    thread_local std::vector<std::pair<std::uint64_t, Slot*>> cache;
    if (!cache.empty() && cache.front().first == id_) return *cache.front().second;
    for (auto& [owner, s] : cache)
      if (owner == id_) return *s;
    std::lock_guard<std::mutex> lock(mutex_);
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->thread = static_cast<std::uint32_t>(slots_.size() - 1);
    cache.insert(cache.begin(), {id_, slots_.back().get()});
    return *cache.front().second;
  }

  template <typename T>
  static void put(std::string& out, T v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
  }

  static void write_file(const std::string& path, const std::string& data) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot open " + path + " for writing");
    const bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
    if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path + " (disk full?)");
  }

  const std::uint32_t sample_every_;
  const std::uint64_t id_;
  std::atomic<std::uint64_t> seq_{0};
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Entry> layout_;
};

}  // namespace tokenscope::probe
