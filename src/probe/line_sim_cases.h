// A seeded suite of sharing microbenchmarks with known answers, for testing
// the line-ownership simulator and for trying it out
// (`tokenscope probe line-sim --generate CASE`). Each case builds one program
// of accesses per thread and interleaves them with a seeded random scheduler,
// as a real run would in some order; the expected classification of every
// named object's lines holds for every interleaving.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "probe/access_trace.h"

namespace tokenscope::probe {

struct SharingCase {
  std::string name;
  std::string description;
  std::vector<Access> trace;
  std::vector<LayoutEntry> layout;
  // Per layout entry name: the classification its lines must get at 64-byte
  // lines ("false", "true", "mixed" or "none").
  std::map<std::string, std::string> expected;
};

std::vector<std::string> sharing_case_names();
// UsageError for an unknown name. threads >= 2, iterations >= 1.
SharingCase make_sharing_case(const std::string& name, std::uint64_t seed, int threads = 4,
                              int iterations = 200);

}  // namespace tokenscope::probe
