// CIFAR-10, binary version (cifar-10-binary.tar.gz): records of 1 label byte followed by a
// 32x32 RGB image stored channel-major (1024 R, 1024 G, 1024 B bytes), i.e. already [C, H, W].
// Train is data_batch_1.bin .. data_batch_5.bin (50000 images), test is test_batch.bin (10000).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace mt::data {

class CifarDataset final : public Dataset {
 public:
  static constexpr int64_t kImageBytes = 3 * 32 * 32;
  static constexpr int64_t kRecordBytes = 1 + kImageBytes;

  // `folder` holds the .bin files, or is the folder the tarball was extracted in (then its
  // cifar-10-batches-bin subfolder is used).
  CifarDataset(const std::string& folder, bool train);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape image_shape() const override { return {3, 32, 32}; }
  int64_t num_classes() const override { return 10; }
  std::string describe() const override;
  int64_t get(int64_t index, float* dst) const override;

 private:
  void append_file(const std::string& path);

  std::string split_;
  std::string folder_;
  std::vector<uint8_t> pixels_;  // [N, 3, 32, 32]
  std::vector<uint8_t> labels_;  // [N]
};

}  // namespace mt::data
