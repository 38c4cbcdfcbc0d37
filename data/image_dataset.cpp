#include "data/image_dataset.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include "core/error.h"

namespace mt::data {

namespace {

// Reads and decodes one file. On failure returns an empty Mat and says why in `why`.
cv::Mat decode_file(const std::string& path, std::string& why) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    why = std::string("cannot open (") + std::strerror(errno) + ")";
    return {};
  }
  const std::streamsize bytes = in.tellg();
  if (bytes <= 0) {
    why = "the file is empty";
    return {};
  }
  std::vector<uint8_t> buf(static_cast<size_t>(bytes));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(buf.data()), bytes);
  if (in.gcount() != bytes) {
    why = "read " + std::to_string(in.gcount()) + " of " + std::to_string(bytes) + " bytes";
    return {};
  }
  cv::Mat img;
  try {
    // IMREAD_COLOR: gray and RGBA files become 3-channel BGR too, 16-bit ones 8-bit.
    img = cv::imdecode(buf, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  } catch (const cv::Exception& e) {
    why = std::string("OpenCV: ") + e.what();
    return {};
  }
  if (img.empty()) why = "cannot decode it (not an image OpenCV reads, or corrupt)";
  return img;
}

// OpenCV parallelizes resize with its own pool; the loader's threads are our parallelism.
void disable_opencv_threads() {
  static std::once_flag once;
  std::call_once(once, [] { cv::setNumThreads(0); });
}

}  // namespace

OnBadImage parse_on_bad_image(const std::string& name) {
  if (name == "fail") return OnBadImage::Fail;
  if (name == "skip") return OnBadImage::Skip;
  MT_FAIL("data.on_bad_image is \"", name, "\"; valid values: fail, skip");
}

ImageDataset::ImageDataset(const ImageDatasetOptions& opt)
    : transform_(opt.transform), on_bad_image_(opt.on_bad_image) {
  disable_opencv_threads();
}

void ImageDataset::set_samples(std::vector<ImageSample> samples, int64_t num_classes,
                               std::string description) {
  samples_ = std::move(samples);
  num_classes_ = num_classes;
  description_ = std::move(description);
}

int64_t ImageDataset::bad_images() const {
  std::lock_guard<std::mutex> lock(bad_mu_);
  return static_cast<int64_t>(bad_.size());
}

int64_t ImageDataset::get(int64_t index, float* dst) const {
  core::Generator gen(static_cast<uint64_t>(index));
  return get_augmented(index, dst, gen);
}

int64_t ImageDataset::get_augmented(int64_t index, float* dst, core::Generator& gen) const {
  const int64_t n = size();
  MT_CHECK(index >= 0 && index < n, describe(), ": index ", index, " out of range [0, ", n, ")");
  for (int64_t tries = 0, i = index; tries < n; ++tries, i = (i + 1) % n) {
    const ImageSample& s = samples_[i];
    std::string why;
    const cv::Mat img = decode_file(s.path, why);
    if (!img.empty()) {
      transform_.apply(img, dst, gen);
      return s.label;
    }
    MT_CHECK(on_bad_image_ == OnBadImage::Skip, s.path, ": ", why,
             "; fix or remove the file, or set data.on_bad_image: \"skip\" to skip bad images");
    bool first_time;
    {
      std::lock_guard<std::mutex> lock(bad_mu_);
      first_time = bad_.insert(i).second;
    }
    if (first_time)
      std::cerr << "warning: " << s.path << ": " << why << "; skipped (data.on_bad_image: skip)"
                << std::endl;
  }
  MT_FAIL(describe(), ": no image could be read (every file failed to decode); see the warnings above");
}

}  // namespace mt::data
