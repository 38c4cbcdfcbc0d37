// The CPU data pipeline: IDX and CIFAR-10 readers (decoding and every validation error),
// synthetic data, the registry, the distributed sampler, transforms, and the prefetching loader
// (coverage, resume, determinism, error propagation, prompt shutdown) and the prefetch queue
// under it (order, bounded depth, errors, stopping, timeouts, the wait statistic).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <numeric>
#include <set>
#include <thread>

#include "support/test_helpers.h"
#include "core/random.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/loader.h"
#include "data/prefetch_queue.h"
#include "data/registry.h"
#include "data/sampler.h"
#include "data/synthetic_dataset.h"
#include "data/transforms.h"

using namespace mt::data;
using mt::core::DType;
using mt::core::Error;
using mt::core::Generator;

namespace {

namespace fs = std::filesystem;

const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

std::string make_temp_dir() { return mt::testing::make_temp_dir("mt_data"); }

using mt::testing::error_of;
using mt::testing::contains;

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), int(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// An IDX file's bytes: big-endian magic and dims, then the values.
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& values) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

// Three 2x3 images whose pixels are distinct and cover 0 and 255; labels 0, 9, 4.
const std::vector<uint8_t> kPixels = {0,  1,  2,  3,  4,  5,    //
                                      10, 20, 30, 40, 50, 60,   //
                                      255, 128, 7, 8, 9, 100};
const std::vector<uint8_t> kLabels = {0, 9, 4};

void write_idx_split(const std::string& dir, const std::string& prefix, bool gzip,
                     const std::vector<uint8_t>& pixels = kPixels,
                     const std::vector<uint8_t>& labels = kLabels) {
  const std::string ext = gzip ? ".gz" : "";
  write_bytes(dir + "/" + prefix + "-images-idx3-ubyte" + ext,
              idx_bytes(0x803, {uint32_t(pixels.size() / 6), 2, 3}, pixels), gzip);
  write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte" + ext,
              idx_bytes(0x801, {uint32_t(labels.size())}, labels), gzip);
}

std::vector<float> example(const Dataset& ds, int64_t index, int64_t* label = nullptr) {
  std::vector<float> v(mt::core::shape_numel(ds.image_shape()));
  const int64_t l = ds.get(index, v.data());
  if (label) *label = l;
  return v;
}

// Runs f on another thread and aborts the whole binary if it does not finish in time: a hang
// in the loader must fail loudly instead of stalling the test run.
template <typename F>
void within_seconds(double seconds, F&& f, const char* what) {
  auto done = std::async(std::launch::async, std::forward<F>(f));
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    std::cerr << "FATAL: " << what << " did not finish within " << seconds << " s (hang)\n";
    std::abort();
  }
  done.get();
}

}  // namespace

// ---------------------------------------------------------------- IDX

TEST(IdxDataset, DecodesPlainAndGzipFiles) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", /*gzip=*/false);
  write_idx_split(dir, "t10k", /*gzip=*/true);
  for (bool train : {true, false}) {
    IdxDataset ds(dir, train, "mnist", 10);
    EXPECT_EQ(ds.size(), 3);
    EXPECT_EQ(ds.image_shape(), (Shape{1, 2, 3}));
    EXPECT_EQ(ds.num_classes(), 10);
    EXPECT_TRUE(contains(ds.describe(), train ? "mnist train (3 images" : "mnist test (3 images"));
    for (int64_t i = 0; i < 3; ++i) {
      int64_t label = -1;
      std::vector<float> x = example(ds, i, &label);
      EXPECT_EQ(label, kLabels[i]);
      for (int j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(x[j], kPixels[i * 6 + j] / 255.0f) << i << "," << j;
    }
  }
  IdxDataset ds(dir, true);
  std::vector<float> x = example(ds, 2);
  EXPECT_EQ(x[0], 1.0f);  // 255 -> exactly 1
  EXPECT_EQ(example(ds, 0)[0], 0.0f);
  EXPECT_THROW(ds.get(3, x.data()), Error);
  EXPECT_THROW(ds.get(-1, x.data()), Error);
}

TEST(IdxDataset, ExplicitFiles) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", true);
  IdxDataset ds(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz", "custom", 10);
  EXPECT_EQ(ds.size(), 3);
  EXPECT_TRUE(contains(ds.describe(), "custom"));
}

TEST(IdxDataset, MissingFileSaysHowToGetIt) {
  const std::string dir = make_temp_dir();
  std::string msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, dir + "/train-images-idx3-ubyte"));
  EXPECT_TRUE(contains(msg, "install Debian's dataset-fashion-mnist (apt-get install "
                            "dataset-fashion-mnist) or set data.path to a folder with the IDX files"));
  // Images present, labels missing: the message names the labels file.
  write_bytes(dir + "/t10k-images-idx3-ubyte", idx_bytes(0x803, {3, 2, 3}, kPixels), false);
  msg = error_of([&] { IdxDataset ds(dir, false); });
  EXPECT_TRUE(contains(msg, "t10k-labels-idx1-ubyte"));
  msg = error_of([&] { IdxDataset ds(dir + "/no_such_folder", true); });
  EXPECT_TRUE(contains(msg, "no_such_folder/train-images-idx3-ubyte"));
  EXPECT_TRUE(contains(msg, "does not exist"));
}

TEST(IdxDataset, TruncatedFileNamesFileAndSizes) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", false);
  // Header says 3 images of 2x3 (16 + 18 = 34 bytes); cut the last 5 bytes.
  const std::string images = dir + "/train-images-idx3-ubyte";
  std::vector<uint8_t> bytes = read_bytes(images);
  ASSERT_EQ(bytes.size(), 34u);
  bytes.resize(29);
  write_bytes(images, bytes, false);
  std::string msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, images));
  EXPECT_TRUE(contains(msg, "truncated"));
  EXPECT_TRUE(contains(msg, "34"));  // expected
  EXPECT_TRUE(contains(msg, "29"));  // actual

  // Truncated inside the header.
  bytes.resize(10);
  write_bytes(images, bytes, false);
  msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, images));
  EXPECT_TRUE(contains(msg, "truncated"));

  // A cut gzip stream (the download broke off).
  const std::string gz_dir = make_temp_dir();
  std::vector<uint8_t> big(16 * 28 * 28);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7919 % 251);
  const std::string gz_images = gz_dir + "/train-images-idx3-ubyte.gz";
  write_bytes(gz_images, idx_bytes(0x803, {16, 28, 28}, big), true);
  write_bytes(gz_dir + "/train-labels-idx1-ubyte.gz", idx_bytes(0x801, {16}, std::vector<uint8_t>(16, 1)), true);
  EXPECT_NO_THROW(IdxDataset(gz_dir, true));
  std::vector<uint8_t> gz = read_bytes(gz_images);
  gz.resize(gz.size() / 2);
  write_bytes(gz_images, gz, false);
  msg = error_of([&] { IdxDataset ds(gz_dir, true); });
  EXPECT_TRUE(contains(msg, gz_images));
}

