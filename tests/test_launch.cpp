// `mintrain launch`: N local workers with the launch variables, prefixed output, and a failing
// worker stopping the job with a message naming its rank.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";
const std::string kConfigs = std::string(MT_SOURCE_DIR) + "/configs/";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Result run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("mt_test_launch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "stdout", err = dir / "stderr";
  const std::string cmd = "cd " + dir.string() + " && OMP_NUM_THREADS=1 timeout 60 " + kBinary + " " + args +
                          " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int raw = std::system(cmd.c_str());
  Result r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove_all(dir);
  return r;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Launch, RunsWorkersAndPrefixesTheirOutput) {
  const Result r = run("launch --nproc-per-node 2 -- help");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 0] usage: mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1] usage: mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 1] models:")) << r.out;
}

TEST(Launch, MultiNodeRanksAreOffsetByNodeRank) {
  // Node 1 of 2 runs ranks 2 and 3; `version` needs no rendezvous.
  const Result r = run("launch --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -- version");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "[rank 2] mintrain")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 3] mintrain")) << r.out;
}

TEST(Launch, FailingWorkerStopsTheJobAndIsNamed) {
  const Result r = run("launch --nproc-per-node 2 -- train /nonexistent/run.prototxt");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "] mintrain: error: cannot read config file")) << r.err;
  EXPECT_TRUE(has(r.err, "mintrain launch: rank ")) << r.err;
  // A config that cannot be read is a ConfigError: the worker exits 3 (core/error.h).
  EXPECT_TRUE(has(r.err, "exited with exit status 3; stopped the other workers")) << r.err;
}

TEST(Launch, BadArgumentsAreUsageErrors) {
  Result r = run("launch --nproc-per-node 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "put the worker's arguments after --")) << r.err;
  r = run("launch --nproc-per-node x -- help");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "--nproc-per-node needs a number")) << r.err;
  r = run("launch --bogus 1 -- help");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "unknown option \"--bogus\"")) << r.err;
}
