// `mintrain plot`: the PNGs exist with the expected size, every curve is drawn (its colour
// found in the image, decoded with OpenCV), and bad inputs give errors that name them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifdef MT_WITH_OPENCV
#include <opencv2/imgcodecs.hpp>
#endif

namespace fs = std::filesystem;

namespace {

const std::string kBinary = std::string(MT_BINARY_DIR) + "/apps/mintrain";

// The colours plot_command.cpp gives the curves: run 0 train, run 0 eval (a darker blue), run 1
// train, run 1 eval (a darker orange), and one no curve of two runs uses (the control: counting
// must not find what is not drawn).
constexpr const char* kRun0Train = "#1f77b4";
constexpr const char* kRun0Eval = "#114163";
constexpr const char* kRun1Train = "#ff7f0e";
constexpr const char* kRun1Eval = "#8c4608";
constexpr const char* kUnused = "#9467bd";

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Plot : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mt_test_plot_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args, const std::string& env = "") {
    const std::string cmd = "cd " + dir_.string() + " && " + env + " " + kBinary + " plot " + args + " >stdout 2>stderr";
    const int raw = std::system(cmd.c_str());
    Result r;
    if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
    r.out = slurp(dir_ / "stdout");
    r.err = slurp(dir_ / "stderr");
    return r;
  }

  // A run folder with `iters` train records (every 4 iterations) and an eval record at the end
  // of each of `epochs` epochs, as the trainer writes them.
  fs::path write_run(const std::string& name, int iters, int epochs, double lr, const std::string& unit = "img") {
    const fs::path run = dir_ / name;
    fs::create_directories(run);
    std::ofstream out(run / "metrics.jsonl");
    const int per_epoch = iters / epochs;
    for (int it = 4; it <= iters; it += 4) {
      const double loss = 2.3 / (1.0 + lr * it);
      out << "{\"type\":\"train\",\"epoch\":" << 1 + (it - 1) / per_epoch << ",\"iter\":" << it
          << ",\"loss\":" << loss << ",\"acc\":" << 100.0 - 40.0 * loss << ",\"lr\":" << lr * (1.0 - 0.5 * it / iters)
          << ",\"" << unit << "_s\":" << 1000 + (it % 16) * 50 << ",\"time\":" << 0.05 * it << "}\n";
      if (it % per_epoch == 0) {
        out << "{\"type\":\"eval\",\"epoch\":" << it / per_epoch << ",\"iter\":" << it << ",\"loss\":"
            << loss * 1.1 << ",\"acc\":" << 95.0 - 40.0 * loss << ",\"lr\":" << lr << ",\"" << unit
            << "_s\":5000,\"time\":" << 0.05 * it + 0.01 << "}\n";
      }
    }
    return run;
  }

  static bool gnuplot_installed() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

  fs::path dir_;
};

// Width and height from a PNG's IHDR chunk (bytes 16..23, big-endian).
std::pair<int, int> png_size(const fs::path& file) {
  const std::string bytes = slurp(file);
  if (bytes.size() < 24 || bytes.compare(1, 3, "PNG") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    return (static_cast<unsigned char>(bytes[at]) << 24) | (static_cast<unsigned char>(bytes[at + 1]) << 16) |
           (static_cast<unsigned char>(bytes[at + 2]) << 8) | static_cast<unsigned char>(bytes[at + 3]);
  };
  return {static_cast<int>(be32(16)), static_cast<int>(be32(20))};
}

#ifdef MT_WITH_OPENCV
// Pixels within a small distance of the colour "#rrggbb" (the curves are anti-aliased).
int pixels_of(const fs::path& file, const std::string& colour) {
  const cv::Mat image = cv::imread(file.string(), cv::IMREAD_COLOR);
  if (image.empty()) return -1;
  const int r = std::stoi(colour.substr(1, 2), nullptr, 16), g = std::stoi(colour.substr(3, 2), nullptr, 16),
            b = std::stoi(colour.substr(5, 2), nullptr, 16);
  int count = 0;
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) {
      const cv::Vec3b p = image.at<cv::Vec3b>(y, x);  // BGR
      if (std::abs(p[0] - b) + std::abs(p[1] - g) + std::abs(p[2] - r) <= 30) ++count;
    }
  }
  return count;
}
#endif

