#include "probe/numa_probe.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

// cpus 0..n-1; cpu c and c + n/2 are SMT siblings when smt is set.
Topology machine(int n, bool smt, std::map<int, std::vector<int>> nodes) {
  Topology t;
  for (int c = 0; c < n; ++c) t.online_cpus.push_back(c);
  for (int c = 0; c < n; ++c) {
    if (smt) {
      const int half = n / 2, first = c % half;
      t.thread_siblings[c] = {first, first + half};
    } else {
      t.thread_siblings[c] = {c};
    }
  }
  t.numa_nodes = std::move(nodes);
  return t;
}

TEST(NumaPlan, SparseNodeIdsAndSmtSiblings) {
  // Two sockets as nodes 0 and 2; cpus 0-3 and their siblings 8-11 on node 0.
  const auto t = machine(16, true, {{0, {0, 1, 2, 3, 8, 9, 10, 11}}, {2, {4, 5, 6, 7, 12, 13, 14, 15}}});
  const auto p = plan_numa(t, {2, 0});
  EXPECT_EQ(p.memory_nodes, (std::vector<int>{0, 2}));
  ASSERT_EQ(p.reader.size(), 2u);
  EXPECT_EQ(p.reader.at(0), 0);
  EXPECT_EQ(p.reader.at(2), 4);
  EXPECT_EQ(p.cross_pair, (std::vector<int>{0, 4}));
  // Two physical cores of node 0, never a core and its sibling (0 and 8).
  EXPECT_EQ(p.same_pair, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.same_pair_node, 0);
  EXPECT_TRUE(p.notes.empty());
}

TEST(NumaPlan, OneCpuPerNodeHasNoSameNodeBaseline) {
  const auto t = machine(2, false, {{0, {0}}, {1, {1}}});
  const auto p = plan_numa(t, {0, 1});
  EXPECT_EQ(p.cross_pair, (std::vector<int>{0, 1}));
  EXPECT_TRUE(p.same_pair.empty());
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("same-node"), std::string::npos);
}

TEST(NumaPlan, MemoryOnlyAndCpuOnlyNodesAreNamed) {
  // Node 1 has cpus and no memory; node 3 memory and no cpus (CXL).
  const auto t = machine(4, false, {{0, {0, 1}}, {1, {2, 3}}});
  const auto p = plan_numa(t, {0, 3});
  EXPECT_EQ(p.reader.size(), 2u);  // both cpu nodes read (node 1 reads remote memory only)
  EXPECT_EQ(p.cross_pair, (std::vector<int>{0, 2}));
  EXPECT_EQ(p.same_pair, (std::vector<int>{0, 1}));
  ASSERT_EQ(p.notes.size(), 2u);
  EXPECT_NE(p.notes[0].find("node 1 has no memory"), std::string::npos) << p.notes[0];
  EXPECT_NE(p.notes[1].find("node 3 has memory but no cpu"), std::string::npos) << p.notes[1];
}

TEST(NumaPlan, OneNodeWithCpusHasNoCrossPair) {
  const auto t = machine(4, false, {{0, {0, 1, 2, 3}}});
  const auto p = plan_numa(t, {0, 1});  // node 1: memory only
  EXPECT_TRUE(p.cross_pair.empty());
  EXPECT_EQ(p.same_pair, (std::vector<int>{0, 1}));
  bool said = false;
  for (const auto& n : p.notes) said = said || n.find("no cross-node") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(NumaProbe, BadSettingsAreUsageErrors) {
  const auto t = machine(2, false, {{0, {0, 1}}});
  NumaSettings s;
  s.repetitions = 0;
  EXPECT_THROW(run_numa_probe(s, t), UsageError);
  s.repetitions = 1;
  s.buffer_bytes = 1000;
  EXPECT_THROW(run_numa_probe(s, t), UsageError);
}

TEST(NumaProbe, OneNodeSaysSoAndMeasuresNothing) {
  const auto t = machine(2, false, {{0, {0, 1}}});
  NumaSettings s;
  s.buffer_bytes = 1 << 20;
  s.repetitions = 1;
  const auto r = run_numa_probe(s, t);
  if (r.nodes > 1) GTEST_SKIP() << "this machine has " << r.nodes << " nodes";
  EXPECT_FALSE(r.note.empty());
  EXPECT_TRUE(r.bandwidth.empty());
  EXPECT_EQ(r.cross_node_packed_over_padded.n, 0u);
  const auto j = to_json(r);
  EXPECT_EQ(j["note"], r.note);
  EXPECT_NE(format_table(r).find(r.note), std::string::npos);
}

}  // namespace
}  // namespace tokenscope::probe
