#include "probe/topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

TEST(CpuList, ParsesRangesAndSingles) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list(" 3,1,1 "), (std::vector<int>{1, 3}));
  EXPECT_TRUE(parse_cpu_list("\n").empty());
}

TEST(CpuList, RejectsGarbageWithTheFileName) {
  try {
    parse_cpu_list("0-x", "/sys/x/online");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "/sys/x/online");
    EXPECT_NE(std::string(e.what()).find("0-x"), std::string::npos);
  }
  EXPECT_THROW(parse_cpu_list("5-2"), InputError);
  EXPECT_THROW(parse_cpu_list("1,,2"), InputError);
  EXPECT_THROW(parse_cpu_list("-1"), InputError);
}

class FakeSys : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("ts_topo_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void put(const std::string& rel, const std::string& text) {
    const auto p = root_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::filesystem::path root_;
};

// Four cpus on two SMT cores: 0/2 and 1/3 are siblings.
TEST_F(FakeSys, ReadsSiblingsCachesAndNodes) {
  put("proc/cpuinfo", "processor : 0\nmodel name\t: Test CPU 9000\n");
  put("sys/devices/system/cpu/online", "0-3\n");
  for (int c = 0; c < 4; ++c) {
    const std::string d = "sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    put(d + "thread_siblings_list", c % 2 == 0 ? "0,2\n" : "1,3\n");
    put(d + "core_id", std::to_string(c % 2) + "\n");
    put(d + "physical_package_id", "0\n");
  }
  const std::string idx = "sys/devices/system/cpu/cpu0/cache/index0/";
  put(idx + "level", "1\n");
  put(idx + "type", "Data\n");
  put(idx + "size", "48K\n");
  put(idx + "coherency_line_size", "64\n");
  put(idx + "shared_cpu_list", "0,2\n");
  put("sys/devices/system/cpu/cpu0/cache/index1/level", "3\n");
  put("sys/devices/system/cpu/cpu0/cache/index1/type", "Unified\n");
  put("sys/devices/system/cpu/cpu0/cache/index1/size", "32M\n");
  put("sys/devices/system/cpu/cpu0/cache/index1/coherency_line_size", "128\n");
  put("sys/devices/system/node/online", "0\n");
  put("sys/devices/system/node/node0/cpulist", "0-3\n");

  const Topology t = read_topology(root_);
  EXPECT_EQ(t.cpu_model, "Test CPU 9000");
  EXPECT_EQ(t.online_cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(t.are_siblings(0, 2));
  EXPECT_FALSE(t.are_siblings(0, 1));
  EXPECT_EQ(t.one_cpu_per_core(), (std::vector<int>{0, 1}));
  ASSERT_EQ(t.caches.size(), 2u);
  EXPECT_EQ(t.caches[0].size_bytes, 48u * 1024);
  EXPECT_EQ(t.caches[1].size_bytes, 32u << 20);
  EXPECT_EQ(t.reported_line_size(), 64);  // L1d first
  EXPECT_EQ(t.numa_nodes.size(), 1u);

  bool siblings = true;
  EXPECT_EQ(choose_cpus(t, 2, siblings), (std::vector<int>{0, 1}));
  EXPECT_FALSE(siblings);
  // Three threads on two cores: one pair must share a core, and it says so.
  const auto three = choose_cpus(t, 3, siblings);
  EXPECT_EQ(three.size(), 3u);
  EXPECT_TRUE(siblings);
}

TEST_F(FakeSys, MissingFilesAreNotedNotFatal) {
  put("sys/devices/system/cpu/online", "0\n");
  const Topology t = read_topology(root_);
  EXPECT_EQ(t.online_cpus, (std::vector<int>{0}));
  EXPECT_FALSE(t.notes.empty());
  EXPECT_EQ(t.thread_siblings.at(0), (std::vector<int>{0}));
  EXPECT_EQ(t.numa_nodes.size(), 1u);
}

TEST_F(FakeSys, MalformedFileIsAnInputError) {
  put("sys/devices/system/cpu/online", "zero\n");
  EXPECT_THROW(read_topology(root_), InputError);
}

TEST(Topology, ThisMachineHasOnlineCpus) {
  const Topology t = read_topology();
  EXPECT_FALSE(t.online_cpus.empty());
  EXPECT_FALSE(t.one_cpu_per_core().empty());
}

}  // namespace
}  // namespace tokenscope::probe
