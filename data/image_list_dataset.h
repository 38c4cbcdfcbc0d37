// A list-file dataset: one "<image path> <label>" per line, the label a class index.
//
//   # comments and blank lines are ignored
//   n01440764/n01440764_10026.JPEG 0
//   photos/a cat.png 3            <- the label is the last field, so paths may contain spaces
//
// Relative paths are resolved against `root` when given (data.path), else against the list
// file's folder. The files are not opened here (1.28M stat calls would slow every start):
// a missing file is a bad image, reported with its path when it is read (data.on_bad_image).
#pragma once
#include <cstdint>
#include <string>

#include "data/image_dataset.h"

namespace mt::data {

class ImageListDataset final : public ImageDataset {
 public:
  // num_classes 0: one more than the largest label. Errors name the file and line: a line
  // without a label, a label that is not an integer, negative, or >= num_classes (when given).
  ImageListDataset(const std::string& list_file, const std::string& root, int64_t num_classes,
                   const ImageDatasetOptions& opt);
};

}  // namespace mt::data
