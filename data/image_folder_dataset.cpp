#include "data/image_folder_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"

namespace mt::data {

namespace fs = std::filesystem;

namespace {

const char* kLayout =
    "expected one sub-folder per class with the images inside, e.g. root/train/<class>/*.JPEG "
    "and root/val/<class>/*.JPEG (see data/README.md)";

std::vector<std::string> class_folders(const fs::path& dir) {
  std::error_code ec;
  MT_CHECK(fs::is_directory(dir, ec), "image folder ", dir.string(), " does not exist or is not a folder; ", kLayout);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec))
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  MT_CHECK(!ec, "image folder ", dir.string(), ": cannot list it (", ec.message(), ")");
  // Byte order, as Python's sorted() on the names: the same class indices as torchvision.
  std::sort(names.begin(), names.end());
  MT_CHECK(!names.empty(), "image folder ", dir.string(), " has no class sub-folders; ", kLayout);
  return names;
}

// True for the file names ImageFolderDataset takes as images.
bool has_image_extension(const std::string& filename) {
  const auto dot = filename.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = filename.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* kExt[] = {"jpg", "jpeg", "png", "bmp", "ppm", "pgm", "pbm", "tif", "tiff", "webp"};
  return std::any_of(std::begin(kExt), std::end(kExt), [&](const char* e) { return ext == e; });
}

}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& folder, const ImageDatasetOptions& opt,
                                       const std::string& classes_from)
    : ImageDataset(opt) {
  const fs::path dir(folder);
  const std::vector<std::string> here = class_folders(dir);
  classes_ = classes_from.empty() ? here : class_folders(classes_from);
  for (const std::string& c : here)
    MT_CHECK(std::binary_search(classes_.begin(), classes_.end(), c), "image folder ",
             (dir / c).string(), " is a class that ", classes_from,
             " does not have; the splits must use the same class folders");

  std::vector<ImageSample> samples;
  std::error_code ec;
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path class_dir = dir / classes_[label];
    if (!fs::is_directory(class_dir, ec)) continue;  // this split lacks the class: allowed
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_directory(ec) && has_image_extension(it->path().filename().string()))
        files.push_back(it->path().string());
    }
    MT_CHECK(!ec, "image folder ", class_dir.string(), ": cannot list it (", ec.message(), ")");
    MT_CHECK(!files.empty(), "image folder ", class_dir.string(),
             " has no image files (.jpg, .jpeg, .png, .bmp, .ppm, .pgm, .tif, .tiff, .webp); "
             "add images or remove the folder");
    std::sort(files.begin(), files.end());
    for (std::string& f : files) samples.push_back({std::move(f), static_cast<int64_t>(label)});
  }
  MT_CHECK(!samples.empty(), "image folder ", dir.string(), " has no images; ", kLayout);
  const std::string description = core::detail::concat(
      "image folder ", dir.string(), " (", samples.size(), " images, ", classes_.size(), " classes)");
  set_samples(std::move(samples), static_cast<int64_t>(classes_.size()), description);
}

}  // namespace mt::data
