// Image input pipeline throughput: mintrain's image-folder loader against torchvision's
// ImageFolder + DataLoader, on the same generated JPEGs, in the same run. A benchmark, not a
// test: it prints a table and asserts nothing.
//
//   build/release/apps/bench/bench_image_pipeline [--images 512] [--classes 8] [--size 224]
//       [--batch 64] [--epochs 3] [--repeats 3] [--keep DIR]
//
// The work timed on both sides is the ImageNet training input: read the file, decode the JPEG,
// random resized crop to 224x224 (scale [0.08, 1], ratio [3/4, 4/3]), random horizontal flip,
// to CHW float, normalize with the ImageNet mean/std, collate into batches. The consumer takes
// batches and does nothing else, so the figure is what the pipeline can feed. One untimed
// epoch first warms the page cache and the threads. mintrain runs with 1 and 2 decoding
// threads; torchvision (Debian's python3-torchvision via /usr/bin/python3, PIL decoding) with
// num_workers 0 (decoding in the main process), 1 and 2. Each figure is the median of
// `repeats` runs, alternating the two sides so that machine noise hits both alike.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "core/random.h"
#include "data/image_folder_dataset.h"
#include "data/loader.h"
#include "data/transforms.h"

using namespace mt;
namespace fs = std::filesystem;

namespace {

struct Args {
  int images = 512;
  int classes = 8;
  int size = 224;
  int64_t batch = 64;
  int epochs = 3;
  int repeats = 3;
  std::string keep;  // generate into this folder and keep it (default: a temp folder, removed)
  std::string python = "/usr/bin/python3";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--images") a.images = std::stoi(v);
    else if (k == "--classes") a.classes = std::stoi(v);
    else if (k == "--size") a.size = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--epochs") a.epochs = std::stoi(v);
    else if (k == "--repeats") a.repeats = std::stoi(v);
    else if (k == "--keep") a.keep = v;
    else if (k == "--python") a.python = v;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); std::exit(2); }
  }
  return a;
}

// Photo-like JPEGs (smooth shapes, gradients and some noise, quality 90: ~20-30 KB each at
// 224x224, so decoding costs what it costs on real photos, not on flat color).
void generate(const std::string& root, const Args& a) {
  core::Generator gen(42);
  for (int i = 0; i < a.images; ++i) {
    const int cls = i % a.classes;
    cv::Mat img(a.size, a.size, CV_8UC3);
    for (int y = 0; y < a.size; ++y)
      for (int x = 0; x < a.size; ++x) {
        auto* p = img.ptr<uint8_t>(y) + 3 * x;
        p[0] = uint8_t((x + 40 * cls) % 256);
        p[1] = uint8_t((y * 2 + i) % 256);
        p[2] = uint8_t(((x + y) / 2 + 17 * i) % 256);
      }
    for (int k = 0; k < 12; ++k) {
      const cv::Point c(int(gen.below(a.size)), int(gen.below(a.size)));
      const cv::Scalar color(gen.below(256), gen.below(256), gen.below(256));
      cv::circle(img, c, 5 + int(gen.below(a.size / 4)), color, -1, cv::LINE_AA);
    }
    cv::Mat noise(img.size(), CV_8UC3);
    cv::randn(noise, 0, 12);
    img += noise;
    cv::GaussianBlur(img, img, cv::Size(3, 3), 0);
    const fs::path dir = fs::path(root) / "train" / ("class" + std::to_string(cls));
    fs::create_directories(dir);
    cv::imwrite((dir / (std::to_string(i) + ".JPEG")).string(), img, {cv::IMWRITE_JPEG_QUALITY, 90});
  }
}

