// The image-file pipeline: decoding (PNG exactly, JPEG within tolerance) in image-folder and
// list-file datasets, each decode-time transform on known inputs, the loader over image files
// (sharding, determinism, mid-epoch resume), bad input (corrupt files skipped or fatal, empty
// folders, bad list lines, labels out of range), and the ImageNet ResNets. The image tests skip
// themselves in a build without OpenCV; the models are tested in every build.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <chrono>
#include <sstream>

#include "support/test_helpers.h"
#include "core/random.h"
#include "data/image_transform.h"
#include "data/loader.h"
#include "data/registry.h"
#include "layers/models/registry.h"

#ifdef MT_WITH_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "apps/config.h"
#include "apps/trainer.h"
#include "data/image_folder_dataset.h"
#include "data/image_list_dataset.h"
#endif

using namespace mt::data;
using mt::core::Error;
using mt::core::Generator;
namespace fs = std::filesystem;

namespace {

using mt::testing::error_of;
using mt::testing::contains;

std::string make_temp_dir() { return mt::testing::make_temp_dir("mt_image"); }

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

// ------------------------------------------------------------------------ models (any build)

TEST(ResNetImageNet, TorchvisionShapesNamesAndParameterCounts) {
  Generator gen(0);
  mt::layers::ModelOptions o;
  o.in_channels = 3;
  o.image_size = 224;
  o.num_classes = 1000;
  auto count = [](const mt::layers::Module& m) {
    int64_t n = 0;
    for (const auto& p : m.parameters()) n += p.numel();
    return n;
  };
  auto r50 = mt::layers::build_model("resnet50", o, gen);
  EXPECT_EQ(count(*r50), 25557032);  // torchvision.models.resnet50()
  auto r18 = mt::layers::build_model("resnet18", o, gen);
  EXPECT_EQ(count(*r18), 11689512);  // torchvision.models.resnet18()

  std::set<std::string> names;
  for (const auto& [name, p] : r50->named_parameters()) names.insert(name);
  for (const char* n : {"conv1.weight", "bn1.weight", "layer1.0.downsample.0.weight",
                        "layer1.0.downsample.1.bias", "layer2.3.conv3.weight", "layer3.5.bn2.weight",
                        "layer4.2.conv3.weight", "fc.weight", "fc.bias"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(r50->type_name(), "ResNet50");

  // Small input and class count keep the forward pass cheap: 64x64 -> 2x2 before pooling.
  o.num_classes = 5;
  auto small = mt::layers::build_model("resnet50", o, gen);
  const auto y = small->forward(mt::core::Tensor::zeros({2, 3, 64, 64}));
  EXPECT_EQ(y.shape(), (mt::core::Shape{2, 5}));
}

// ------------------------------------------------------------------------ loader pool (any build)

namespace {
// 5 ms per example, sleeping rather than computing, so the test measures the pool's concurrency
// and not the machine's free cores.
class SlowDataset final : public Dataset {
 public:
  int64_t size() const override { return 48; }
  Shape image_shape() const override { return {1, 1, 1}; }
  int64_t num_classes() const override { return 2; }
  std::string describe() const override { return "slow dataset"; }
  int64_t get(int64_t index, float* dst) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    dst[0] = float(index);
    return index % 2;
  }
};
}  // namespace

TEST(ImageLoader, ThreadsPrepareBatchesInParallel) {
  auto ds = std::make_shared<SlowDataset>();
  auto epoch_seconds = [&](int threads) {
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.threads = threads;
    lo.prefetch_batches = 2;
    DataLoader loader(ds, Transform(), lo);
    const auto t0 = std::chrono::steady_clock::now();
    loader.start_epoch(0);
    int64_t n = 0;
    for (Batch b; loader.next(b);) n += b.targets.numel();
    EXPECT_EQ(n, 48);
    const LoaderStats s = loader.stats();
    EXPECT_EQ(s.images, 48);
    EXPECT_EQ(s.threads, threads);
    EXPECT_GT(s.busy_seconds, 0.2);            // 48 x 5 ms of work, whoever did it
    EXPECT_GT(s.decode_images_per_second(), 0.0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double one = epoch_seconds(1), four = epoch_seconds(4);
  EXPECT_GT(one, 0.24);
  EXPECT_LT(four, 0.6 * one) << "4 threads took " << four << " s, 1 thread " << one << " s";
}

#ifndef MT_WITH_OPENCV

TEST(ImageData, WithoutOpenCVTheImageTypesSaySo) {
  DatasetOptions opt;
  opt.type = "image_folder";
  opt.path = "/nonexistent";
  EXPECT_TRUE(contains(error_of([&] { build_dataset(opt, true); }), "OpenCV"));
  GTEST_SKIP() << "this build has no OpenCV: the image-file tests are skipped (install libopencv-dev "
                  "and re-run cmake)";
}

#else

namespace {

// Image `id` of the tests: a known BGR pattern that differs per id, with sharp and smooth parts.
cv::Mat pattern(int h, int w, int id) {
  cv::Mat img(h, w, CV_8UC3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* p = img.ptr<uint8_t>(y) + 3 * x;
      p[0] = uint8_t((x * 255) / std::max(1, w - 1));          // B: horizontal ramp
      p[1] = uint8_t((y * 255) / std::max(1, h - 1));          // G: vertical ramp
      p[2] = uint8_t((id * 37 + 11) % 256);                    // R: constant, identifies the image
    }
  return img;
}

// CHW RGB floats in [0, 1] that `img` (BGR) should decode to.
std::vector<float> expected_chw(const cv::Mat& img) {
  const int h = img.rows, w = img.cols;
  std::vector<float> out(3 * h * w);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const auto* p = img.ptr<uint8_t>(y) + 3 * x;
      for (int c = 0; c < 3; ++c) out[(c * h + y) * w + x] = p[2 - c] / 255.0f;
    }
  return out;
}

void write_image(const fs::path& path, const cv::Mat& img) {
  fs::create_directories(path.parent_path());
  ASSERT_TRUE(cv::imwrite(path.string(), img)) << path;
}

// Decoded as-is: output size = image size, resize = size, so the center box is the whole image.
ImageDatasetOptions exact(int64_t size) {
  ImageDatasetOptions o;
  o.transform.size = size;
  o.transform.resize = size;
  return o;
}

// root/train/<class>/<i>.png for `per_class` images in each of `classes`, 8x8, ids 0, 1, ...
std::string make_folder(const std::vector<std::string>& classes, int per_class, int size = 8) {
  const std::string root = make_temp_dir();
  int id = 0;
  for (const auto& c : classes)
    for (int i = 0; i < per_class; ++i)
      write_image(fs::path(root) / "train" / c / (std::to_string(i) + ".png"), pattern(size, size, id++));
  return root;
}

std::vector<float> get(const Dataset& ds, int64_t index, int64_t* label = nullptr) {
  std::vector<float> v(mt::core::shape_numel(ds.image_shape()));
  const int64_t l = ds.get(index, v.data());
  if (label) *label = l;
  return v;
}

// The image id encoded in the (constant) red channel of a decoded example.
int id_of(const float* chw) {
  const int r = int(std::lround(chw[0] * 255.0f));
  for (int id = 0; id < 256; ++id)
    if ((id * 37 + 11) % 256 == r) return id;
  return -1;
}

}  // namespace

TEST(ImageFolder, DecodesPngExactlyInSortedClassOrder) {
  const std::string root = make_temp_dir();
  // Class folders created out of order; the labels follow the sorted names.
  write_image(fs::path(root) / "train/zebra/b.png", pattern(12, 10, 0));
  write_image(fs::path(root) / "train/zebra/a.PNG", pattern(12, 10, 1));
  write_image(fs::path(root) / "train/ant/nested/x.png", pattern(12, 10, 2));  // found recursively
  write_text(fs::path(root) / "train/ant/readme.txt", "not an image, ignored");
  ImageDatasetOptions o = exact(10);
  o.transform.resize = 10;  // shorter side 10 -> the center 10x10 of a 12x10 image
  ImageFolderDataset ds(root + "/train", o);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.num_classes(), 2);
  EXPECT_EQ(ds.image_shape(), (Shape{3, 10, 10}));
  EXPECT_TRUE(contains(ds.describe(), "3 images, 2 classes"));
  // Samples: by class, then by path: ant/nested/x, zebra/a.PNG, zebra/b.
  int64_t label = -1;
  for (auto [index, id, want_label] : {std::tuple{0, 2, 0}, {1, 1, 1}, {2, 0, 1}}) {
    const std::vector<float> got = get(ds, index, &label);
    EXPECT_EQ(label, want_label);
    const cv::Mat full = pattern(12, 10, id);
    EXPECT_EQ(got, expected_chw(full(cv::Rect(0, 1, 10, 10)))) << "example " << index;
  }
}

TEST(ImageFolder, DecodesJpegWithinTolerance) {
  const std::string root = make_temp_dir();
  const cv::Mat img = pattern(32, 32, 5);
  write_image(fs::path(root) / "train/c/img.JPEG", img);
  ImageFolderDataset ds(root + "/train", exact(32));
  const std::vector<float> got = get(ds, 0), want = expected_chw(img);
  double sum = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    sum += std::abs(got[i] - want[i]);
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  }
  EXPECT_LT(sum / got.size(), 3.0 / 255);  // JPEG is lossy: small average error
  EXPECT_LT(worst, 32.0 / 255);
}

TEST(ImageTransform, RandomResizedCropBoxFollowsTorchvision) {
  ImageTransformOptions o;  // scale [0.08, 1], ratio [3/4, 4/3]
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Generator gen(seed), again(seed);
    const CropBox b = random_resized_crop_box(300, 400, o, gen);
    EXPECT_EQ(b, random_resized_crop_box(300, 400, o, again));  // a function of the stream
    ASSERT_TRUE(b.y >= 0 && b.x >= 0 && b.h > 0 && b.w > 0 && b.y + b.h <= 300 && b.x + b.w <= 400);
    const double area = double(b.h) * b.w / (300.0 * 400.0), ratio = double(b.w) / b.h;
    EXPECT_GT(area, 0.07);  // rounding to whole pixels moves it slightly
    EXPECT_LT(area, 1.01);
    EXPECT_GT(ratio, 0.74);
    EXPECT_LT(ratio, 1.35);
  }
  // Impossible ranges fall back to the whole image cut to the ratio range, centered.
  o.scale_min = o.scale_max = 1.0f;
  o.ratio_min = o.ratio_max = 1.0f;
  Generator gen(1);
  EXPECT_EQ(random_resized_crop_box(10, 100, o, gen), (CropBox{0, 45, 10, 10}));
  EXPECT_EQ(random_resized_crop_box(100, 10, o, gen), (CropBox{45, 0, 10, 10}));
}