TEST(IdxDataset, TrailingBytesAreAnError) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", false);
  std::vector<uint8_t> bytes = idx_bytes(0x803, {3, 2, 3}, kPixels);
  bytes.push_back(0);
  write_bytes(dir + "/train-images-idx3-ubyte", bytes, false);
  const std::string msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, "train-images-idx3-ubyte"));
  EXPECT_TRUE(contains(msg, "35"));
}

TEST(IdxDataset, WrongMagic) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", true);
  // The labels file where the images file should be.
  fs::copy_file(dir + "/train-labels-idx1-ubyte.gz", dir + "/train-images-idx3-ubyte.gz",
                fs::copy_options::overwrite_existing);
  const std::string msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, dir + "/train-images-idx3-ubyte.gz"));
  EXPECT_TRUE(contains(msg, "magic"));
  EXPECT_TRUE(contains(msg, "801"));
  EXPECT_TRUE(contains(msg, "803"));
}

TEST(IdxDataset, ImageLabelCountMismatch) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", false, kPixels, {1, 2});
  const std::string msg = error_of([&] { IdxDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, "train-images-idx3-ubyte"));
  EXPECT_TRUE(contains(msg, "train-labels-idx1-ubyte"));
  EXPECT_TRUE(contains(msg, "3 images"));
  EXPECT_TRUE(contains(msg, "2 labels"));
}

TEST(IdxDataset, LabelOutOfRange) {
  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", false, kPixels, {1, 10, 2});
  const std::string msg = error_of([&] { IdxDataset ds(dir, true, "mnist", 10); });
  EXPECT_TRUE(contains(msg, "train-labels-idx1-ubyte"));
  EXPECT_TRUE(contains(msg, "label 10"));
  EXPECT_NO_THROW(IdxDataset(dir, true, "mnist", 11));
}

TEST(IdxDataset, RealFashionMnist) {
  if (!fs::is_directory(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " is absent: apt-get install dataset-fashion-mnist to run this test";
  auto train = build_dataset(DatasetOptions{}, true);  // the default type and path
  auto test = build_dataset(DatasetOptions{}, false);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->image_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(test->image_shape(), (Shape{1, 28, 28}));
  EXPECT_TRUE(contains(train->describe(), "fashion-mnist train (60000 images"));
  // Fashion-MNIST is balanced: 6000 per class in train, 1000 in test.
  for (const auto& [ds, per_class] : {std::pair{train, 6000}, std::pair{test, 1000}}) {
    std::vector<int64_t> counts(10, 0);
    std::vector<float> x(28 * 28);
    double sum = 0;
    for (int64_t i = 0; i < ds->size(); ++i) {
      const int64_t label = ds->get(i, x.data());
      ASSERT_TRUE(label >= 0 && label < 10);
      ++counts[label];
      for (float v : x) {
        ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
        sum += v;
      }
    }
    for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], per_class) << "class " << c;
    // The well-known mean pixel of Fashion-MNIST is about 0.286.
    EXPECT_NEAR(sum / (ds->size() * 784.0), 0.286, 0.005);
  }
}

// ---------------------------------------------------------------- CIFAR-10

namespace {
// A record whose pixels encode (image id, channel, position) and whose label is id % 10.
std::vector<uint8_t> cifar_record(int id) {
  std::vector<uint8_t> r(CifarDataset::kRecordBytes);
  r[0] = uint8_t(id % 10);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) r[1 + c * 1024 + p] = uint8_t(id * 31 + c * 50 + p % 7);
  return r;
}

void write_cifar_file(const std::string& path, const std::vector<int>& ids) {
  std::vector<uint8_t> bytes;
  for (int id : ids) {
    auto r = cifar_record(id);
    bytes.insert(bytes.end(), r.begin(), r.end());
  }
  write_bytes(path, bytes, false);
}

// data_batch_k holds ids 2(k-1) and 2(k-1)+1; test_batch holds id 100.
void write_cifar_folder(const std::string& dir) {
  for (int k = 1; k <= 5; ++k)
    write_cifar_file(dir + "/data_batch_" + std::to_string(k) + ".bin", {2 * (k - 1), 2 * (k - 1) + 1});
  write_cifar_file(dir + "/test_batch.bin", {100});
}
}  // namespace

