// The checks the README's test command runs on the source tree, each run here on a planted tree:
// apps/scripts/line_counts.sh fails on a folder one line over its code-line budget (and on the
// total), naming the folder and both numbers; apps/scripts/include_check.sh fails on an include
// that runs upward, naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_helpers.h"

namespace {

using mt::testing::contains;

// Runs apps/scripts/`script` on the tree at `root`.
mt::testing::CommandResult check(const std::string& script, const std::string& root) {
  return mt::testing::run_command("bash " + std::string(MT_SOURCE_DIR) + "/apps/scripts/" + script + " " + root);
}

// Writes root/path, making its folders.
void plant(const std::string& root, const std::string& path, const std::string& text) {
  const std::filesystem::path file = std::filesystem::path(root) / path;
  std::filesystem::create_directories(file.parent_path());
  mt::testing::write_file(file.string(), text);
}

// `n` lines of code, framed by lines that do not count: blank ones and // comments.
std::string code_lines(int n) {
  std::string text = "// a comment\n\n";
  for (int i = 0; i < n; ++i) text += "int v" + std::to_string(i) + " = " + std::to_string(i) + ";\n";
  return text + "  // an indented comment\n\n";
}

const char* kBudgets =
    "# folder budget\n"
    "core          3\n"
    "dist          2\n"
    "dist/comm     2\n"
    "dist/ps       5\n"
    "tests         -\n"
    "total        10\n";

TEST(LineBudgets, AFolderAtItsBudgetPassesAndOneLineOverFailsNamingItAndBothNumbers) {
  const std::string root = mt::testing::make_temp_dir("budget");
  plant(root, "apps/scripts/line_budgets.txt", kBudgets);
  plant(root, "core/tensor.h", code_lines(3));
  plant(root, "tests/test_core.cpp", code_lines(50));  // no budget
  auto r = check("line_counts.sh", root);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "dist/ps/")) << "a row whose folder is missing is shown";
  EXPECT_TRUE(contains(r.out, "absent"));

  plant(root, "core/tensor.cpp", code_lines(1));
  r = check("line_counts.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "core/ has 4 code lines, over its budget of 3"));
}

TEST(LineBudgets, ASubfolderWithARowCountsTowardItsOwnBudgetOnly) {
  const std::string root = mt::testing::make_temp_dir("budget");
  plant(root, "apps/scripts/line_budgets.txt", kBudgets);
  plant(root, "dist/registry.h", code_lines(2));
  plant(root, "dist/comm/store.h", code_lines(2));
  auto r = check("line_counts.sh", root);
  ASSERT_EQ(r.rc, 0) << r.out;

  plant(root, "dist/comm/socket.h", code_lines(1));
  r = check("line_counts.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "dist/comm/ has 3 code lines, over its budget of 2"));
  EXPECT_FALSE(contains(r.out, "dist/ has")) << "dist/'s own files are within its budget";
}

TEST(LineBudgets, NonTestCodeOverTheTotalFails) {
  const std::string root = mt::testing::make_temp_dir("budget");
  plant(root, "apps/scripts/line_budgets.txt", kBudgets);
  plant(root, "core/tensor.h", code_lines(3));
  plant(root, "dist/registry.h", code_lines(2));
  plant(root, "dist/comm/store.h", code_lines(2));
  plant(root, "dist/ps/server.h", code_lines(3));
  auto r = check("line_counts.sh", root);
  ASSERT_EQ(r.rc, 0) << r.out;

  plant(root, "dist/ps/client.h", code_lines(1));
  r = check("line_counts.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "non-test code has 11 code lines, over its total budget of 10"));
}

// A tree whose includes all run downward.
std::string downward_tree() {
  const std::string root = mt::testing::make_temp_dir("includes");
  plant(root, "core/tensor.h", "#pragma once\n#include <vector>\n");
  plant(root, "core/tensor.cpp", "#include \"core/tensor.h\"\n");
  plant(root, "layers/linear.h", "#include \"core/tensor.h\"\n");
  plant(root, "optim/sgd.h", "#include \"core/tensor.h\"\n");
  plant(root, "dist/synchronizer.h", "#include \"layers/linear.h\"\n#include \"optim/sgd.h\"\n");
  plant(root, "dist/predict/cost_model.h", "#include \"dist/synchronizer.h\"\n");
  plant(root, "apps/trainer.cpp", "#include \"dist/predict/cost_model.h\"\n#include \"gloo/context.h\"\n");
  plant(root, "tests/test_linear.cpp", "#include \"apps/trainer.h\"\n");
  return root;
}

TEST(IncludeCheck, DownwardIncludesPass) {
  const auto r = check("include_check.sh", downward_tree());
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(IncludeCheck, APlantedUpwardIncludeFailsNamingTheFileAndLine) {
  const std::string root = downward_tree();
  plant(root, "core/tensor.h", "#pragma once\n#include <vector>\n#include \"layers/linear.h\"\n");
  const auto r = check("include_check.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "core/tensor.h:3 includes layers/linear.h"));
}

TEST(IncludeCheck, SiblingsOnCoreDoNotIncludeEachOther) {
  const std::string root = downward_tree();
  plant(root, "optim/sgd.h", "#include \"core/tensor.h\"\n#include \"layers/linear.h\"\n");
  const auto r = check("include_check.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "optim/sgd.h:2 includes layers/linear.h"));
}

TEST(IncludeCheck, DistIncludesNeitherAppsNorTheCostModel) {
  const std::string root = downward_tree();
  plant(root, "dist/ssgd/hook.cpp", "#include \"dist/synchronizer.h\"\n#include \"apps/trainer.h\"\n");
  plant(root, "dist/ps/server.cpp", "#include \"dist/predict/cost_model.h\"\n");
  plant(root, "dist/predict/model_command.cpp", "#include \"dist/synchronizer.h\"\n#include \"apps/config.h\"\n");
  const auto r = check("include_check.sh", root);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "dist/ssgd/hook.cpp:2 includes apps/trainer.h"));
  EXPECT_TRUE(contains(r.out, "dist/ps/server.cpp:1 includes dist/predict/cost_model.h"));
  EXPECT_TRUE(contains(r.out, "dist/predict/model_command.cpp:2 includes apps/config.h"));
}

}  // namespace
