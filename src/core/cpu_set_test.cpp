#include "core/cpu_set.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"

namespace tokenscope {
namespace {

TEST(CpuSet, ListsReadAndWriteInTheLinuxSyntax) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list(" 3,1,1 "), (std::vector<int>{1, 3}));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({5}), "5");
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list(parse_cpu_list("7,1-2,4")), "1-2,4,7");
  try {
    parse_cpu_list("1-x", "--client-cpus");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--client-cpus"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1-x"), std::string::npos) << e.what();
  }
}

TEST(CpuSet, AThreadSetStaysWithItAndIsInherited) {
  const std::vector<int> all = thread_cpus();
  ASSERT_FALSE(all.empty());
  std::vector<int> mine, child;
  std::thread t([&] {
    ASSERT_TRUE(set_thread_cpus({all.back()}));
    mine = thread_cpus();
    std::thread c([&] { child = thread_cpus(); });
    c.join();
  });
  t.join();
  EXPECT_EQ(mine, std::vector<int>{all.back()});
  EXPECT_EQ(child, std::vector<int>{all.back()});
  EXPECT_EQ(thread_cpus(), all);  // the caller's own set is untouched
  EXPECT_FALSE(set_thread_cpus({}));
  EXPECT_FALSE(set_thread_cpus({-1}));
}

TEST(CpuSet, ACpuOutsideTheThreadsSetIsAUsageError) {
  const std::vector<int> all = thread_cpus();
  ASSERT_FALSE(all.empty());
  EXPECT_NO_THROW(check_cpus_allowed(all, "--client-cpus"));
  EXPECT_NO_THROW(check_cpus_allowed({}, "--client-cpus"));
  try {
    check_cpus_allowed({all.back() + 1}, "--client-cpus");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--client-cpus: CPU " + std::to_string(all.back() + 1) +
                                         " is not one this process may run on (" + format_cpu_list(all) +
                                         ")");
  }
}

}  // namespace
}  // namespace tokenscope