TEST(CifarDataset, Decodes) {
  const std::string dir = make_temp_dir();
  write_cifar_folder(dir);
  CifarDataset train(dir, true), test(dir, false);
  EXPECT_EQ(train.size(), 10);
  EXPECT_EQ(test.size(), 1);
  EXPECT_EQ(train.image_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(train.num_classes(), 10);
  for (int64_t i = 0; i < 10; ++i) {
    int64_t label = -1;
    std::vector<float> x = example(train, i, &label);
    const std::vector<uint8_t> r = cifar_record(int(i));
    EXPECT_EQ(label, i % 10);
    for (int j = 0; j < 3072; ++j) ASSERT_FLOAT_EQ(x[j], r[1 + j] / 255.0f) << i << "," << j;
  }
  int64_t label = -1;
  example(test, 0, &label);
  EXPECT_EQ(label, 0);  // id 100
  EXPECT_TRUE(contains(train.describe(), "cifar10 train (10 images)"));
}

TEST(CifarDataset, AcceptsTheExtractedParentFolder) {
  const std::string dir = make_temp_dir();
  fs::create_directory(dir + "/cifar-10-batches-bin");
  write_cifar_folder(dir + "/cifar-10-batches-bin");
  CifarDataset ds(dir, false);
  EXPECT_EQ(ds.size(), 1);
}

TEST(CifarDataset, TruncatedFile) {
  const std::string dir = make_temp_dir();
  write_cifar_folder(dir);
  const std::string path = dir + "/data_batch_3.bin";
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes.resize(bytes.size() - 100);
  write_bytes(path, bytes, false);
  const std::string msg = error_of([&] { CifarDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "3073"));
  EXPECT_TRUE(contains(msg, std::to_string(bytes.size())));
  EXPECT_NO_THROW(CifarDataset(dir, false));  // the test split is intact
}

TEST(CifarDataset, MissingFileSaysWhereToDownload) {
  const std::string dir = make_temp_dir();
  write_cifar_folder(dir);
  fs::remove(dir + "/data_batch_4.bin");
  const std::string msg = error_of([&] { CifarDataset ds(dir, true); });
  EXPECT_TRUE(contains(msg, dir + "/data_batch_4.bin"));
  EXPECT_TRUE(contains(msg, "cifar-10-binary.tar.gz"));
  EXPECT_TRUE(contains(msg, "data.path"));
}

TEST(CifarDataset, BadLabel) {
  const std::string dir = make_temp_dir();
  write_cifar_folder(dir);
  std::vector<uint8_t> r = cifar_record(3);
  r[0] = 57;  // a CIFAR-100 fine label
  write_bytes(dir + "/test_batch.bin", r, false);
  const std::string msg = error_of([&] { CifarDataset ds(dir, false); });
  EXPECT_TRUE(contains(msg, "test_batch.bin"));
  EXPECT_TRUE(contains(msg, "label 57"));
}

// ---------------------------------------------------------------- synthetic and registry

TEST(SyntheticDataset, DeterministicFromSeed) {
  SyntheticDataset a(100, {3, 8, 8}, 5, 42), b(100, {3, 8, 8}, 5, 42), c(100, {3, 8, 8}, 5, 43);
  SyntheticDataset test_split(100, {3, 8, 8}, 5, 42, 1);
  EXPECT_EQ(a.size(), 100);
  EXPECT_EQ(a.image_shape(), (Shape{3, 8, 8}));
  EXPECT_EQ(a.num_classes(), 5);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 100; ++i) {
    int64_t la, lb;
    std::vector<float> xa = example(a, i, &la), xb = example(b, i, &lb);
    EXPECT_EQ(la, lb);
    EXPECT_EQ(xa, xb);
    EXPECT_NE(xa, example(c, i));
    EXPECT_NE(xa, example(test_split, i));
    for (float v : xa) ASSERT_TRUE(v >= 0.0f && v < 1.0f);
    labels.insert(la);
  }
  EXPECT_EQ(labels.size(), 5u);  // every class occurs
  EXPECT_THROW(SyntheticDataset(10, {8, 8}, 5, 0), Error);
  EXPECT_THROW(SyntheticDataset(10, {1, 8, 8}, 0, 0), Error);
}

TEST(SyntheticDataset, LabelIsLearnable) {
  // Nearest class mean, fit on the train split, must classify the test split well.
  const int64_t classes = 10, n = 28 * 28;
  SyntheticDataset train(1000, {1, 28, 28}, classes, 7, 0), test(300, {1, 28, 28}, classes, 7, 1);
  std::vector<double> means(classes * n, 0.0);
  std::vector<int64_t> counts(classes, 0);
  for (int64_t i = 0; i < train.size(); ++i) {
    int64_t label;
    std::vector<float> x = example(train, i, &label);
    ++counts[label];
    for (int64_t j = 0; j < n; ++j) means[label * n + j] += x[j];
  }
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t j = 0; j < n; ++j) means[c * n + j] /= std::max<int64_t>(counts[c], 1);
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    int64_t label;
    std::vector<float> x = example(test, i, &label);
    int64_t best = -1;
    double best_d = 1e300;
    for (int64_t c = 0; c < classes; ++c) {
      double d = 0;
      for (int64_t j = 0; j < n; ++j) d += (x[j] - means[c * n + j]) * (x[j] - means[c * n + j]);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == label;
  }
  EXPECT_GT(double(correct) / test.size(), 0.95);
}

TEST(Registry, BuildsByName) {
  std::vector<std::string> types = dataset_types();
  EXPECT_EQ(types, (std::vector<std::string>{"fashion_mnist", "mnist", "cifar10", "synthetic",
                                             "image_folder", "image_list"}));
  DatasetOptions opt;
  opt.type = "synthetic";
  opt.synthetic_size = 50;
  opt.synthetic_shape = {3, 4, 4};
  opt.synthetic_classes = 3;
  opt.seed = 9;
  auto train = build_dataset(opt, true), test = build_dataset(opt, false);
  EXPECT_EQ(train->size(), 50);
  EXPECT_EQ(train->image_shape(), (Shape{3, 4, 4}));
  EXPECT_EQ(train->num_classes(), 3);
  EXPECT_NE(example(*train, 0), example(*test, 0));  // different splits

  const std::string dir = make_temp_dir();
  write_idx_split(dir, "train", true);
  opt = DatasetOptions{};
  opt.type = "mnist";
  opt.path = dir;
  EXPECT_EQ(build_dataset(opt, true)->size(), 3);
  opt.type = "cifar10";
  write_cifar_folder(dir);
  EXPECT_EQ(build_dataset(opt, true)->size(), 10);
  opt.type = "fashion_mnist";
  opt.path = dir + "/nope";
  EXPECT_TRUE(contains(error_of([&] { build_dataset(opt, true); }), dir + "/nope"));

  opt.type = "imagenet";
  const std::string msg = error_of([&] { build_dataset(opt, true); });
  EXPECT_TRUE(contains(msg, "imagenet"));
  for (const std::string& t : types) EXPECT_TRUE(contains(msg, t));
}

// ---------------------------------------------------------------- sampler

TEST(DistributedSampler, ShardsAreDisjointAndCover) {
  for (bool shuffle : {false, true}) {
    const int world = 3;
    std::vector<int64_t> all;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(12, r, world, shuffle, 5, false);
      EXPECT_EQ(s.per_rank(), 4);
      auto idx = s.epoch_indices(0);
      EXPECT_EQ(idx.size(), 4u);
      all.insert(all.end(), idx.begin(), idx.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> expected(12);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected);
  }
  // Without shuffle: rank-strided, like PyTorch.
  EXPECT_EQ(DistributedSampler(12, 1, 3, false, 0, false).epoch_indices(0),
            (std::vector<int64_t>{1, 4, 7, 10}));
}