TEST(ImageTransform, CenterCropBoxIsResizeThenCenterCrop) {
  ImageTransformOptions o;
  o.size = 224;  // resize 0: 224 * 8 / 7 = 256
  // Shorter side 300 -> 256: the 224 center is 224 * 300 / 256 = 262.5 -> 262 source pixels.
  EXPECT_EQ(center_crop_box(300, 400, o), (CropBox{19, 69, 262, 262}));
  o.resize = 224;  // no margin: the largest centered square
  EXPECT_EQ(center_crop_box(300, 400, o), (CropBox{0, 50, 300, 300}));
}

TEST(ImageTransform, ResizeKeepsKnownContentAndConvertsToRgb) {
  // Four 8x8 quadrants of solid colors, shrunk 2x: INTER_AREA averages 2x2 blocks, so each
  // quadrant stays one exact color.
  cv::Mat img(16, 16, CV_8UC3);
  const cv::Vec3b colors[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};  // BGR
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) img.at<cv::Vec3b>(y, x) = colors[(y / 8) * 2 + x / 8];
  ImageTransformOptions o;
  o.size = 8;
  o.resize = 8;
  ImageTransform t(o);
  std::vector<float> out(3 * 64);
  Generator gen(0);
  t.apply(img, out.data(), gen);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      const cv::Vec3b c = colors[(y / 4) * 2 + x / 4];
      for (int ch = 0; ch < 3; ++ch) ASSERT_EQ(out[(ch * 8 + y) * 8 + x], c[2 - ch] / 255.0f) << y << "," << x;
    }
  // A random resized crop of a solid image is that solid color, whatever the box.
  cv::Mat solid(40, 30, CV_8UC3, cv::Scalar(51, 102, 204));
  o.random_resized_crop = true;
  ImageTransform rrc(o);
  for (uint64_t seed = 0; seed < 5; ++seed) {
    Generator g(seed);
    rrc.apply(solid, out.data(), g);
    for (int i = 0; i < 64; ++i) {
      ASSERT_FLOAT_EQ(out[i], 204 / 255.0f);
      ASSERT_FLOAT_EQ(out[64 + i], 102 / 255.0f);
      ASSERT_FLOAT_EQ(out[128 + i], 51 / 255.0f);
    }
  }
}

