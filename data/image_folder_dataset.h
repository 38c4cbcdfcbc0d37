// An image-folder dataset (torchvision's ImageFolder, ImageNet's layout): one sub-folder per
// class, class indices in sorted name order, images anywhere below their class folder.
//
//   root/train/n01440764/n01440764_10026.JPEG     <- build_dataset(type "image_folder", train)
//   root/train/n01443537/...
//   root/val/n01440764/ILSVRC2012_val_00000293.JPEG   <- the test split ("val", else "test")
//
// Files count as images by extension, case-insensitively: .jpg .jpeg .png .bmp .ppm .pgm .pbm
// .tif .tiff .webp; others are ignored. The class list can come from another folder
// (`classes_from`): the test split takes the train split's, so a class missing from val does
// not shift every later label, and a val folder that train lacks is an error.
#pragma once
#include <string>
#include <vector>

#include "data/image_dataset.h"

namespace mt::data {

class ImageFolderDataset final : public ImageDataset {
 public:
  // `folder` holds the class folders; `classes_from` (default: `folder`) defines the classes.
  // Errors name the folder: missing, no class folders, a class folder without images.
  ImageFolderDataset(const std::string& folder, const ImageDatasetOptions& opt,
                     const std::string& classes_from = "");
  const std::vector<std::string>& classes() const { return classes_; }

 private:
  std::vector<std::string> classes_;
};

}  // namespace mt::data