TEST(DistributedSampler, PadsByWrappingWhenNotDivisible) {
  // 10 examples over 4 ranks: 3 each, positions 10 and 11 wrap to order[0] and order[1].
  std::vector<std::vector<int64_t>> shards;
  for (int r = 0; r < 4; ++r) shards.push_back(DistributedSampler(10, r, 4, false, 0, false).epoch_indices(0));
  EXPECT_EQ(shards[0], (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(shards[1], (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(shards[2], (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(shards[3], (std::vector<int64_t>{3, 7, 1}));
  // Shuffled: all ranks still get 3, everything is covered, exactly two examples repeat.
  std::multiset<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(10, r, 4, true, 3, false);
    EXPECT_EQ(s.per_rank(), 3);
    for (int64_t i : s.epoch_indices(2)) seen.insert(i);
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
  // Fewer examples than ranks: still one each.
  EXPECT_EQ(DistributedSampler(2, 4, 5, false, 0, false).epoch_indices(0), (std::vector<int64_t>{0}));
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(10, r, 4, true, 3, true);
    EXPECT_EQ(s.per_rank(), 2);
    for (int64_t i : s.epoch_indices(0)) EXPECT_TRUE(seen.insert(i).second) << "repeated " << i;
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(DistributedSampler(3, 0, 4, true, 0, true).per_rank(), 0);
  EXPECT_TRUE(DistributedSampler(3, 0, 4, true, 0, true).epoch_indices(0).empty());
}

TEST(DistributedSampler, PermutationDependsOnSeedAndEpoch) {
  DistributedSampler a(1000, 0, 1, true, 11, false), b(1000, 0, 1, true, 11, false),
      c(1000, 0, 1, true, 12, false);
  EXPECT_EQ(a.epoch_indices(3), b.epoch_indices(3));
  EXPECT_NE(a.epoch_indices(3), a.epoch_indices(4));
  EXPECT_NE(a.epoch_indices(3), c.epoch_indices(3));
  // Documented construction: randperm from Generator(seed + epoch).
  Generator gen(11 + 3);
  EXPECT_EQ(a.epoch_indices(3), mt::core::randperm(1000, gen));
  // A rank's shard is the strided slice of the shared permutation.
  auto full = a.epoch_indices(5);
  auto shard = DistributedSampler(1000, 2, 4, true, 11, false).epoch_indices(5);
  for (size_t i = 0; i < shard.size(); ++i) EXPECT_EQ(shard[i], full[2 + 4 * i]);
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 2, 2, true, 0, false), Error);
  EXPECT_THROW(DistributedSampler(10, -1, 2, true, 0, false), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0, true, 0, false), Error);
  EXPECT_THROW(DistributedSampler(-1, 0, 1, true, 0, false), Error);
}

// ---------------------------------------------------------------- transforms

TEST(Transform, IdentityByDefault) {
  EXPECT_TRUE(Transform().identity());
  EXPECT_TRUE(Transform(TransformOptions{}, {1, 2, 2}).identity());
  EXPECT_TRUE(Transform(TransformOptions{{0.0f}, {1.0f}, 0, false}, {3, 2, 2}).identity());
  EXPECT_FALSE(Transform(TransformOptions{{0.5f}, {}, 0, false}, {1, 2, 2}).identity());
  EXPECT_FALSE(Transform(TransformOptions{{}, {}, 1, false}, {1, 2, 2}).identity());
  EXPECT_FALSE(Transform(TransformOptions{{}, {}, 0, true}, {1, 2, 2}).identity());
  std::vector<float> x = {1, 2, 3, 4};
  Generator gen(0);
  Transform().apply(x.data(), gen);
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(gen.offset(), 0u);  // draws nothing
}

TEST(Transform, FlipMirrorsRowsHalfTheTime) {
  Transform t(TransformOptions{{}, {}, 0, true}, {2, 2, 3});
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<float> mirrored = {3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10};
  int flips = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<float> x = in;
    Generator gen(seed);
    t.apply(x.data(), gen);
    Generator replay(seed);
    const bool flipped = replay.uniform() < 0.5f;
    EXPECT_EQ(x, flipped ? mirrored : in) << "seed " << seed;
    flips += flipped;
  }
  EXPECT_GT(flips, 70);
  EXPECT_LT(flips, 130);
}

TEST(Transform, CropWithPaddingShifts) {
  // 1x3x3 image 1..9, padding 1: every output is the input shifted by (dy, dx) in [-1, 1]^2 with
  // zeros coming in, where (dy, dx) are the transform's two draws.
  Transform t(TransformOptions{{}, {}, 1, false}, {1, 3, 3});
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::set<std::pair<int, int>> offsets;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<float> x = in;
    Generator gen(seed);
    t.apply(x.data(), gen);
    Generator replay(seed);
    const int dy = int(replay.below(3)) - 1, dx = int(replay.below(3)) - 1;
    offsets.insert({dy, dx});
    for (int y = 0; y < 3; ++y)
      for (int xx = 0; xx < 3; ++xx) {
        const int sy = y + dy, sx = xx + dx;
        const float want = (sy < 0 || sy > 2 || sx < 0 || sx > 2) ? 0.0f : in[sy * 3 + sx];
        EXPECT_EQ(x[y * 3 + xx], want) << "seed " << seed << " dy " << dy << " dx " << dx;
      }
    // Two spot checks written out by hand.
    if (dy == 1 && dx == 0) {
      EXPECT_EQ(x, (std::vector<float>{4, 5, 6, 7, 8, 9, 0, 0, 0}));
    }
    if (dy == -1 && dx == 1) {
      EXPECT_EQ(x, (std::vector<float>{0, 0, 0, 2, 3, 0, 5, 6, 0}));
    }
  }
  EXPECT_EQ(offsets.size(), 9u);  // every shift happens
}

TEST(Transform, NormalizesPerChannel) {
  Transform t(TransformOptions{{0.5f, 0.25f}, {0.5f, 2.0f}, 0, false}, {2, 1, 2});
  std::vector<float> x = {0.0f, 1.0f, 0.25f, 0.75f};
  Generator gen(0);
  t.apply(x.data(), gen);
  EXPECT_FLOAT_EQ(x[0], -1.0f);
  EXPECT_FLOAT_EQ(x[1], 1.0f);
  EXPECT_FLOAT_EQ(x[2], 0.0f);
  EXPECT_FLOAT_EQ(x[3], 0.25f);
  // One value broadcasts over channels; Fashion-MNIST's usual constants.
  Transform one(TransformOptions{{0.2860f}, {0.3530f}, 0, false}, {3, 1, 1});
  std::vector<float> y = {0.2860f, 1.0f, 0.0f};
  one.apply(y.data(), gen);
  EXPECT_FLOAT_EQ(y[0], 0.0f);
  EXPECT_FLOAT_EQ(y[1], (1.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(y[2], -0.2860f / 0.3530f);
  // Padding is applied before normalization, as in torchvision: padded pixels become -mean/std.
  Transform crop_norm(TransformOptions{{0.5f}, {0.5f}, 1, false}, {1, 1, 1});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> z = {1.0f};
    Generator g(seed);
    crop_norm.apply(z.data(), g);
    EXPECT_TRUE(z[0] == 1.0f || z[0] == -1.0f) << z[0];
  }
}

TEST(Transform, RejectsBadOptions) {
  const std::string msg =
      error_of([] { Transform(TransformOptions{{0.1f, 0.2f}, {}, 0, false}, {3, 4, 4}); });
  EXPECT_TRUE(contains(msg, "mean"));
  EXPECT_TRUE(contains(msg, "3 channels"));
  EXPECT_THROW(Transform(TransformOptions{{}, {1, 2, 3, 4}, 0, false}, {3, 4, 4}), Error);
  EXPECT_THROW(Transform(TransformOptions{{}, {0.0f}, 0, false}, {1, 4, 4}), Error);
  EXPECT_THROW(Transform(TransformOptions{{}, {}, -1, false}, {1, 4, 4}), Error);
  EXPECT_THROW(Transform(TransformOptions{}, {4, 4}), Error);
}

// ---------------------------------------------------------------- loader

namespace {
// Example i is the 1x1x2 image (i, -i) with label i % 7; optionally slow, optionally throwing.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t throw_at = -1, int sleep_us = 0)
      : n_(n), throw_at_(throw_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  Shape image_shape() const override { return {1, 1, 2}; }
  int64_t num_classes() const override { return 7; }
  std::string describe() const override { return "index dataset"; }
  int64_t get(int64_t index, float* dst) const override {
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (index == throw_at_) MT_FAIL("index dataset: example ", index, " is broken on purpose");
    dst[0] = float(index);
    dst[1] = -float(index);
    ++reads;
    return index % 7;
  }
  mutable std::atomic<int64_t> reads{0};

 private:
  int64_t n_, throw_at_;
  int sleep_us_;
};

std::vector<Batch> drain(DataLoader& loader) {
  std::vector<Batch> out;
  Batch b;
  while (loader.next(b)) out.push_back(b);
  return out;
}

std::vector<int64_t> batch_indices(const Batch& b) {
  std::vector<int64_t> idx;
  const float* x = b.inputs.data<float>();
  for (int64_t i = 0; i < b.inputs.size(0); ++i) idx.push_back(int64_t(x[2 * i]));
  return idx;
}

LoaderOptions loader_options(int64_t batch, bool shuffle, bool drop_last, uint64_t seed = 0) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}
}  // namespace

TEST(DataLoader, EveryIndexOncePerEpochWithPartialLastBatch) {
  auto ds = std::make_shared<IndexDataset>(103);
  for (int threads : {1, 2}) {
    LoaderOptions o = loader_options(10, true, false, 4);
    o.threads = threads;
    DataLoader loader(ds, Transform(), o);
    EXPECT_EQ(loader.batches_per_epoch(), 11);
    EXPECT_EQ(&loader.dataset(), ds.get());
    for (int64_t epoch : {0, 1}) {
      loader.start_epoch(epoch);
      std::vector<Batch> batches = drain(loader);
      ASSERT_EQ(batches.size(), 11u);
      std::vector<int64_t> seen;
      for (size_t k = 0; k < batches.size(); ++k) {
        const Batch& b = batches[k];
        const int64_t n = k + 1 < batches.size() ? 10 : 3;
        EXPECT_EQ(b.index, int64_t(k));
        EXPECT_EQ(b.inputs.shape(), (Shape{n, 1, 1, 2}));
        EXPECT_EQ(b.inputs.dtype(), DType::Float32);
        EXPECT_EQ(b.targets.shape(), (Shape{n}));
        EXPECT_EQ(b.targets.dtype(), DType::Int64);
        const float* x = b.inputs.data<float>();
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(x[2 * i + 1], -x[2 * i]);
          EXPECT_EQ(b.targets.data<int64_t>()[i], int64_t(x[2 * i]) % 7);
        }
        auto idx = batch_indices(b);
        seen.insert(seen.end(), idx.begin(), idx.end());
      }
      std::vector<int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> expected(103);
      std::iota(expected.begin(), expected.end(), 0);
      EXPECT_EQ(sorted, expected);
      std::vector<int64_t> order(seen);
      EXPECT_NE(order, expected);  // shuffled
      Batch b;
      EXPECT_FALSE(loader.next(b));  // stays at the end
      EXPECT_FALSE(loader.next(b));
    }
    EXPECT_GE(loader.wait_seconds(), 0.0);
  }
}

