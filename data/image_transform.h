// The per-image preprocessing of image-file datasets that has to see the decoded pixels: from a
// decoded image of any size to a fixed size x size RGB float image in [0, 1].
//
//   train (random_resized_crop): a random box of scale x the area and aspect ratio in ratio
//          (log-uniform), torchvision's RandomResizedCrop algorithm, resized to size x size;
//   eval:  the shorter side scaled to `resize` (default size * 8 / 7: 256 for 224), then the
//          center size x size (torchvision's Resize + CenterCrop).
//   then:  optional color jitter (brightness, contrast, saturation, in that order), and the
//          conversion from OpenCV's HWC BGR uint8 to CHW RGB float / 255.
//
// Both geometric paths are done as "pick a box in the source image, resize only that box", so
// the resize touches just the pixels that survive the crop. Shrinking uses INTER_AREA
// (OpenCV's antialiased downscale, the closest to PIL's antialiased bilinear that torchvision
// uses), enlarging INTER_LINEAR. Horizontal flip and normalization are not here: the loader's
// Transform (data/transforms.h) does them on the floats, for every dataset alike.
//
// All randomness comes from the Generator given to apply(), the example's own stream, so the
// result is a pure function of (image, seed, epoch, index).
#pragma once
#include <cstdint>

#include "core/random.h"

namespace cv {
class Mat;  // OpenCV's image; only the .cpp (built with OpenCV) needs its definition
}

namespace mt::data {

struct ImageTransformOptions {
  int64_t size = 224;  // output is size x size
  bool random_resized_crop = false;
  float scale_min = 0.08f, scale_max = 1.0f;         // fraction of the source area
  float ratio_min = 3.0f / 4.0f, ratio_max = 4.0f / 3.0f;  // width / height of the box
  int64_t resize = 0;  // eval path: shorter side before the center crop; 0 = size * 8 / 7
  // Color jitter strengths: a factor drawn uniformly from [max(0, 1 - s), 1 + s]; 0 = off.
  float brightness = 0.0f, contrast = 0.0f, saturation = 0.0f;
};

// A box in source pixel coordinates: rows [y, y + h), columns [x, x + w).
struct CropBox {
  int64_t y = 0, x = 0, h = 0, w = 0;
  bool operator==(const CropBox&) const = default;
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of (scale, log-ratio), else a
// center crop clamped to the ratio range.
CropBox random_resized_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt,
                                core::Generator& gen);
// The source box that Resize(resize) + CenterCrop(size) keeps.
CropBox center_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt);
// In place on a 3 x h x w RGB float image in [0, 1]; draws one factor per enabled jitter.
void color_jitter(float* chw, int64_t h, int64_t w, const ImageTransformOptions& opt,
                  core::Generator& gen);

class ImageTransform {
 public:
  explicit ImageTransform(ImageTransformOptions opt);  // validates; errors name the config field
  // `bgr`: 8-bit, 3-channel BGR (as cv::imdecode gives). Writes 3 * size * size floats.
  void apply(const cv::Mat& bgr, float* chw, core::Generator& gen) const;
  const ImageTransformOptions& options() const { return opt_; }
  int64_t size() const { return opt_.size; }

 private:
  ImageTransformOptions opt_;
};

}  // namespace mt::data