TEST(ImageTransform, ColorJitterOnKnownInputs) {
  const int64_t h = 2, w = 2, n = h * w;
  const std::vector<float> in = {0.4f, 0.5f, 0.6f, 0.5f,   // R
                                 0.5f, 0.5f, 0.4f, 0.6f,   // G
                                 0.6f, 0.5f, 0.5f, 0.4f};  // B
  auto gray = [](const std::vector<float>& v, int64_t i) {
    return 0.299f * v[i] + 0.587f * v[4 + i] + 0.114f * v[8 + i];
  };
  ImageTransformOptions o;
  o.brightness = 0.4f;
  {
    std::vector<float> v = in;
    Generator gen(3);
    color_jitter(v.data(), h, w, o, gen);
    const float f = v[0] / in[0];  // one factor for every value
    EXPECT_TRUE(f >= 0.6f && f <= 1.4f) << f;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], in[i] * f, 1e-6);
  }
  o = {};
  o.contrast = 0.5f;
  {
    std::vector<float> v = in;
    Generator gen(4);
    color_jitter(v.data(), h, w, o, gen);
    double before = 0, after = 0;
    for (int64_t i = 0; i < n; ++i) before += gray(in, i), after += gray(v, i);
    EXPECT_NEAR(before, after, 1e-5);  // the mean gray level is the fixed point
    EXPECT_NE(v, in);
  }
  o = {};
  o.saturation = 0.9f;
  {
    std::vector<float> v = in;
    Generator gen(5);
    color_jitter(v.data(), h, w, o, gen);
    EXPECT_FLOAT_EQ(v[1], 0.5f);  // pixel 1 is gray: unchanged
    EXPECT_FLOAT_EQ(v[5], 0.5f);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(gray(v, i), gray(in, i), 1e-6);  // gray kept
  }
  o.saturation = -1.0f;
  EXPECT_TRUE(contains(error_of([&] { ImageTransform{o}; }), "saturation"));
  o = {};
  o.scale_min = 0.0f;
  EXPECT_TRUE(contains(error_of([&] { ImageTransform{o}; }), "crop_scale"));
}