TEST(DataLoader, DropLastAndNoShuffle) {
  auto ds = std::make_shared<IndexDataset>(103);
  DataLoader loader(ds, Transform(), loader_options(10, false, true));
  EXPECT_EQ(loader.batches_per_epoch(), 10);
  loader.start_epoch(0);
  std::vector<Batch> batches = drain(loader);
  ASSERT_EQ(batches.size(), 10u);
  for (size_t k = 0; k < batches.size(); ++k) {
    EXPECT_EQ(batches[k].inputs.size(0), 10);
    EXPECT_EQ(batch_indices(batches[k])[0], int64_t(10 * k));
  }
}

TEST(DataLoader, RanksSplitTheEpoch) {
  auto ds = std::make_shared<IndexDataset>(50);
  std::vector<int64_t> all;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions o = loader_options(8, true, false, 9);
    o.rank = rank;
    o.world_size = 2;
    DataLoader loader(ds, Transform(), o);
    EXPECT_EQ(loader.batches_per_epoch(), 4);  // 25 per rank: 8, 8, 8, 1
    loader.start_epoch(1);
    for (const Batch& b : drain(loader)) {
      auto idx = batch_indices(b);
      all.insert(all.end(), idx.begin(), idx.end());
    }
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(50);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
}

TEST(DataLoader, ResumeMidEpochGivesExactlyTheRemainingBatches) {
  auto ds = std::make_shared<SyntheticDataset>(90, Shape{3, 6, 6}, 4, 5);
  Transform t(TransformOptions{{0.5f}, {0.25f}, 2, true}, {3, 6, 6});
  DataLoader full(ds, t, loader_options(8, true, false, 21));
  full.start_epoch(3);
  std::vector<Batch> all = drain(full);
  ASSERT_EQ(all.size(), 12u);
  DataLoader resumed(ds, t, loader_options(8, true, false, 21));
  resumed.start_epoch(3, 7);
  std::vector<Batch> rest = drain(resumed);
  ASSERT_EQ(rest.size(), 5u);
  for (size_t k = 0; k < rest.size(); ++k) {
    EXPECT_EQ(rest[k].index, int64_t(7 + k));
    EXPECT_EQ(rest[k].inputs.to_vector(), all[7 + k].inputs.to_vector());
    EXPECT_EQ(rest[k].targets.shape(), all[7 + k].targets.shape());
  }
  resumed.start_epoch(3, 12);  // resuming exactly at the end: nothing left
  Batch b;
  EXPECT_FALSE(resumed.next(b));
  EXPECT_THROW(resumed.start_epoch(3, 13), Error);
  EXPECT_THROW(resumed.start_epoch(3, -1), Error);
}

