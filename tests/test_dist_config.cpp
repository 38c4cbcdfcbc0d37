// The dist block: one message per algorithm, the older flat fields mapped onto them in one place
// (dist/registry.h), and the registry that turns dist.algorithm into a synchronizer.
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
  EXPECT_EQ(dist::algorithm_names(), (std::vector<std::string>{"bytescheduler", "cdsgd", "dlcp", "dssync", "local_sgd", "ps", "ssgd"}));
  const std::string e = error_of([] { dist::find_algorithm("parameter_server"); });
  EXPECT_TRUE(contains(e, "unknown dist.algorithm \"parameter_server\"")) << e;
  EXPECT_TRUE(contains(e, "local_sgd")) << e;
}

TEST(DistConfig, FlatFieldsOfOlderConfigsLandInTheirMessages) {
  const auto c = with({"dist.schedule=MGWFBP", "dist.alpha=0.001", "dist.beta=1e-9", "dist.compression=Two_Bit",
                       "dist.compression_tau=0.2", "dist.cdsgd_k=3", "dist.dssync_rack=[0,0,1]",
                       "dist.dssync_seed=7", "dist.momentum_correction=false"});
  const mintrain::DistConfig d = dist::resolve_dist_config(c.dist());
  EXPECT_EQ(d.ssgd().schedule(), "mgwfbp");
  EXPECT_EQ(d.ssgd().alpha(), 0.001);
  EXPECT_EQ(d.ssgd().beta(), 1e-9);
  EXPECT_EQ(d.compressor().type(), "two_bit");
  EXPECT_EQ(d.compressor().tau(), 0.2);
  EXPECT_FALSE(d.compressor().momentum_correction());
  EXPECT_EQ(d.cdsgd().k(), 3);
  EXPECT_EQ(d.dssync().rack_size(), 3);
  EXPECT_EQ(d.dssync().seed(), 7u);
  // Moved, not copied: nothing is left in the flat fields.
  EXPECT_FALSE(d.has_schedule());
  EXPECT_EQ(d.dssync_rack_size(), 0);
  // The new layout is read as it is, and both layouts agreeing is fine.
  const auto n = with({"dist.ssgd.schedule=wfbp", "dist.schedule=wfbp", "dist.cdsgd.lambda=0"});
  EXPECT_EQ(dist::resolve_dist_config(n.dist()).ssgd().schedule(), "wfbp");
  EXPECT_EQ(dist::resolve_dist_config(n.dist()).cdsgd().lambda(), 0.0);
}

TEST(DistConfig, ConflictsAndRemovedFieldsNameTheNewField) {
  std::string e = error_of([] { dist::resolve_dist_config(with({"dist.cdsgd.k=2", "dist.cdsgd_k=3"}).dist()); });
  EXPECT_TRUE(contains(e, "both dist.cdsgd_k (an older name) and dist.cdsgd.k")) << e;
  e = error_of([] { dist::validate_dist_config(with({"dist.comm_profile=comm.json"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.ssgd.alpha and dist.ssgd.beta")) << e;
  // A bad value names the field as the config wrote it, and its new name.
  e = error_of([] { dist::validate_dist_config(with({"dist.dssync_pool_size=0"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.dssync_pool_size must be >= 1")) << e;
  EXPECT_TRUE(contains(e, "dist.dssync_pool_size is now dist.dssync.pool_size")) << e;
  e = error_of([] { dist::validate_dist_config(with({"dist.dssync.pool_size=0"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.dssync.pool_size must be >= 1")) << e;
  e = error_of([] { dist::validate_dist_config(with({"dist.local_sgd.period=0"}).dist()); });
  EXPECT_TRUE(contains(e, "dist.local_sgd.period must be >= 1")) << e;
}

}  // namespace
}  // namespace mt
