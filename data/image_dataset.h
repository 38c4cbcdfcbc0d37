// Labelled image files, decoded on demand with OpenCV: the common part of the image-folder and
// list-file datasets (data/image_folder_dataset.h, data/image_list_dataset.h), which only
// differ in how they find the (path, label) pairs.
//
// Nothing is held in memory but the paths: ImageNet's 1.28M training JPEGs are ~140 GB
// decoded. get_augmented() reads the file, decodes it (cv::imdecode, BGR; EXIF orientation
// ignored, as PIL and so torchvision do), and runs the ImageTransform (crop/resize to a fixed
// size, color jitter, to CHW RGB floats). It is const and thread-safe, so the loader's threads
// decode in parallel; OpenCV's own thread pool is switched off, because those threads are the
// parallelism and a second pool would only oversubscribe the cores.
//
// Unreadable or corrupt files: with OnBadImage::Fail, get() throws an Error naming the file;
// with OnBadImage::Skip it warns once per file on stderr and returns the next readable example
// in dataset order instead (index + 1, + 2, ... wrapping), so batches keep their size, every
// rank still sees the same number of examples, and the substitute is deterministic.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "data/dataset.h"
#include "data/image_transform.h"

namespace mt::data {

enum class OnBadImage { Fail, Skip };
// "fail" or "skip" (data.on_bad_image); anything else is an Error listing both.
OnBadImage parse_on_bad_image(const std::string& name);

struct ImageDatasetOptions {
  ImageTransformOptions transform;
  OnBadImage on_bad_image = OnBadImage::Fail;
};

struct ImageSample {
  std::string path;
  int64_t label = 0;
};

class ImageDataset : public Dataset {
 public:
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Shape image_shape() const override { return {3, transform_.size(), transform_.size()}; }
  int64_t num_classes() const override { return num_classes_; }
  std::string describe() const override { return description_; }
  // Without a Generator: the example's augmentation from Generator(index), for callers outside
  // the loader (the loader always calls get_augmented).
  int64_t get(int64_t index, float* dst) const override;
  int64_t get_augmented(int64_t index, float* dst, core::Generator& gen) const override;

  const std::vector<ImageSample>& samples() const { return samples_; }
  // Files found unreadable so far (each counted once); only grows with OnBadImage::Skip.
  int64_t bad_images() const;

 protected:
  explicit ImageDataset(const ImageDatasetOptions& opt);
  // Called once by the subclass constructor; `description` is what describe() returns.
  void set_samples(std::vector<ImageSample> samples, int64_t num_classes, std::string description);

 private:
  ImageTransform transform_;
  OnBadImage on_bad_image_;
  std::vector<ImageSample> samples_;
  int64_t num_classes_ = 0;
  std::string description_;
  mutable std::mutex bad_mu_;
  mutable std::unordered_set<int64_t> bad_;  // indices already reported
};

}  // namespace mt::data
