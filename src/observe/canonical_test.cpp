#include "observe/canonical.h"

#include <gtest/gtest.h>

namespace tokenscope::observe {
namespace {

TEST(Canonical, Placeholder) { EXPECT_EQ(engine_name(Engine::kDcgm), "dcgm"); }

}  // namespace
}  // namespace tokenscope::observe