TEST(ImageLoader, FlipAndNormalizationFollowTheDecode) {
  // The loader's Transform (flip, normalization) runs on the decoded floats, from the same
  // per-example stream: every example is either the normalized image or its mirror.
  const std::string root = make_folder({"a", "b"}, 4);
  auto ds = std::make_shared<ImageFolderDataset>(root + "/train", exact(8));
  const std::vector<float> mean = {0.5f, 0.4f, 0.3f}, stdv = {0.2f, 0.25f, 0.3f};
  LoaderOptions lo;
  lo.batch_size = 8;
  lo.shuffle = false;
  DataLoader loader(ds, Transform({mean, stdv, 0, true}, {3, 8, 8}), lo);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  int flipped = 0;
  for (int i = 0; i < 8; ++i) {
    const std::vector<float> want = expected_chw(pattern(8, 8, i));
    const float* x = b.inputs.data<float>() + i * 192;
    bool same = true, mirrored = true;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 8; ++y)
        for (int col = 0; col < 8; ++col) {
          const float v = x[(c * 8 + y) * 8 + col] * stdv[c] + mean[c];
          same &= std::abs(v - want[(c * 8 + y) * 8 + col]) < 1e-5;
          mirrored &= std::abs(v - want[(c * 8 + y) * 8 + 7 - col]) < 1e-5;
        }
    ASSERT_TRUE(same || mirrored) << "example " << i;
    flipped += !same;
    EXPECT_EQ(b.targets.data<int64_t>()[i], i / 4);
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 8);
}