// A legend's sample line is a few dozen pixels; a curve across the chart is many hundreds.
constexpr int kDrawn = 300;

}  // namespace

TEST_F(Plot, WritesEveryChartWithEveryRunsCurves) {
  if (!gnuplot_installed()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  write_run("fast_lr", 200, 5, 0.05);
  write_run("slow-lr", 160, 4, 0.01);
  const Result r = run("fast_lr slow-lr/ --out=plots");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string chart : {"loss", "accuracy", "lr", "throughput"}) {
    for (const std::string axis : {"iter", "time"}) {
      const fs::path png = dir_ / "plots" / (chart + "-" + axis + ".png");
      ASSERT_TRUE(fs::exists(png)) << png << "\n" << r.out << r.err;
      EXPECT_TRUE(has(r.out, png.string())) << r.out;
      EXPECT_EQ(png_size(png), std::make_pair(1000, 600)) << png;
#ifdef MT_WITH_OPENCV
      const bool with_eval = chart == "loss" || chart == "accuracy";
      EXPECT_GT(pixels_of(png, kRun0Train), kDrawn) << png << ": run 0's train curve is missing";
      EXPECT_GT(pixels_of(png, kRun1Train), kDrawn) << png << ": run 1's train curve is missing";
      if (with_eval) {
        EXPECT_GT(pixels_of(png, kRun0Eval), kDrawn) << png << ": run 0's eval curve is missing";
        EXPECT_GT(pixels_of(png, kRun1Eval), kDrawn) << png << ": run 1's eval curve is missing";
      } else {
        EXPECT_LT(pixels_of(png, kRun0Eval), kDrawn) << png << ": an eval curve where there is none";
      }
      EXPECT_LT(pixels_of(png, kUnused), kDrawn) << png << ": a colour no curve has";
#endif
    }
  }
  // The legend names each run by its folder (and the kind of record), as gnuplot was told.
  const std::string script = slurp(dir_ / "plots" / "plots.gp");
  for (const std::string title : {"'fast_lr train'", "'fast_lr eval'", "'slow-lr train'", "'slow-lr eval'",
                                  "'fast_lr'", "'slow-lr'", "'images/s'"}) {
    EXPECT_TRUE(has(script, title)) << title << " not in\n" << script;
  }
}

TEST_F(Plot, ARunWithoutEvalRecordsHasNoEvalCurve) {
  if (!gnuplot_installed()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  write_run("with_eval", 200, 5, 0.05);
  const fs::path bare = dir_ / "train_only";
  fs::create_directories(bare);
  {
    std::ofstream out(bare / "metrics.jsonl");
    for (int it = 4; it <= 200; it += 4) {
      out << "{\"type\":\"train\",\"epoch\":1,\"iter\":" << it << ",\"loss\":" << 3.0 - it / 100.0
          << ",\"acc\":null,\"lr\":0.1,\"tok_s\":900,\"time\":" << 0.1 * it << "}\n";
    }
  }
  const Result r = run("with_eval train_only --out plots");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string script = slurp(dir_ / "plots" / "plots.gp");
  EXPECT_FALSE(has(script, "'train_only eval'")) << script;
  EXPECT_FALSE(has(script, "'train_only train' ")) << "a null accuracy is no point";
  EXPECT_TRUE(has(script, "samples/s (images or tokens)")) << script;
#ifdef MT_WITH_OPENCV
  const fs::path loss = dir_ / "plots" / "loss-iter.png";
  EXPECT_GT(pixels_of(loss, kRun1Train), kDrawn);
  EXPECT_LT(pixels_of(loss, kRun1Eval), kDrawn);
  EXPECT_LT(pixels_of(dir_ / "plots" / "accuracy-iter.png", kRun1Train), kDrawn);
#endif
}

TEST_F(Plot, OneRunPlotsIntoItsFolder) {
  if (!gnuplot_installed()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  write_run("only", 40, 2, 0.05);
  const Result r = run("only");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "only" / "plots" / "loss-time.png")) << r.out;
}

