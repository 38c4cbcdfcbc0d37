#include "data/registry.h"

#include <filesystem>

#include "core/error.h"
#include "core/strings.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/synthetic_dataset.h"
#ifdef MT_WITH_OPENCV
#include "data/image_folder_dataset.h"
#include "data/image_list_dataset.h"
#endif

namespace mt::data {

// The image types are listed in every build, so that a config naming them fails with "built
// without OpenCV" (what to do) rather than "unknown type" (misleading).
std::vector<std::string> dataset_types() {
  return {"fashion_mnist", "mnist", "cifar10", "synthetic", "image_folder", "image_list"};
}

namespace {
std::shared_ptr<Dataset> build_image_dataset(const DatasetOptions& opt, bool train) {
#ifdef MT_WITH_OPENCV
  namespace fs = std::filesystem;
  ImageDatasetOptions io;
  io.transform = train ? opt.train_image : opt.eval_image;
  io.on_bad_image = parse_on_bad_image(opt.on_bad_image);
  if (opt.type == "image_folder") {
    MT_CHECK(!opt.path.empty(), "data.type \"image_folder\" needs data.path: the root holding "
             "train/<class>/*.JPEG and val/<class>/*.JPEG");
    const fs::path root(opt.path), train_dir = root / "train";
    if (train) return std::make_shared<ImageFolderDataset>(train_dir.string(), io);
    std::error_code ec;
    const fs::path eval_dir = fs::is_directory(root / "val", ec) ? root / "val" : root / "test";
    // The train split's class folders define the labels of both splits (when it is there).
    return std::make_shared<ImageFolderDataset>(
        eval_dir.string(), io, fs::is_directory(train_dir, ec) ? train_dir.string() : "");
  }
  const std::string& list = train ? opt.train_list : opt.eval_list;
  MT_CHECK(!list.empty(), "data.type \"image_list\" needs data.", train ? "train_list" : "eval_list",
           ": a file of \"<image path> <label>\" lines");
  return std::make_shared<ImageListDataset>(list, opt.path, opt.num_classes, io);
#else
  (void)train;
  MT_FAIL("data.type \"", opt.type, "\" needs OpenCV, and this mintrain was built without it; "
          "install libopencv-dev (apps/scripts/install_deps.sh) and re-run cmake");
#endif
}
}  // namespace

std::shared_ptr<Dataset> build_dataset(const DatasetOptions& opt, bool train) {
  auto path_or = [&](const char* fallback) { return opt.path.empty() ? std::string(fallback) : opt.path; };
  if (opt.type == "fashion_mnist")
    return std::make_shared<IdxDataset>(path_or("/usr/share/datasets/fashion-mnist"), train,
                                        "fashion-mnist", 10);
  if (opt.type == "mnist")
    return std::make_shared<IdxDataset>(path_or("/usr/share/datasets/mnist"), train, "mnist", 10);
  if (opt.type == "cifar10")
    return std::make_shared<CifarDataset>(path_or("data/cifar-10-batches-bin"), train);
  if (opt.type == "synthetic")
    // Same seed, other split: the test set shares the class prototypes but not the examples.
    return std::make_shared<SyntheticDataset>(opt.synthetic_size, opt.synthetic_shape,
                                              opt.synthetic_classes, opt.seed, train ? 0 : 1);
  if (opt.type == "image_folder" || opt.type == "image_list") return build_image_dataset(opt, train);
  MT_FAIL("unknown dataset type \"", opt.type, "\"; valid types: ", core::join(dataset_types()), " (set data.type)");
}

}  // namespace mt::data