TEST(ImageLoader, ShardsAreDisjointAndCoverAcrossRanks) {
  const std::string root = make_folder({"a", "b", "c"}, 7);  // 21 images
  auto ds = std::make_shared<ImageFolderDataset>(root + "/train", exact(8));
  std::multiset<int> seen;
  for (int rank = 0; rank < 3; ++rank) {
    LoaderOptions lo;
    lo.batch_size = 3;
    lo.seed = 17;
    lo.rank = rank;
    lo.world_size = 3;
    lo.threads = 2;
    DataLoader loader(ds, Transform(), lo);
    EXPECT_EQ(loader.batches_per_epoch(), 3);  // 7 per rank
    loader.start_epoch(2);
    for (Batch b; loader.next(b);)
      for (int64_t i = 0; i < b.inputs.size(0); ++i) {
        const int id = id_of(b.inputs.data<float>() + i * 192);
        seen.insert(id);
        EXPECT_EQ(b.targets.data<int64_t>()[i], id / 7);
      }
  }
  ASSERT_EQ(seen.size(), 21u);
  for (int id = 0; id < 21; ++id) EXPECT_EQ(seen.count(id), 1u) << id;  // disjoint and covering
}

namespace {
// An augmenting loader over 24 PNGs of 20x16: random resized crop to 12, jitter, flip, normalize.
struct AugmentedRun {
  std::vector<float> x;
  std::vector<int64_t> y, batch_index;
};
AugmentedRun augmented_run(const std::shared_ptr<Dataset>& ds, uint64_t seed, int threads, int64_t first = 0) {
  LoaderOptions lo;
  lo.batch_size = 5;
  lo.seed = seed;
  lo.threads = threads;
  lo.prefetch_batches = threads == 1 ? 1 : 3;
  DataLoader loader(ds, Transform({{0.5f}, {0.25f}, 0, true}, {3, 12, 12}), lo);
  loader.start_epoch(1, first);
  AugmentedRun r;
  for (Batch b; loader.next(b);) {
    const auto v = b.inputs.to_vector();
    r.x.insert(r.x.end(), v.begin(), v.end());
    for (int64_t i = 0; i < b.targets.numel(); ++i) r.y.push_back(b.targets.data<int64_t>()[i]);
    r.batch_index.push_back(b.index);
  }
  return r;
}

std::shared_ptr<Dataset> augmented_dataset(const std::string& root) {
  ImageDatasetOptions o;
  o.transform.size = 12;
  o.transform.random_resized_crop = true;
  o.transform.brightness = o.transform.contrast = o.transform.saturation = 0.4f;
  return std::make_shared<ImageFolderDataset>(root + "/train", o);
}
}  // namespace

TEST(ImageLoader, OrderAndContentAreDeterministicForASeed) {
  const std::string root = make_folder({"a", "b", "c"}, 8, 20);
  auto ds = augmented_dataset(root);
  const AugmentedRun base = augmented_run(ds, 7, 1);
  ASSERT_EQ(base.y.size(), 24u);
  const AugmentedRun again = augmented_run(ds, 7, 2);  // other thread count, same everything
  EXPECT_EQ(again.x, base.x);
  EXPECT_EQ(again.y, base.y);
  EXPECT_EQ(augmented_run(ds, 7, 3).x, base.x);
  EXPECT_NE(augmented_run(ds, 8, 2).x, base.x);  // another seed: other order and crops
}

TEST(ImageLoader, ResumeInTheMiddleOfAnEpoch) {
  const std::string root = make_folder({"a", "b", "c"}, 8, 20);
  auto ds = augmented_dataset(root);
  const AugmentedRun full = augmented_run(ds, 3, 2);
  const AugmentedRun rest = augmented_run(ds, 3, 2, /*first=*/2);  // batches 2..4 of 5
  EXPECT_EQ(rest.batch_index, (std::vector<int64_t>{2, 3, 4}));
  const size_t skip = 2 * 5 * 3 * 12 * 12;
  ASSERT_EQ(rest.x.size(), full.x.size() - skip);
  EXPECT_TRUE(std::equal(rest.x.begin(), rest.x.end(), full.x.begin() + skip));
  EXPECT_TRUE(std::equal(rest.y.begin(), rest.y.end(), full.y.begin() + 10));
}