TEST(DataLoader, ContentIsDeterministicWithRandomTransforms) {
  auto ds = std::make_shared<SyntheticDataset>(64, Shape{3, 8, 8}, 10, 1);
  Transform t(TransformOptions{{0.4f, 0.5f, 0.6f}, {0.2f, 0.25f, 0.3f}, 2, true}, {3, 8, 8});
  auto run = [&](uint64_t seed, int64_t epoch, int threads, int prefetch) {
    LoaderOptions o = loader_options(16, true, false, seed);
    o.threads = threads;
    o.prefetch_batches = prefetch;
    DataLoader loader(ds, t, o);
    loader.start_epoch(epoch);
    std::vector<float> x;
    std::vector<int64_t> y;
    for (const Batch& b : drain(loader)) {
      auto v = b.inputs.to_vector();
      x.insert(x.end(), v.begin(), v.end());
      for (int64_t i = 0; i < b.targets.numel(); ++i) y.push_back(b.targets.data<int64_t>()[i]);
    }
    return std::pair{x, y};
  };
  const auto base = run(3, 0, 1, 2);
  EXPECT_EQ(base.first.size(), 64u * 192u);
  EXPECT_EQ(run(3, 0, 1, 2), base);
  EXPECT_EQ(run(3, 0, 2, 1), base);  // threading and prefetch depth do not matter
  EXPECT_EQ(run(3, 0, 3, 5), base);
  EXPECT_NE(run(3, 1, 1, 2).first, base.first);  // another epoch: other order and augmentation
  EXPECT_NE(run(4, 0, 1, 2).first, base.first);  // another seed

  // Same example, same epoch, but at another position (no shuffle vs shuffle): same augmentation,
  // because the key is the dataset index, not the position.
  LoaderOptions plain = loader_options(64, false, false, 3);
  DataLoader in_order(ds, t, plain);
  in_order.start_epoch(0);
  Batch b;
  ASSERT_TRUE(in_order.next(b));
  LoaderOptions shuffled = loader_options(64, true, false, 3);
  DataLoader mixed(ds, t, shuffled);
  mixed.start_epoch(0);
  Batch m;
  ASSERT_TRUE(mixed.next(m));
  const auto order = DistributedSampler(64, 0, 1, true, 3, false).epoch_indices(0);
  const float* bx = b.inputs.data<float>();
  const float* mx = m.inputs.data<float>();
  for (int64_t pos = 0; pos < 64; ++pos)
    for (int64_t j = 0; j < 192; ++j) ASSERT_EQ(mx[pos * 192 + j], bx[order[pos] * 192 + j]);
}

TEST(DataLoader, DatasetErrorPropagatesOutOfNext) {
  // Example 57 throws; with batch 10 in order, batches 0..4 arrive, then next() rethrows.
  for (int threads : {1, 2}) {
    auto ds = std::make_shared<IndexDataset>(100, 57);
    LoaderOptions o = loader_options(10, false, false);
    o.threads = threads;
    within_seconds(30, [&] {
      DataLoader loader(ds, Transform(), o);
      loader.start_epoch(0);
      Batch b;
      for (int k = 0; k < 5; ++k) {
        ASSERT_TRUE(loader.next(b));
        EXPECT_EQ(b.index, k);
      }
      const std::string msg = error_of([&] { loader.next(b); });
      EXPECT_TRUE(contains(msg, "example 57 is broken on purpose"));
      EXPECT_THROW(loader.next(b), Error);  // stays failed until the next start_epoch
      loader.start_epoch(1, 0);
      ASSERT_TRUE(loader.next(b));  // batch 0 is fine again
      EXPECT_EQ(b.index, 0);
    }, "DatasetErrorPropagatesOutOfNext");
  }
}

TEST(DataLoader, DestroyingMidEpochIsPrompt) {
  // 2 ms per example, 32 per batch: a full epoch would take 2 s; stopping must not wait for it.
  auto ds = std::make_shared<IndexDataset>(1000, -1, 2000);
  within_seconds(20, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    {
      LoaderOptions o = loader_options(32, true, false);
      o.prefetch_batches = 4;
      DataLoader loader(ds, Transform(), o);
      loader.start_epoch(0);
      Batch b;
      ASSERT_TRUE(loader.next(b));
      ASSERT_TRUE(loader.next(b));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 1.0);
    EXPECT_LT(ds->reads.load(), 1000);
    { DataLoader never_started(ds, Transform(), loader_options(32, true, false)); }
    {
      DataLoader just_started(ds, Transform(), loader_options(32, true, false));
      just_started.start_epoch(0);
    }
  }, "DestroyingMidEpochIsPrompt");
}

TEST(DataLoader, RestartingAnEpochDiscardsQueuedBatches) {
  auto ds = std::make_shared<IndexDataset>(60);
  DataLoader loader(ds, Transform(), loader_options(10, true, false, 2));
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the queue fill
  loader.start_epoch(5);
  DataLoader fresh(ds, Transform(), loader_options(10, true, false, 2));
  fresh.start_epoch(5);
  std::vector<Batch> a = drain(loader), f = drain(fresh);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(f.size(), 6u);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(batch_indices(a[k]), batch_indices(f[k]));
}

