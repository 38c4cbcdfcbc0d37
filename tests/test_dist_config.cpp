// The dist block: one message per algorithm, the older flat fields refused with their new
// names, and the registry that turns dist.algorithm into a synchronizer.
#include <gtest/gtest.h>

#include "apps/config.h"
#include "dist/registry.h"
#include "support/test_helpers.h"

namespace mt {
namespace {

using mt::testing::contains;
using mt::testing::error_of;

apps::RunConfig with(const std::vector<std::string>& overrides) {
  apps::RunConfig c;
  for (const auto& o : overrides) apps::apply_override(c, o);
  apps::normalize_names(c);
  return c;
}

TEST(DistConfig, EveryAlgorithmIsRegisteredByName) {
  EXPECT_EQ(dist::algorithm_names(), (std::vector<std::string>{"auto", "bytescheduler", "cdsgd", "dlcp", "dssync", "local_sgd", "ps", "ssgd"}));
  const std::string e = error_of([] { dist::find_algorithm("parameter_server"); });
  EXPECT_TRUE(contains(e, "unknown dist.algorithm \"parameter_server\"")) << e;
  EXPECT_TRUE(contains(e, "local_sgd")) << e;
}

// The flat dist fields of older configs are refused, in a config file and on the command line
// alike, with the field's new name (one table: dist/registry.cpp), as the config error it is.
TEST(DistConfig, AnOldFlatFieldNamesItsNewField) {
  std::string e = error_of([] { apps::parse_config("dist { cdsgd_k: 3 }", "old.prototxt"); });
  EXPECT_TRUE(contains(e, "old.prototxt:1: dist.cdsgd_k is no longer read by training: set dist.cdsgd.k instead"))
      << e;
  e = error_of([] { with({"dist.schedule=MGWFBP"}); });
  EXPECT_TRUE(contains(e, "--set dist.schedule: dist.schedule is no longer read by training: set "
                          "dist.ssgd.schedule instead")) << e;
  e = error_of([] { with({"dist.comm_profile=comm.json"}); });
  EXPECT_TRUE(contains(e, "dist.ssgd.alpha and dist.ssgd.beta")) << e;
  // Any other unknown field keeps protobuf's own error, and the new layout is read as it is.
  e = error_of([] { apps::parse_config("dist { schedul: \"bsp\" }", "typo.prototxt"); });
  EXPECT_TRUE(contains(e, "schedul")) << e;
  EXPECT_FALSE(contains(e, "no longer read")) << e;
  EXPECT_EQ(with({"dist.ssgd.schedule=WFBP"}).dist().ssgd().schedule(), "wfbp");
}

TEST(DistConfig, BadValuesNameTheField) {
  std::string e = error_of([] { dist::validate_dist_config(with({"dist.dssync.pool_size=0"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.dssync.pool_size must be >= 1")) << e;
  e = error_of([] { dist::validate_dist_config(with({"dist.local_sgd.period=0"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.local_sgd.period must be >= 1")) << e;
}

}  // namespace
}  // namespace mt