TEST(ImageData, CorruptImageFailsOrIsSkipped) {
  const std::string root = make_folder({"a", "b"}, 3);
  const fs::path bad = fs::path(root) / "train/a/1.png";  // sample 1
  write_text(bad, "this is not a PNG");
  // Fail (the default): the error names the file and the way out.
  ImageFolderDataset strict(root + "/train", exact(8));
  const std::string msg = error_of([&] { get(strict, 1); });
  EXPECT_TRUE(contains(msg, bad.string()));
  EXPECT_TRUE(contains(msg, "on_bad_image"));
  EXPECT_EQ(get(strict, 0), expected_chw(pattern(8, 8, 0)));  // the others still decode
  // And out of the loader, as the error of the batch that holds it.
  LoaderOptions lo;
  lo.batch_size = 2;
  lo.shuffle = false;
  {
    DataLoader loader(std::make_shared<ImageFolderDataset>(root + "/train", exact(8)), Transform(), lo);
    loader.start_epoch(0);
    Batch b;
    EXPECT_TRUE(contains(error_of([&] { loader.next(b); }), bad.string()));
  }
  // Skip: the next readable example takes its place; the batch keeps its size.
  ImageDatasetOptions o = exact(8);
  o.on_bad_image = OnBadImage::Skip;
  auto lenient = std::make_shared<ImageFolderDataset>(root + "/train", o);
  int64_t label = -1;
  EXPECT_EQ(get(*lenient, 1, &label), expected_chw(pattern(8, 8, 2)));
  EXPECT_EQ(label, 0);
  EXPECT_EQ(lenient->bad_images(), 1);
  DataLoader loader(lenient, Transform(), lo);
  loader.start_epoch(0);
  int64_t n = 0;
  for (Batch b; loader.next(b);) n += b.targets.numel();
  EXPECT_EQ(n, 6);
  EXPECT_EQ(lenient->bad_images(), 1);  // counted (and warned about) once
  EXPECT_EQ(parse_on_bad_image("skip"), OnBadImage::Skip);
  EXPECT_TRUE(contains(error_of([] { parse_on_bad_image("ignore"); }), "fail, skip"));
}

TEST(ImageData, EmptyFoldersAreErrorsNamingThem) {
  const std::string root = make_folder({"a"}, 2);
  fs::create_directories(fs::path(root) / "train/b");
  write_text(fs::path(root) / "train/b/notes.txt", "no images here");
  EXPECT_TRUE(contains(error_of([&] { ImageFolderDataset(root + "/train", exact(8)); }),
                       (fs::path(root) / "train/b").string() + " has no image files"));
  const std::string empty = make_temp_dir();
  EXPECT_TRUE(contains(error_of([&] { ImageFolderDataset(empty, exact(8)); }), empty + " has no class sub-folders"));
  EXPECT_TRUE(contains(error_of([&] { ImageFolderDataset(empty + "/missing", exact(8)); }), "does not exist"));
}

TEST(ImageList, ResolvesPathsAndParsesLabels) {
  const std::string root = make_folder({"a"}, 3);
  const fs::path list = fs::path(root) / "lists/train.txt";
  // Relative to data.path (the root): the paths below are under root.
  write_text(list, "# path label\n\ntrain/a/2.png 4\n  train/a/0.png\t1  \r\n" +
                       (fs::path(root) / "train/a/1.png").string() + " 0\n");
  ImageListDataset ds(list.string(), root, 0, exact(8));
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.num_classes(), 5);  // largest label + 1
  int64_t label = -1;
  EXPECT_EQ(get(ds, 0, &label), expected_chw(pattern(8, 8, 2)));
  EXPECT_EQ(label, 4);
  EXPECT_EQ(get(ds, 1, &label), expected_chw(pattern(8, 8, 0)));
  EXPECT_EQ(label, 1);
  EXPECT_EQ(get(ds, 2, &label), expected_chw(pattern(8, 8, 1)));
  // Without a root: relative to the list file's folder.
  write_text(fs::path(root) / "train/list.txt", "a/1.png 0\n");
  ImageListDataset local((fs::path(root) / "train/list.txt").string(), "", 3, exact(8));
  EXPECT_EQ(local.num_classes(), 3);
  EXPECT_EQ(get(local, 0), expected_chw(pattern(8, 8, 1)));
}

TEST(ImageList, BadLinesNameFileAndLine) {
  const std::string dir = make_temp_dir();
  const std::string list = dir + "/list.txt";
  write_text(list, "a.png 0\nno_label_here\n");
  EXPECT_TRUE(contains(error_of([&] { ImageListDataset(list, "", 0, exact(8)); }), list + ":2: expected"));
  write_text(list, "a.png 0\n# fine\nb.png one\n");
  EXPECT_TRUE(contains(error_of([&] { ImageListDataset(list, "", 0, exact(8)); }), list + ":3: label \"one\""));
  write_text(list, "a.png -1\n");
  EXPECT_TRUE(contains(error_of([&] { ImageListDataset(list, "", 0, exact(8)); }), list + ":1: label -1 is negative"));
  write_text(list, "# nothing\n\n");
  EXPECT_TRUE(contains(error_of([&] { ImageListDataset(list, "", 0, exact(8)); }), "lists no images"));
  EXPECT_TRUE(contains(error_of([&] { ImageListDataset(dir + "/nope.txt", "", 0, exact(8)); }), dir + "/nope.txt"));
}

