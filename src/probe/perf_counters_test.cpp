#include "probe/perf_counters.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

TEST(PerfEvents, GenericNamesResolveToPerfHardwareEvents) {
  const auto c = resolve_event("cycles");
  EXPECT_EQ(c.type, PERF_TYPE_HARDWARE);
  EXPECT_EQ(c.config, PERF_COUNT_HW_CPU_CYCLES);
  EXPECT_EQ(c.source, "generic");
  EXPECT_EQ(resolve_event("instructions").config, PERF_COUNT_HW_INSTRUCTIONS);
  EXPECT_EQ(resolve_event("cache-misses").config, PERF_COUNT_HW_CACHE_MISSES);
  EXPECT_EQ(resolve_event("branch-misses").config, PERF_COUNT_HW_BRANCH_MISSES);
}

TEST(PerfEvents, RawCodesAreHexadecimal) {
  const auto r = resolve_event("r01d2");
  EXPECT_EQ(r.type, PERF_TYPE_RAW);
  EXPECT_EQ(r.config, 0x1d2u);
  EXPECT_EQ(resolve_event("rFF").config, 0xffu);
}

TEST(PerfEvents, UnknownNamesAreUsageErrorsThatNameTheEvent) {
  for (const std::string bad :
       {"no-such-event", "rxyz", "r", "::", "MEM_LOAD_L3_HIT_RETIRED:NO_SUCH_UMASK"}) {
    try {
      resolve_event(bad);
      ADD_FAILURE() << bad << " resolved";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--events"), std::string::npos) << e.what();
    }
  }
}

TEST(PerfEvents, DefaultSetStartsWithTheGenericFour) {
  const auto d = default_events();
  ASSERT_GE(d.size(), 4u);
  EXPECT_EQ(d[0].name, "cycles");
  EXPECT_EQ(d[1].name, "instructions");
  EXPECT_EQ(d[2].name, "cache-references");
  EXPECT_EQ(d[3].name, "cache-misses");
  if (d.size() > 4) {
    EXPECT_EQ(d[4].role, "sharing");
  }
  if (!have_libpfm()) {
    EXPECT_EQ(d.size(), 4u);
  }
}

// The event choice for other CPU models (LIBPFM_FORCE_PMU) is checked in
// tests/blackbox/probe_test.cpp, one process per model: libpfm4 detects the
// PMU once per process.
TEST(PerfEvents, PmuEventsOfThisMachineResolve) {
  if (!have_libpfm()) GTEST_SKIP() << "built without libpfm4";
  const auto pmus = list_pmus(true);
  ASSERT_FALSE(pmus.empty());  // libpfm4's perf_events PMU is always there
  int core = 0;
  for (const auto& p : pmus) {
    if (p.event_count > 0) {
      EXPECT_FALSE(p.events.empty()) << p.pmu;
    }
    if (p.events.empty() || !p.core || p.pmu == "perf_raw") continue;
    // The first event of every PMU, spelled PMU::EVENT[:UMASK], encodes.
    const auto e = resolve_event(p.pmu + "::" + p.events.front());
    EXPECT_EQ(e.source, "libpfm4");
    EXPECT_EQ(e.encoding.rfind(p.pmu + "::", 0), 0u) << e.encoding;
    ++core;
  }
  EXPECT_GT(core, 0);
  EXPECT_TRUE(list_pmus(false, "no-such-pmu").empty());
}

TEST(PerfCounters, OpenOrSayWhyNot) {
  PerfCounters c(std::vector<EventSpec>{resolve_event("instructions")});
  if (!c.supported()) {
    EXPECT_NE(c.unsupported_reason().find("perf_event_open(instructions)"), std::string::npos)
        << c.unsupported_reason();
    return;
  }
  c.start();
  volatile std::uint64_t x = 0;
  for (int i = 0; i < 1'000'000; ++i) x = x + static_cast<std::uint64_t>(i);
  const auto r = c.stop();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_GT(r[0].value, 1'000'000u);
}

TEST(CounterTotals, SumsRepetitionsPerVariantAndDividesByTheWork) {
  std::vector<EventSpec> events{resolve_event("cycles"), resolve_event("instructions")};
  events.push_back({"hitm", "skx::MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM", "libpfm4", "sharing", 4, 0x4d2, 0, 0});
  CounterTotals t(events, "", {"packed", "padded64"});
  t.add(0, {{"cycles", 100}, {"instructions", 40}, {"hitm", 30}});
  t.add(0, {{"cycles", 300}, {"instructions", 60}, {"hitm", 10}, {"unrelated", 7}});
  t.add(1, {{"cycles", 50}, {"instructions", 100}, {"hitm", 0}});
  t.add(9, {{"cycles", 1}});  // no such variant: ignored
  const auto j = t.to_json("increment", 200);
  EXPECT_EQ(j["unit"], "increment");
  ASSERT_EQ(j["variants"].size(), 2u);
  EXPECT_EQ(j["variants"][0]["name"], "packed");
  EXPECT_DOUBLE_EQ(j["variants"][0]["totals"]["cycles"].get<double>(), 400);
  EXPECT_DOUBLE_EQ(j["variants"][0]["per_unit"]["cycles"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["variants"][0]["per_unit"]["hitm"].get<double>(), 0.2);
  EXPECT_FALSE(j["variants"][0]["totals"].contains("unrelated"));
  EXPECT_DOUBLE_EQ(j["variants"][1]["per_unit"]["instructions"].get<double>(), 0.5);
  EXPECT_EQ(j["events"][2]["role"], "sharing");

  const auto table = format_counters(j, "  ");
  EXPECT_NE(table.find("perf counters per increment"), std::string::npos) << table;
  EXPECT_NE(table.find("sharing*"), std::string::npos) << table;
  EXPECT_NE(table.find("2.0000"), std::string::npos) << table;
  EXPECT_NE(table.find("* sharing = skx::MEM_LOAD_L3_HIT_RETIRED:XSNP_HITM"), std::string::npos) << table;
}

TEST(CounterTotals, UnsupportedKeepsTheEventsAndTheReason) {
  CounterTotals t({resolve_event("cycles")}, "perf_event_open(cycles): No such file or directory", {"a"});
  t.add(0, {{"cycles", 5}});
  const auto j = t.to_json("position", 10);
  EXPECT_EQ(j["unsupported"], "perf_event_open(cycles): No such file or directory");
  EXPECT_FALSE(j.contains("variants"));
  EXPECT_EQ(j["events"][0]["name"], "cycles");
  EXPECT_EQ(format_counters(j, ""),
            "perf counters: not available (perf_event_open(cycles): No such file or directory)\n");
  EXPECT_EQ(format_counters(nlohmann::json::object(), ""), "");
}

}  // namespace
}  // namespace tokenscope::probe
