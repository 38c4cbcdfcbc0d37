// The IDX format of MNIST and Fashion-MNIST: a big-endian header (magic, then one 32-bit size
// per dimension) followed by raw uint8 values. Files may be gzipped (as distributed) or plain;
// zlib's gzread reads both.
//
// A split is a folder holding, for train, train-images-idx3-ubyte and train-labels-idx1-ubyte
// (test: t10k-...), each optionally with a .gz suffix. Debian's dataset-fashion-mnist package
// installs Fashion-MNIST in /usr/share/datasets/fashion-mnist.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mt::data {

// One IDX file, decoded and validated: dims from the header, values flattened.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> values;
};

// Reads `path` (gzipped or plain) and checks that its magic is `expected_magic` (0x00000803
// for images, 0x00000801 for labels) and that its length matches the header exactly.
IdxArray read_idx_file(const std::string& path, uint32_t expected_magic);

class IdxDataset final : public Dataset {
 public:
  // `name` only labels describe() ("fashion-mnist", "mnist").
  IdxDataset(const std::string& folder, bool train, std::string name = "fashion-mnist",
             int64_t num_classes = 10);
  // From explicit files, for tests and unusual layouts.
  IdxDataset(const std::string& images_path, const std::string& labels_path, std::string name,
             int64_t num_classes);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape image_shape() const override { return {1, rows_, cols_}; }
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override;
  int64_t get(int64_t index, float* dst) const override;

 private:
  void load(const std::string& images_path, const std::string& labels_path);

  std::string name_;
  std::string split_;  // "train", "test" or "" (explicit files)
  std::string source_;
  int64_t num_classes_;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_;  // [N, rows, cols]
  std::vector<uint8_t> labels_;  // [N]
};

}  // namespace mt::data