TEST(ImageList, LabelOutOfRange) {
  const std::string dir = make_temp_dir();
  const std::string list = dir + "/list.txt";
  write_text(list, "a.png 0\nb.png 1\nc.png 5\n");
  const std::string msg = error_of([&] { ImageListDataset(list, "", 3, exact(8)); });
  EXPECT_TRUE(contains(msg, list + ":3: label 5 is outside [0, 3)"));
}

TEST(ImageData, RegistryBuildsBothSplits) {
  const std::string root = make_folder({"a", "b", "c"}, 2);
  // val has classes a and c only: the labels still come from train's class list.
  write_image(fs::path(root) / "val/c/0.png", pattern(8, 8, 40));
  write_image(fs::path(root) / "val/a/0.png", pattern(8, 8, 41));
  DatasetOptions opt;
  opt.type = "image_folder";
  opt.path = root;
  opt.train_image.size = opt.eval_image.size = 8;
  opt.eval_image.resize = 8;
  auto train = build_dataset(opt, true), val = build_dataset(opt, false);
  EXPECT_EQ(train->size(), 6);
  EXPECT_EQ(val->size(), 2);
  EXPECT_EQ(val->num_classes(), 3);
  int64_t label = -1;
  get(*val, 1, &label);
  EXPECT_EQ(label, 2);  // c
  EXPECT_EQ(val->image_shape(), (Shape{3, 8, 8}));

  opt.type = "image_list";
  EXPECT_TRUE(contains(error_of([&] { build_dataset(opt, true); }), "data.train_list"));
  write_text(fs::path(root) / "val.txt", "val/a/0.png 1\n");
  opt.eval_list = root + "/val.txt";
  opt.path = "";
  EXPECT_EQ(build_dataset(opt, false)->size(), 1);
  opt.type = "image_folder";
  opt.on_bad_image = "maybe";
  EXPECT_TRUE(contains(error_of([&] { build_dataset(opt, true); }), "data.on_bad_image"));
  opt.on_bad_image = "fail";
  opt.path = "";
  EXPECT_TRUE(contains(error_of([&] { build_dataset(opt, true); }), "data.path"));
}

TEST(ImageData, TinyImageFolderConfigTrainsEndToEnd) {
  // configs/image_folder_tiny.prototxt on a generated folder: 4 classes of noisy solid colors.
  const std::string root = make_temp_dir();
  const cv::Scalar colors[4] = {{230, 40, 40}, {40, 230, 40}, {40, 40, 230}, {200, 200, 40}};
  cv::Mat noise(20, 18, CV_8UC3);
  for (const char* split : {"train", "val"})
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < (std::string(split) == "train" ? 12 : 4); ++i) {
        cv::Mat img(20, 18, CV_8UC3, colors[c]);
        cv::randn(noise, 0, 20);
        img += noise;
        write_image(fs::path(root) / split / ("class" + std::to_string(c)) / (std::to_string(i) + ".png"), img);
      }
  mt::apps::RunConfig c = mt::apps::load_config(std::string(MT_SOURCE_DIR) + "/configs/image_folder_tiny.prototxt");
  mt::apps::apply_override(c, "data.path=" + root);
  mt::apps::apply_override(c, "output_dir=" + root + "/run");
  mt::apps::validate_config(c);
  std::ostringstream log;
  mt::apps::TrainerOptions to;
  to.log = &log;
  mt::apps::Trainer trainer(c, to);
  const mt::apps::TrainResult r = trainer.train();
  EXPECT_EQ(r.iterations, 3 * 6);  // 48 images / batch 8, 3 epochs
  EXPECT_GT(r.best_accuracy, 60.0) << log.str();  // chance is 25%
  EXPECT_TRUE(contains(log.str(), "decode ")) << log.str();
}

#endif  // MT_WITH_OPENCV
