// requests.csv rows: exact text, quoting, empty cells for what did not
// happen, and as many cells as the header names.
#include "bench/requests_csv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace tokenscope::bench {
namespace {

// Splits one CSV line into cells ("" quotes a quote inside a quoted cell).
std::vector<std::string> cells(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

TEST(RequestsCsv, RowOfACompletedRequest) {
  RequestRecord r;
  r.id = 7;
  r.tenant = "a\"b";
  r.task_class = "chat";
  r.session = 2;
  r.turn = 1;
  r.http_status = 200;
  r.t_sched = 1'000'000;
  r.t_send = 3'000'000;
  r.t_first_token = 13'000'000;
  r.t_last_token = 43'000'000;
  r.t_close = 44'000'000;
  r.prompt_tokens = 10;
  r.output_tokens = 4;
  r.output_tokens_client = 4;
  r.cached_tokens = 2;
  r.detail = "line1\nline2\r";
  std::string row;
  append_csv_row(row, r);
  // TTFT 10 ms (from the send), 12 ms from the schedule, TPOT 30 ms / 3, E2E 40 ms, send lag 2 ms.
  EXPECT_EQ(row,
            "7,\"a\"\"b\",\"chat\",2,1,0,ok,200,1000000,3000000,13000000,43000000,44000000,10,4,4,2,10.0000,"
            "12.0000,10.0000,40.0000,2.0000,-1,10.0000,,,\"line1 line2 \"");
  const auto c = cells(row);
  ASSERT_EQ(c.size(), cells(kRequestsCsvHeader).size());
  EXPECT_EQ(c[1], "a\"b");
  // A reasoning model's request: its reasoning tokens, and TTFO at its first answer token (25 ms).
  r.reasoning_tokens = 2;
  r.t_first_answer = 28'000'000;
  row.clear();
  append_csv_row(row, r);
  const auto d = cells(row);
  const auto header = cells(kRequestsCsvHeader);
  const auto col = [&](std::string_view name) {
    return std::find(header.begin(), header.end(), name) - header.begin();
  };
  EXPECT_EQ(d[col("reasoning_tokens")], "2");
  EXPECT_EQ(d[col("ttfo_ms")], "25.0000");
  EXPECT_EQ(d[col("ttft_ms")], "10.0000");
  // An agentic task's model call names its task and step.
  r.task = 12;
  r.step = "summary";
  row.clear();
  append_csv_row(row, r);
  const auto e = cells(row);
  EXPECT_EQ(e[col("task")], "12");
  EXPECT_EQ(e[col("step")], "summary");
}

TEST(RequestsCsv, FailedRequestLeavesDerivedCellsEmpty) {
  RequestRecord r;
  r.id = 3;
  r.tenant = "default";
  r.warmup = true;
  r.outcome = Outcome::kConnectError;
  r.t_sched = 0;
  r.t_send = 1'500'000;
  r.t_close = 2'000'000;
  r.detail = "Connection refused";
  std::string row;
  append_csv_row(row, r);
  EXPECT_EQ(row,
            "3,\"default\",\"\",,0,1,connect_error,-1,0,1500000,-1,-1,2000000,-1,-1,-1,-1,,,,,1.5000,-1,,,,"
            "\"Connection refused\"");
  EXPECT_EQ(cells(row).size(), cells(kRequestsCsvHeader).size());
}

}  // namespace
}  // namespace tokenscope::bench