// The last line of a run killed while writing it (kill -9), or of a run still writing it.
TEST_F(Plot, ACutLastLineIsSkippedWithAWarning) {
  if (!gnuplot_installed()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  const fs::path cut = write_run("cut", 40, 2, 0.05);
  std::ofstream(cut / "metrics.jsonl", std::ios::app) << "{\"type\":\"train\",\"iter\":44,\"loss\":1.0,\"ti";
  const Result r = run("cut");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.err, "plot: warning: cut/metrics.jsonl line 13 is cut short")) << r.err;
  EXPECT_TRUE(fs::exists(cut / "plots" / "loss-iter.png")) << r.out;
}

// The hue of "#rrggbb", in degrees.
double hue_of(const std::string& colour) {
  auto channel = [&](int at) { return std::stoi(colour.substr(at, 2), nullptr, 16) / 255.0; };
  const double r = channel(1), g = channel(3), b = channel(5);
  const double hi = std::max({r, g, b}), lo = std::min({r, g, b}), d = hi - lo;
  if (d == 0) return 0;
  const double h = hi == r ? std::fmod((g - b) / d, 6.0) : hi == g ? (b - r) / d + 2 : (r - g) / d + 4;
  return std::fmod(60 * h + 360, 360);
}

// A run's train and eval curves are one colour family (the eval one darker, dashed), and runs
// differ: the colour of a curve says whose it is.
TEST_F(Plot, ARunsTrainAndEvalCurvesShareItsColour) {
  if (!gnuplot_installed()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  write_run("a", 40, 2, 0.05);
  write_run("b", 40, 2, 0.01);
  ASSERT_EQ(run("a b --out plots").status, 0);
  const std::string script = slurp(dir_ / "plots" / "plots.gp");
  auto colour_of = [&](const std::string& title) {
    const auto at = script.find(title);
    return at == std::string::npos ? std::string("#000000") : script.substr(script.rfind("lc rgb '", at) + 8, 7);
  };
  for (const std::string run : {"a", "b"}) {
    const std::string train = colour_of("'" + run + " train'"), eval = colour_of("'" + run + " eval'");
    EXPECT_NE(train, eval) << run;
    EXPECT_NEAR(hue_of(train), hue_of(eval), 5.0) << run << ": train " << train << ", eval " << eval;
  }
  EXPECT_GT(std::abs(hue_of(colour_of("'a train'")) - hue_of(colour_of("'b train'"))), 30.0) << script;
}

TEST_F(Plot, BadInputsAreNamed) {
  Result r = run("nowhere");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "run folder \"nowhere\" does not exist")) << r.err;

  fs::create_directories(dir_ / "empty_run");
  r = run("empty_run");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "no metrics.jsonl in \"empty_run\"")) << r.err;

  // A record cut short before the last line is damage, not a run still writing.
  const fs::path bad = write_run("bad", 40, 2, 0.05);
  {
    std::ofstream out(bad / "metrics.jsonl", std::ios::app);
    out << "{\"type\":\"train\",\"iter\":44,\"loss\":1.0,\"ti\n";
    out << "{\"type\":\"train\",\"iter\":48,\"loss\":1.0,\"time\":3}\n";
  }
  const int lines = 12;  // 10 train records and 2 eval records before it
  r = run("bad");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "bad/metrics.jsonl line " + std::to_string(lines + 1) + ": not a JSON record")) << r.err;

  r = run("", "");
  EXPECT_EQ(r.status, 2);  // a malformed command line
  EXPECT_TRUE(has(r.err, "no run folder given")) << r.err;

  write_run("good", 40, 2, 0.05);
  r = run("good", "PATH=/nonexistent");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "gnuplot not found on PATH; install it (Debian/Ubuntu: apt-get install gnuplot-nox"))
      << r.err;
}
