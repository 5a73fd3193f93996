#include "probe/kv_layout.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tokenscope::probe {
namespace {

KvGeometry geo(int head_dim, const std::string& dtype, int heads = 8, int block = 16) {
  KvGeometry g;
  g.head_dim = head_dim;
  g.dtype = dtype;
  g.kv_heads = heads;
  g.block_size = block;
  return g;
}

TEST(KvGeometry, RowAndBlockBytes) {
  EXPECT_EQ(geo(128, "bf16").row_bytes(), 256);
  EXPECT_EQ(geo(128, "fp8").row_bytes(), 128);
  EXPECT_EQ(geo(128, "bf16").block_bytes(), 2u * 16 * 8 * 256);
  EXPECT_THROW(dtype_bytes("int4"), UsageError);
}

// 256-byte rows on 64-byte lines, aligned: no row straddles or shares a line,
// and splitting by sequence never puts two threads on a line.
TEST(KvAnalysis, AlignedRowsShareNothing) {
  const auto a =
      analyze_kv_layout(geo(128, "bf16"), KvLayout::kHeadInterleaved, KvSplit::kBySequence, false, 2, 4, 2);
  EXPECT_EQ(a.rows, 4u * 32 * 8 * 2);
  EXPECT_EQ(a.rows_straddling, 0u);
  EXPECT_EQ(a.rows_sharing_lines, 0u);
  EXPECT_EQ(a.kv_lines, a.rows * 4);
  EXPECT_EQ(a.kv_lines_shared, 0u);
  // Packed metadata: lens[4] and generated[4] (one line each) are written by
  // both threads; progress[4][8] is 128 bytes = 2 lines, each holding two
  // sequences of different owners.
  EXPECT_EQ(a.metadata_lines, 4u);
  EXPECT_EQ(a.metadata_lines_shared, 4u);
  const auto p =
      analyze_kv_layout(geo(128, "bf16"), KvLayout::kHeadInterleaved, KvSplit::kBySequence, true, 2, 4, 2);
  EXPECT_EQ(p.metadata_lines_shared, 0u);
  // Padded: 4 {len, generated} slots and 32 progress slots of 128 bytes, each
  // first line its own.
  EXPECT_EQ(p.metadata_lines, 4u + 32u);
}

// 16-byte fp8 rows, split by head: head-interleaved puts 4 heads (4 threads)
// on every line; head-contiguous gives each head its own 4 lines per block.
TEST(KvAnalysis, SmallRowsSplitByHead) {
  const auto g = geo(16, "fp8");
  const auto il = analyze_kv_layout(g, KvLayout::kHeadInterleaved, KvSplit::kByHead, true, 8, 2, 1);
  EXPECT_EQ(il.rows, 2u * 16 * 8 * 2);
  EXPECT_EQ(il.rows_straddling, 0u);
  EXPECT_EQ(il.rows_sharing_lines, il.rows);  // four rows to a line
  EXPECT_EQ(il.kv_lines, il.rows / 4);
  EXPECT_EQ(il.kv_lines_shared, il.kv_lines);
  const auto hc = analyze_kv_layout(g, KvLayout::kHeadContiguous, KvSplit::kByHead, true, 8, 2, 1);
  EXPECT_EQ(hc.kv_lines, il.kv_lines);
  EXPECT_EQ(hc.kv_lines_shared, 0u);
  EXPECT_EQ(hc.rows_sharing_lines, hc.rows);  // rows still share lines, but with the same head
}

// A pool that starts 32 bytes past a line boundary: every 256-byte row now
// touches 5 lines instead of 4.
TEST(KvAnalysis, MisalignedPoolStraddles) {
  auto g = geo(128, "bf16");
  g.base_offset_bytes = 32;
  const auto a = analyze_kv_layout(g, KvLayout::kHeadContiguous, KvSplit::kBySequence, true, 2, 2, 1);
  EXPECT_EQ(a.rows_straddling, a.rows);
  EXPECT_DOUBLE_EQ(a.straddle_share(), 1.0);
  // Consecutive rows of different sequences meet only at block boundaries.
  EXPECT_GT(a.kv_lines_shared, 0u);
}

// 48-byte rows (head_dim 24, bf16): rows that cross a line boundary when
// one line could hold them.
TEST(KvAnalysis, OddRowsStraddleSome) {
  const auto a = analyze_kv_layout(geo(24, "bf16", 4, 4), KvLayout::kHeadContiguous, KvSplit::kBySequence,
                                   true, 1, 1, 1);
  // Offsets 0,48,96,144,192,240,...: of every 4 rows (192 bytes = 3 lines),
  // rows at 48 and 96 cross a boundary.
  EXPECT_EQ(a.rows, 4u * 4 * 2);
  EXPECT_EQ(a.rows_straddling, a.rows / 2);
}

TEST(KvLayoutProbe, RunsEveryVariantWithIntervals) {
  KvLayoutSettings s;
  s.geometry = geo(16, "fp8", 8, 16);
  s.threads = 2;
  s.sequences = 4;
  s.tokens_per_sequence = 32;
  s.read_window = 4;
  s.repetitions = 6;
  s.min_seconds_per_run = 0.002;
  const auto r = run_kv_layout_probe(s, read_topology());
  EXPECT_GE(r.steps_per_run, 32);
  ASSERT_EQ(r.variants.size(), 8u);
  for (const auto& v : r.variants) {
    EXPECT_EQ(v.tokens_per_s.n, 6u);
    EXPECT_GT(v.tokens_per_s.median, 0.0);
    EXPECT_EQ(v.vs_best.n, 6u);
  }
  EXPECT_FALSE(r.winner.empty());
  EXPECT_EQ(r.findings.size(), 8u);  // 4 padding comparisons + 4 layout comparisons
  const auto j = to_json(r);
  EXPECT_EQ(j["variants"].size(), 8u);
  EXPECT_EQ(j["settings"]["row_bytes"], 16);
  EXPECT_NE(format_table(r).find("fastest"), std::string::npos);
}

TEST(KvLayoutProbe, BadSettingsAreUsageErrors) {
  KvLayoutSettings s;
  s.geometry.line_size = 48;
  EXPECT_THROW(run_kv_layout_probe(s, read_topology()), UsageError);
  s = {};
  s.geometry.dtype = "int3";
  EXPECT_THROW(run_kv_layout_probe(s, read_topology()), UsageError);
  for (const int threads : {-1, 65}) {
    s = {};
    s.threads = threads;
    EXPECT_THROW(run_kv_layout_probe(s, read_topology()), UsageError) << threads;
  }
}

}  // namespace
}  // namespace tokenscope::probe
