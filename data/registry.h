// Datasets by name, for configs and the CLI: build_dataset({.type = "cifar10", .path = ...}).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"

namespace mt::data {

struct DatasetOptions {
  std::string type = "fashion_mnist";  // fashion_mnist | mnist | cifar10 | synthetic
  std::string path;                    // folder with the files; empty: the type's default
  int64_t synthetic_size = 1024;
  core::Shape synthetic_shape = {1, 28, 28};
  int64_t synthetic_classes = 10;
  uint64_t seed = 0;  // synthetic only
};

// The train or test split of a dataset. Unknown type -> Error listing the valid types.
// Default paths: fashion_mnist /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist), mnist /usr/share/datasets/mnist, cifar10 data/cifar-10-batches-bin.
std::shared_ptr<Dataset> build_dataset(const DatasetOptions& opt, bool train);

std::vector<std::string> dataset_types();

}  // namespace mt::data
