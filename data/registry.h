// Datasets by name, for configs and the CLI: build_dataset({.type = "cifar10", .path = ...}).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/image_transform.h"

namespace mt::data {

struct DatasetOptions {
  // fashion_mnist | mnist | cifar10 | synthetic | image_folder | image_list
  std::string type = "fashion_mnist";
  std::string path;  // folder with the files; empty: the type's default (image_list: the root)
  int64_t synthetic_size = 1024;
  core::Shape synthetic_shape = {1, 28, 28};
  int64_t synthetic_classes = 10;
  uint64_t seed = 0;  // synthetic only

  // Image files (image_folder, image_list; decoded with OpenCV, see data/image_dataset.h).
  std::string train_list, eval_list;  // image_list: the list files of the two splits
  int64_t num_classes = 0;            // image_list: 0 = one more than the largest label
  std::string on_bad_image = "fail";  // "fail" | "skip"
  ImageTransformOptions train_image;  // decode-time crop / resize / jitter of the train split
  ImageTransformOptions eval_image;   // ... and of the test split
};

// The train or test split of a dataset. Unknown type -> Error listing the valid types.
// Default paths: fashion_mnist /usr/share/datasets/fashion-mnist (Debian's
// dataset-fashion-mnist), mnist /usr/share/datasets/mnist, cifar10 data/cifar-10-batches-bin.
// image_folder reads path/train (test split: path/val, else path/test); image_list reads
// train_list or eval_list. Both need a build with OpenCV; without it they are an Error that
// says so.
std::shared_ptr<Dataset> build_dataset(const DatasetOptions& opt, bool train);

std::vector<std::string> dataset_types();

}  // namespace mt::data