double run_mintrain(const std::string& root, const Args& a, int threads) {
  data::ImageDatasetOptions o;
  o.transform.size = a.size;
  o.transform.random_resized_crop = true;
  auto ds = std::make_shared<data::ImageFolderDataset>(root + "/train", o);
  data::TransformOptions t;
  t.mean = {0.485f, 0.456f, 0.406f};
  t.std = {0.229f, 0.224f, 0.225f};
  t.random_flip = true;
  data::LoaderOptions lo;
  lo.batch_size = a.batch;
  lo.seed = 1;
  lo.threads = threads;
  lo.prefetch_batches = 2;
  data::DataLoader loader(ds, data::Transform(t, ds->image_shape()), lo);
  auto epoch = [&](int64_t e) {
    int64_t n = 0;
    loader.start_epoch(e);
    for (data::Batch b; loader.next(b);) n += b.targets.numel();
    return n;
  };
  epoch(0);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  for (int e = 1; e <= a.epochs; ++e) n += epoch(e);
  return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// images/s by num_workers from the torchvision script; empty with `why` set when it fails.
std::map<int, double> run_torchvision(const std::string& root, const Args& a, std::string& why) {
  const std::string script = std::string(MT_SOURCE_DIR) + "/apps/bench/torchvision_pipeline.py";
  const std::string cmd = a.python + " " + script + " --root " + root + "/train --workers 0,1,2 --batch " +
                          std::to_string(a.batch) + " --size " + std::to_string(a.size) + " --epochs " +
                          std::to_string(a.epochs) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) { why = "could not start " + a.python; return {}; }
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  std::map<int, double> r;
  for (size_t pos = 0; (pos = out.find("workers=", pos)) != std::string::npos; ++pos) {
    int w = 0;
    double v = 0;
    if (std::sscanf(out.c_str() + pos, "workers=%d img_s=%lf", &w, &v) == 2) r[w] = v;
  }
  if (rc != 0 || r.empty()) {
    why = out.find("No module named") != std::string::npos
              ? "python3-torchvision not installed (apt-get install python3-torchvision)"
              : "torchvision run failed: " + out.substr(0, 300);
    return {};
  }
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::string root = a.keep;
  try {
    if (root.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "mt_bench_images_XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
      root = tmpl;
    }
    if (!fs::exists(fs::path(root) / "train")) generate(root, a);
    std::map<int, std::vector<double>> ours, theirs;
    std::string why;
    for (int r = 0; r < a.repeats; ++r) {
      for (int threads : {1, 2}) ours[threads].push_back(run_mintrain(root, a, threads));
      for (auto [w, v] : run_torchvision(root, a, why)) theirs[w].push_back(v);
    }
    std::printf("\nImage pipeline: %d JPEGs of %dx%d in %d classes, batch %lld, decode + random "
                "resized crop %d + flip + normalize, %d epochs after a warm-up, median of %d runs\n\n",
                a.images, a.size, a.size, a.classes, static_cast<long long>(a.batch), a.size, a.epochs,
                a.repeats);
    auto tv = [&](int w) { return theirs.count(w) ? median(theirs[w]) : 0.0; };
    auto cell = [](double v) { return v > 0 ? std::to_string(static_cast<long long>(v + 0.5)) : std::string("n/a"); };
    std::printf("| decoding threads | mintrain img/s | torchvision img/s | mintrain / torchvision |\n");
    std::printf("|---|---:|---:|---:|\n");
    // torchvision with one decoding process: num_workers 0 (in the training process) or 1 (a
    // worker process; the main process only unpickles). We compare with the faster of the two.
    const double tv1 = std::max(tv(0), tv(1)), tv2 = tv(2);
    std::printf("| 1 | %s | %s (num_workers=0), %s (num_workers=1) | %s |\n", cell(median(ours[1])).c_str(),
                cell(tv(0)).c_str(), cell(tv(1)).c_str(),
                tv1 > 0 ? (std::to_string(median(ours[1]) / tv1).substr(0, 4) + "x").c_str() : "n/a");
    std::printf("| 2 | %s | %s (num_workers=2) | %s |\n", cell(median(ours[2])).c_str(), cell(tv2).c_str(),
                tv2 > 0 ? (std::to_string(median(ours[2]) / tv2).substr(0, 4) + "x").c_str() : "n/a");
    if (theirs.empty()) std::printf("\ntorchvision: %s\n", why.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_image_pipeline: error: %s\n", e.what());
    if (a.keep.empty() && !root.empty()) fs::remove_all(root);
    return 1;
  }
  if (a.keep.empty()) fs::remove_all(root);
  return 0;
}
