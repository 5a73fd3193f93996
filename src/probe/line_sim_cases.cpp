#include "probe/line_sim_cases.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"

namespace tokenscope::probe {

namespace {

constexpr std::uint64_t kBase = 0x7f0000000000ull;  // line- and page-aligned

using Program = std::vector<Access>;

std::vector<Access> interleave(std::vector<Program> programs, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::size_t> pos(programs.size(), 0);
  std::vector<Access> out;
  std::size_t left = 0;
  for (const auto& p : programs) left += p.size();
  out.reserve(left);
  while (left > 0) {
    // Pick a thread with work left, uniformly.
    std::vector<std::size_t> ready;
    for (std::size_t t = 0; t < programs.size(); ++t)
      if (pos[t] < programs[t].size()) ready.push_back(t);
    const std::size_t t = ready[rng.uniform_int(0, ready.size() - 1)];
    // Run a short burst, as a thread does between preemptions or misses.
    const std::size_t burst = rng.uniform_int(1, 4);
    for (std::size_t k = 0; k < burst && pos[t] < programs[t].size(); ++k) {
      out.push_back(programs[t][pos[t]++]);
      --left;
    }
  }
  return out;
}

Access rd(std::uint32_t t, std::uint64_t a, std::uint32_t size) {
  return {a, t, size, false};
}
Access wr(std::uint32_t t, std::uint64_t a, std::uint32_t size) {
  return {a, t, size, true};
}

// Thread t increments its 8-byte counter at base + t * stride.
SharingCase counters(const std::string& name, std::uint64_t seed, int threads, int iters,
                     std::uint64_t stride) {
  SharingCase c;
  c.name = name;
  std::vector<Program> progs(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const std::uint64_t a = kBase + static_cast<std::uint64_t>(t) * stride;
    c.layout.push_back({a, 8, "counter[" + std::to_string(t) + "]"});
    for (int i = 0; i < iters; ++i) {
      progs[static_cast<std::size_t>(t)].push_back(rd(static_cast<std::uint32_t>(t), a, 8));
      progs[static_cast<std::size_t>(t)].push_back(wr(static_cast<std::uint32_t>(t), a, 8));
    }
  }
  c.trace = interleave(std::move(progs), seed);
  return c;
}

}  // namespace

std::vector<std::string> sharing_case_names() {
  return {"packed-counters", "padded-counters",  "shared-counter", "producer-consumer",
          "read-mostly",     "sequence-structs", "mixed-line",     "block-table"};
}

// Long by nature: one branch per built-in case.
SharingCase make_sharing_case(const std::string& name, std::uint64_t seed, int threads, int iters) {
  if (threads < 2 || threads > 64) throw UsageError("a sharing case needs 2..64 threads");
  if (iters < 1) throw UsageError("a sharing case needs at least one iteration");
  const auto T = static_cast<std::uint32_t>(threads);
  SharingCase c;
  if (name == "packed-counters") {
    c = counters(name, seed, std::min(threads, 8), iters, 8);
    c.description =
        "each thread increments its own 8-byte counter; the counters share one line (false sharing)";
    for (const auto& e : c.layout) c.expected[e.name] = "false";
  } else if (name == "padded-counters") {
    c = counters(name, seed, threads, iters, 64);
    c.description = "each thread increments its own counter, each on its own 64-byte line (no sharing)";
    for (const auto& e : c.layout) c.expected[e.name] = "none";
  } else if (name == "shared-counter") {
    c.name = name;
    c.description = "every thread increments one shared counter (true sharing)";
    std::vector<Program> progs(T);
    for (std::uint32_t t = 0; t < T; ++t)
      for (int i = 0; i < iters; ++i) {
        progs[t].push_back(rd(t, kBase, 8));
        progs[t].push_back(wr(t, kBase, 8));
      }
    c.layout.push_back({kBase, 8, "shared_counter"});
    c.expected["shared_counter"] = "true";
    c.trace = interleave(std::move(progs), seed);
  } else if (name == "producer-consumer") {
    c.name = name;
    c.description =
        "thread 0 writes a 64-byte message (eight 8-byte stores), thread 1 reads it whole, over and over "
        "(true "
        "sharing: every miss moves data the other thread wrote)";
    std::vector<Program> progs(2);
    for (int i = 0; i < iters; ++i) {
      for (std::uint64_t off = 0; off < 64; off += 8) progs[0].push_back(wr(0, kBase + off, 8));
      progs[1].push_back(rd(1, kBase, 64));
    }
    c.layout.push_back({kBase, 64, "message"});
    c.expected["message"] = "true";
    c.trace = interleave(std::move(progs), seed);
  } else if (name == "read-mostly") {
    c.name = name;
    c.description =
        "thread 0 fills a 256-byte table once, then every thread only reads it: first touches are cold "
        "misses and "
        "the lines settle shared (no sharing misses)";
    std::vector<Access> init;
    for (std::uint64_t off = 0; off < 256; off += 8) init.push_back(wr(0, kBase + off, 8));
    std::vector<Program> progs(T);
    for (std::uint32_t t = 0; t < T; ++t)
      for (int i = 0; i < iters; ++i)
        progs[t].push_back(rd(t, kBase + static_cast<std::uint64_t>((i * 8 + t * 24) % 256), 8));
    c.trace = init;
    const auto rest = interleave(std::move(progs), seed);
    c.trace.insert(c.trace.end(), rest.begin(), rest.end());
    c.layout.push_back({kBase, 256, "table"});
    c.expected["table"] = "none";
  } else if (name == "sequence-structs") {
    c.name = name;
    c.description =
        "16-byte per-sequence structs {len, generated} packed 4 to a line, thread t updating sequence t "
        "(false "
        "sharing), and a step counter on its own line written by thread 0 and read by all (true sharing)";
    std::vector<Program> progs(T);
    const std::uint64_t seqs = kBase, step = kBase + 4096;
    for (std::uint32_t t = 0; t < T; ++t) {
      const std::uint64_t s = seqs + static_cast<std::uint64_t>(t) * 16;
      c.layout.push_back({s, 16, "seq[" + std::to_string(t) + "]"});
      c.expected["seq[" + std::to_string(t) + "]"] = "false";
      for (int i = 0; i < iters; ++i) {
        if (t == 0)
          progs[t].push_back(wr(0, step, 8));
        else
          progs[t].push_back(rd(t, step, 8));
        progs[t].push_back(rd(t, s, 8));
        progs[t].push_back(wr(t, s, 8));
        progs[t].push_back(wr(t, s + 8, 8));
      }
    }
    c.layout.push_back({step, 8, "step"});
    c.expected["step"] = "true";
    c.trace = interleave(std::move(progs), seed);
  } else if (name == "mixed-line") {
    c.name = name;
    c.description =
        "one line holds a flag written by thread 0 and read by all (true sharing) beside per-thread counters "
        "(false sharing): both kinds on one line";
    std::vector<Program> progs(T);
    const std::uint64_t line = kBase;
    for (std::uint32_t t = 0; t < T && t < 7; ++t)
      for (int i = 0; i < iters; ++i) {
        if (t == 0)
          progs[t].push_back(wr(0, line, 8));
        else
          progs[t].push_back(rd(t, line, 8));
        progs[t].push_back(wr(t, line + 8 + static_cast<std::uint64_t>(t) * 8, 8));
      }
    progs.resize(std::min<std::size_t>(T, 7));
    c.layout.push_back({line, 64, "flag_and_counters"});
    c.expected["flag_and_counters"] = "mixed";
    c.trace = interleave(std::move(progs), seed);
  } else if (name == "block-table") {
    c.name = name;
    c.description =
        "int32 block-table entries of several sequences packed in one array, each thread appending to its "
        "own "
        "sequence's 4 entries (false sharing)";
    std::vector<Program> progs(T);
    for (std::uint32_t t = 0; t < T; ++t) {
      const std::uint64_t row = kBase + static_cast<std::uint64_t>(t) * 16;  // 4 entries of 4 bytes
      c.layout.push_back({row, 16, "block_table[" + std::to_string(t) + "]"});
      c.expected["block_table[" + std::to_string(t) + "]"] = "false";
      for (int i = 0; i < iters; ++i) {
        const std::uint64_t e = row + static_cast<std::uint64_t>(i % 4) * 4;
        progs[t].push_back(wr(t, e, 4));
        progs[t].push_back(rd(t, row, 16));
      }
    }
    c.trace = interleave(std::move(progs), seed);
  } else {
    std::string names;
    for (const auto& n : sharing_case_names()) names += (names.empty() ? "" : ", ") + n;
    throw UsageError("unknown sharing case '" + name + "'; expected one of: " + names);
  }
  return c;
}

}  // namespace tokenscope::probe