TEST(DataLoader, PrefetchOverlapsAndWaitIsMeasured) {
  // 1 ms per example, 10 per batch: a consumer that takes much longer than that per batch finds
  // its batches ready, one that takes no time waits for nearly each batch's whole production.
  // Judged by the median wait per batch, not the total: on a loaded CI machine (ctest -j2 under
  // ASan) one stall of the producer thread made a slow consumer's total wait exceed half an
  // eager one's (0.094 vs 0.082 s), while its typical batch still did not wait at all.
  auto ds = std::make_shared<IndexDataset>(100, -1, 1000);
  auto median_wait_per_batch = [](DataLoader& loader, int sleep_ms) {
    std::vector<double> waits;
    Batch b;
    double before = loader.wait_seconds();
    while (loader.next(b)) {
      waits.push_back(loader.wait_seconds() - before);
      if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      before = loader.wait_seconds();
    }
    EXPECT_EQ(waits.size(), 10u);
    std::sort(waits.begin(), waits.end());
    return waits.empty() ? 0.0 : waits[waits.size() / 2];
  };
  DataLoader eager(ds, Transform(), loader_options(10, false, false));
  eager.start_epoch(0);
  const double eager_wait = median_wait_per_batch(eager, 0);
  EXPECT_GT(eager_wait, 0.004);  // about 10 ms to make each batch
  EXPECT_GT(eager.wait_seconds(), 0.05);
  DataLoader slow_consumer(ds, Transform(), loader_options(10, false, false));
  slow_consumer.start_epoch(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_LT(median_wait_per_batch(slow_consumer, 60), 0.25 * eager_wait);
}

TEST(DataLoader, RejectsMisuse) {
  auto ds = std::make_shared<IndexDataset>(10);
  DataLoader loader(ds, Transform(), loader_options(4, true, false));
  Batch b;
  EXPECT_TRUE(contains(error_of([&] { loader.next(b); }), "start_epoch"));
  EXPECT_THROW(DataLoader(nullptr, Transform(), LoaderOptions{}), Error);
  EXPECT_THROW(DataLoader(ds, Transform(), loader_options(0, true, false)), Error);
  LoaderOptions o;
  o.prefetch_batches = 0;
  EXPECT_THROW(DataLoader(ds, Transform(), o), Error);
  o = LoaderOptions{};
  o.rank = 1;
  EXPECT_THROW(DataLoader(ds, Transform(), o), Error);
  // A transform built for other images.
  const std::string msg = error_of([&] {
    DataLoader(ds, Transform(TransformOptions{{0.5f}, {}, 0, false}, {3, 32, 32}), LoaderOptions{});
  });
  EXPECT_TRUE(contains(msg, "[3, 32, 32]"));
}

TEST(DataLoader, RealFashionMnistBatches) {
  if (!fs::is_directory(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " is absent: apt-get install dataset-fashion-mnist to run this test";
  auto ds = build_dataset(DatasetOptions{}, false);
  LoaderOptions o = loader_options(256, true, false, 1);
  o.threads = 2;
  DataLoader loader(ds, Transform(TransformOptions{{0.2860f}, {0.3530f}, 2, true}, {1, 28, 28}), o);
  EXPECT_EQ(loader.batches_per_epoch(), 40);  // 10000 / 256, rounded up
  loader.start_epoch(0);
  int64_t examples = 0;
  double sum = 0;
  Batch b;
  while (loader.next(b)) {
    examples += b.targets.numel();
    for (float v : b.inputs.to_vector()) sum += v;
  }
  EXPECT_EQ(examples, 10000);
  EXPECT_EQ(b.inputs.shape(), (Shape{10000 % 256, 1, 28, 28}));
  // Normalized, the mean is near 0 (the zero padding of random crops pulls it a little down).
  EXPECT_NEAR(sum / (10000.0 * 784), 0.0, 0.1);
}

// ---------------------------------------------------------------- prefetch queue
// The concurrency under both loaders (data/prefetch_queue.h), with batches that only say which
// batch of which epoch they are. Waits are bounded by generous deadlines and asserted by counts,
// not by how fast a loaded machine runs the threads.

namespace {
// Batch k of epoch e: inputs float32 [2] = {e, k} (so stats() counts 2 examples a batch).
Batch numbered_batch(int64_t epoch, int64_t batch) {
  Batch b;
  b.index = batch;
  b.inputs = mt::core::Tensor::empty({2});
  b.inputs.data<float>()[0] = float(epoch);
  b.inputs.data<float>()[1] = float(batch);
  return b;
}

PrefetchOptions prefetch_options(int64_t batches, int prefetch, int threads,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return PrefetchOptions{.owner = "test queue",
                         .batches_per_epoch = batches,
                         .prefetch_batches = prefetch,
                         .threads = threads,
                         .timeout = timeout};
}

std::shared_ptr<const std::vector<int64_t>> no_order() {
  return std::make_shared<const std::vector<int64_t>>();
}

// Polls `done` until it holds or 30 s pass (a generous bound on a loaded machine).
template <typename F>
bool eventually(F&& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}
}  // namespace

TEST(PrefetchQueue, HandsOutBatchesInOrderAndResumes) {
  // With 3 threads, later batches often finish first (batch k sleeps (3 - k % 3) ms); the order
  // out of next() must not show it.
  within_seconds(60, [] {
    const std::vector<int64_t> order = {10, 11, 12};
    std::atomic<int> wrong_order_seen{0};
    PrefetchQueue queue(prefetch_options(20, 2, 3), [&](const std::vector<int64_t>& o, int64_t epoch,
                                                         int64_t batch, int thread) {
      if (o != order || thread < 0 || thread >= 3) ++wrong_order_seen;
      std::this_thread::sleep_for(std::chrono::milliseconds(3 - batch % 3));
      return numbered_batch(epoch, batch);
    });
    for (int64_t first : {0, 13, 20}) {
      queue.start_epoch(7, first, std::make_shared<const std::vector<int64_t>>(order));
      Batch b;
      for (int64_t k = first; k < 20; ++k) {
        ASSERT_TRUE(queue.next(b));
        EXPECT_EQ(b.index, k);
        EXPECT_EQ(b.inputs.data<float>()[0], 7.f);
        EXPECT_EQ(b.inputs.data<float>()[1], float(k));
      }
      EXPECT_FALSE(queue.next(b));
      EXPECT_FALSE(queue.next(b));  // stays at the end
    }
    EXPECT_EQ(wrong_order_seen.load(), 0);
    EXPECT_EQ(queue.stats().images, 2 * (20 + 7));
    EXPECT_EQ(queue.stats().threads, 3);
    EXPECT_TRUE(contains(error_of([&] { queue.start_epoch(0, 21, no_order()); }), "first_batch 21"));
  }, "HandsOutBatchesInOrderAndResumes");
}

TEST(PrefetchQueue, NeverRunsMoreThanTheWindowAhead) {
  // Nobody consumes: the threads make exactly prefetch + threads - 1 batches and stop there;
  // each next() lets them make exactly one more.
  for (auto [prefetch, threads] : {std::pair{3, 1}, std::pair{2, 2}, std::pair{1, 3}}) {
    within_seconds(60, [&, prefetch = prefetch, threads = threads] {
      std::atomic<int64_t> made{0};
      PrefetchQueue queue(prefetch_options(100, prefetch, threads),
                          [&](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                            ++made;
                            return numbered_batch(epoch, batch);
                          });
      queue.start_epoch(0, 0, no_order());
      const int64_t window = prefetch + threads - 1;
      Batch b;
      for (int64_t taken = 0; taken < 3; ++taken) {
        ASSERT_TRUE(eventually([&] { return made.load() >= window + taken; }));
        // A queue that ignored the bound would overshoot in this pause (microseconds a batch).
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(made.load(), window + taken) << "prefetch " << prefetch << ", threads " << threads;
        ASSERT_TRUE(queue.next(b));
        EXPECT_EQ(b.index, taken);
      }
    }, "NeverRunsMoreThanTheWindowAhead");
  }
}

TEST(PrefetchQueue, ProducerErrorReachesTheConsumerAfterTheBatchesBeforeIt) {
  for (int threads : {1, 3}) {
    within_seconds(60, [&] {
      // Epoch 0: batches 4 and 6 fail (any exception type); the earliest failure surfaces.
      PrefetchQueue queue(prefetch_options(10, 2, threads),
                          [](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                            if (epoch == 0 && (batch == 4 || batch == 6))
                              throw std::runtime_error("batch " + std::to_string(batch) + " is broken on purpose");
                            return numbered_batch(epoch, batch);
                          });
      queue.start_epoch(0, 0, no_order());
      Batch b;
      for (int64_t k = 0; k < 4; ++k) {
        ASSERT_TRUE(queue.next(b));
        EXPECT_EQ(b.index, k);
      }
      for (int again = 0; again < 2; ++again) {  // stays failed until the next start_epoch
        try {
          queue.next(b);
          ADD_FAILURE() << "next() did not rethrow the producer's error";
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "batch 4 is broken on purpose");
        }
      }
      queue.start_epoch(1, 0, no_order());
      for (int64_t k = 0; k < 10; ++k) {
        ASSERT_TRUE(queue.next(b));
        EXPECT_EQ(b.index, k);
      }
      EXPECT_FALSE(queue.next(b));
    }, "ProducerErrorReachesTheConsumerAfterTheBatchesBeforeIt");
  }
}

TEST(PrefetchQueue, StoppingWhileTheThreadsAreBlockedIsPrompt) {
  within_seconds(60, [] {
    {  // threads blocked on a full buffer
      std::atomic<int64_t> made{0};
      PrefetchQueue queue(prefetch_options(1000, 1, 2),
                          [&](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                            ++made;
                            return numbered_batch(epoch, batch);
                          });
      queue.start_epoch(0, 0, no_order());
      ASSERT_TRUE(eventually([&] { return made.load() >= 2; }));
    }
    { PrefetchQueue idle(prefetch_options(10, 2, 2), [](auto&&...) { return Batch(); }); }  // never started
    {  // a thread inside a slow batch: the destructor waits for that batch only
      std::atomic<int64_t> made{0};
      PrefetchQueue queue(prefetch_options(1000, 4, 1),
                          [&](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                            ++made;
                            std::this_thread::sleep_for(std::chrono::milliseconds(200));
                            return numbered_batch(epoch, batch);
                          });
      queue.start_epoch(0, 0, no_order());
      ASSERT_TRUE(eventually([&] { return made.load() >= 1; }));
    }
  }, "StoppingWhileTheThreadsAreBlockedIsPrompt");
}

TEST(PrefetchQueue, NextTimesOutOnAStuckBatchAndNamesIt) {
  within_seconds(60, [] {
    std::atomic<bool> release{false};
    PrefetchQueue queue(prefetch_options(3, 2, 1, std::chrono::milliseconds(200)),
                        [&](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                          // Stuck until released (bounded, so a broken test cannot hang).
                          eventually([&] { return release.load(); });
                          return numbered_batch(epoch, batch);
                        });
    queue.start_epoch(5, 0, no_order());
    Batch b;
    const std::string msg = error_of([&] { queue.next(b); });
    EXPECT_TRUE(contains(msg, "test queue: batch 0 of epoch 5 was not ready after 0.2 s"));
    EXPECT_TRUE(contains(msg, "check the data source"));
    EXPECT_GE(queue.wait_seconds(), 0.2);
    release = true;  // the batch comes after all: the timeout did not break the queue
    ASSERT_TRUE(queue.next(b));
    EXPECT_EQ(b.index, 0);
  }, "NextTimesOutOnAStuckBatchAndNamesIt");
}

TEST(PrefetchQueueDeathTest, DestroyingWithAStuckBatchAbortsInsteadOfHanging) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the queue's threads exist in the child
  EXPECT_DEATH(
      {
        std::atomic<bool> started{false};
        PrefetchQueue queue(prefetch_options(3, 2, 1, std::chrono::milliseconds(100)),
                            [&](const std::vector<int64_t>&, int64_t epoch, int64_t batch, int) {
                              started = true;
                              std::this_thread::sleep_for(std::chrono::seconds(30));
                              return numbered_batch(epoch, batch);
                            });
        queue.start_epoch(0, 0, no_order());
        eventually([&] { return started.load(); });
      },
      "test queue: batch\\(es\\) 0 still not made 0.1 s after the loader was destroyed");
}

TEST(PrefetchQueue, WaitSecondsCountsOnlyTimeBlockedInNext) {
  within_seconds(60, [] {
    // 30 ms a batch and a consumer that takes no time: it waits for nearly all of the 0.3 s.
    PrefetchQueue slow(prefetch_options(10, 2, 1), [](const std::vector<int64_t>&, int64_t e, int64_t k, int) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      return numbered_batch(e, k);
    });
    const auto t0 = std::chrono::steady_clock::now();
    slow.start_epoch(0, 0, no_order());
    Batch b;
    while (slow.next(b)) {
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(slow.wait_seconds(), 0.1);
    EXPECT_LE(slow.wait_seconds(), elapsed);
    const LoaderStats s = slow.stats();
    EXPECT_EQ(s.wait_seconds, slow.wait_seconds());
    EXPECT_GE(s.busy_seconds, 10 * 0.03);  // sleep_for sleeps at least as long as asked
    EXPECT_EQ(s.images, 20);

    // Everything made long before the consumer asks: the second it slept is not a wait.
    PrefetchQueue fast(prefetch_options(3, 3, 1), [](const std::vector<int64_t>&, int64_t e, int64_t k, int) {
      return numbered_batch(e, k);
    });
    fast.start_epoch(0, 0, no_order());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    while (fast.next(b)) {
    }
    EXPECT_LT(fast.wait_seconds(), 0.5);
  }, "WaitSecondsCountsOnlyTimeBlockedInNext");
}
