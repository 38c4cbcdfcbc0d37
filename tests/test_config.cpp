// Run configs (apps/config.h): the shipped configs parse and validate; syntax errors point at
// file:line:col; --set overrides reach scalars, strings, repeated and nested fields; mistakes
// name the field and list what is valid.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "apps/config.h"
#include "core/error.h"

using namespace mt::apps;
using mt::core::Error;
namespace fs = std::filesystem;

namespace {

// The message of the Error that f throws (fails the test if it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("mt_test_config_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

const std::string kConfigs = std::string(MT_SOURCE_DIR) + "/configs/";

}  // namespace

TEST(Config, ShippedConfigsParseAndValidate) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".prototxt") continue;
    SCOPED_TRACE(entry.path().string());
    RunConfig c;
    EXPECT_NO_THROW(c = load_run_config(entry.path().string(), {}));
    EXPECT_GT(c.epochs(), 0);
    ++n;
  }
  EXPECT_GE(n, 3);
  const RunConfig lenet = load_config(kConfigs + "lenet_fashion_mnist.prototxt");
  EXPECT_EQ(lenet.model().name(), "lenet5");
  EXPECT_EQ(lenet.data().batch_size(), 64);
  EXPECT_FLOAT_EQ(lenet.data().train_transform().mean(0), 0.2860f);
  const RunConfig resnet = load_config(kConfigs + "resnet20_cifar10.prototxt");
  EXPECT_EQ(resnet.data().train_transform().random_crop_padding(), 4);
  EXPECT_EQ(resnet.lr_schedule().milestones_size(), 2);
}

TEST(Config, TextRoundTrip) {
  const RunConfig a = load_config(kConfigs + "resnet20_cifar10.prototxt");
  const RunConfig b = parse_config(config_to_text(a), "round-trip");
  EXPECT_EQ(config_to_text(b), config_to_text(a));
}

TEST(Config, SyntaxErrorPointsAtFileLineColumn) {
  const std::string msg = error_of([] {
    parse_config("epochs: 5\nmodel {\n  name: \"mlp\"\n  hidden: 64 64\n", "bad.prototxt");
  });
  // Line 4: after `hidden: 64` another bare value where a field name is expected (col 14).
  EXPECT_NE(msg.find("bad.prototxt:4:14:"), std::string::npos) << msg;

  const std::string path = write_temp("unclosed.prototxt", "name: \"x\"\ndata {\n  batch_size: 3\n");
  const std::string msg2 = error_of([&] { load_config(path); });
  EXPECT_NE(msg2.find(path + ":"), std::string::npos) << msg2;
  fs::remove(path);
}

TEST(Config, UnknownFieldIsNamed) {
  const std::string msg = error_of([] { parse_config("name: \"x\"\nepoch: 5\n", "cfg.prototxt"); });
  EXPECT_NE(msg.find("cfg.prototxt:2:"), std::string::npos) << msg;  // protobuf points just past the name
  EXPECT_NE(msg.find("epoch"), std::string::npos) << msg;
}

TEST(Config, MissingFile) {
  const std::string msg = error_of([] { load_config("/nonexistent/run.prototxt"); });
  EXPECT_NE(msg.find("/nonexistent/run.prototxt"), std::string::npos) << msg;
}

TEST(Config, OverrideScalarStringRepeatedNested) {
  RunConfig c = load_config(kConfigs + "resnet20_cifar10.prototxt");
  apply_override(c, "optimizer.lr=0.02");
  apply_override(c, "epochs=7");
  apply_override(c, "model.name=lenet5");         // no quotes needed
  apply_override(c, "name=\"quoted name\"");       // quotes allowed
  apply_override(c, "lr_schedule.milestones=[10,20, 30]");  // replaces [80, 120]
  apply_override(c, "data.train_transform.random_flip=false");
  apply_override(c, "data.synthetic.size=5");
  apply_override(c, " model.hidden = 32 ");        // one bare value for a repeated field
  EXPECT_DOUBLE_EQ(c.optimizer().lr(), 0.02);
  EXPECT_EQ(c.epochs(), 7);
  EXPECT_EQ(c.model().name(), "lenet5");
  EXPECT_EQ(c.name(), "quoted name");
  ASSERT_EQ(c.lr_schedule().milestones_size(), 3);
  EXPECT_DOUBLE_EQ(c.lr_schedule().milestones(2), 30);
  EXPECT_FALSE(c.data().train_transform().random_flip());
  EXPECT_EQ(c.data().synthetic().size(), 5);
  ASSERT_EQ(c.model().hidden_size(), 1);
  EXPECT_EQ(c.model().hidden(0), 32);
  // The rest of a nested message is untouched.
  EXPECT_EQ(c.data().train_transform().random_crop_padding(), 4);

  apply_override(c, "lr_schedule.milestones=[]");
  EXPECT_EQ(c.lr_schedule().milestones_size(), 0);
  apply_override(c, "data.synthetic={ classes: 3 }");  // a whole message is replaced
  EXPECT_EQ(c.data().synthetic().classes(), 3);
  EXPECT_EQ(c.data().synthetic().size(), 1024);  // back to its default
  EXPECT_NO_THROW(validate_config(c));
}

TEST(Config, BadOverridesExplainThemselves) {
  RunConfig c = load_config(kConfigs + "mlp_synthetic.prototxt");
  std::string msg = error_of([&] { apply_override(c, "optimizer.lrr=1"); });
  EXPECT_NE(msg.find("\"lrr\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("lr, momentum"), std::string::npos) << msg;

  msg = error_of([&] { apply_override(c, "nosuch.x=1"); });
  EXPECT_NE(msg.find("optimizer"), std::string::npos) << msg;  // lists the top-level fields

  msg = error_of([&] { apply_override(c, "epochs=many"); });
  EXPECT_NE(msg.find("epochs"), std::string::npos) << msg;

  msg = error_of([&] { apply_override(c, "epochs.x=1"); });
  EXPECT_NE(msg.find("epochs"), std::string::npos) << msg;

  msg = error_of([&] { apply_override(c, "optimizer=sgd"); });
  EXPECT_NE(msg.find("optimizer.lr"), std::string::npos) << msg;

  msg = error_of([&] { apply_override(c, "no-equals-sign"); });
  EXPECT_NE(msg.find("path.to.field=value"), std::string::npos) << msg;
}

TEST(Config, ValidationNamesFieldAndValidValues) {
  RunConfig c = load_config(kConfigs + "mlp_synthetic.prototxt");
  apply_override(c, "model.name=lenet6");
  std::string msg = error_of([&] { validate_config(c); });
  EXPECT_NE(msg.find("model.name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lenet5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("resnet20"), std::string::npos) << msg;

  auto check = [&](const std::string& set, const std::string& expected) {
    RunConfig bad = load_config(kConfigs + "mlp_synthetic.prototxt");
    apply_override(bad, set);
    const std::string m = error_of([&] { validate_config(bad); });
    EXPECT_NE(m.find(expected), std::string::npos) << set << ": " << m;
  };
  check("optimizer.name=adagrad", "sgd");
  check("data.type=imagenet", "fashion_mnist");
  check("lr_schedule.type=exponential", "cosine");
  check("epochs=0", "epochs");
  check("data.batch_size=0", "data.batch_size");
  check("optimizer.lr=-1", "optimizer.lr");
  check("device=tpu", "cuda");
  check("lr_schedule.milestones=[20,10]", "milestones");
  check("data.train_transform.mean=[0.5]", "data.train_transform.std");
}
