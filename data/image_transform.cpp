#include "data/image_transform.h"

#include <algorithm>
#include <cmath>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "core/error.h"

namespace mt::data {

namespace {
// Uniform in [lo, hi).
float uniform(core::Generator& gen, float lo, float hi) { return lo + (hi - lo) * gen.uniform(); }

// torchvision rounds box sizes with Python's round() (half to even); std::nearbyint does the
// same in the default rounding mode, so the boxes match for the same draws.
int64_t round_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

float jitter_factor(core::Generator& gen, float strength) {
  return uniform(gen, std::max(0.0f, 1.0f - strength), 1.0f + strength);
}
}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt,
                                core::Generator& gen) {
  const double area = double(height) * double(width);
  const double log_r0 = std::log(opt.ratio_min), log_r1 = std::log(opt.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(gen, opt.scale_min, opt.scale_max);
    const double aspect = std::exp(log_r0 + (log_r1 - log_r0) * gen.uniform());
    const int64_t w = round_even(std::sqrt(target_area * aspect));
    const int64_t h = round_even(std::sqrt(target_area / aspect));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int64_t y = static_cast<int64_t>(gen.below(uint64_t(height - h + 1)));
      const int64_t x = static_cast<int64_t>(gen.below(uint64_t(width - w + 1)));
      return {y, x, h, w};
    }
  }
  // Fallback: the whole image, cut to the nearest allowed aspect ratio, centered.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < opt.ratio_min) {
    h = std::min<int64_t>(height, std::max<int64_t>(1, round_even(w / opt.ratio_min)));
  } else if (in_ratio > opt.ratio_max) {
    w = std::min<int64_t>(width, std::max<int64_t>(1, round_even(h * opt.ratio_max)));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

CropBox center_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt) {
  const int64_t resize = opt.resize > 0 ? opt.resize : opt.size * 8 / 7;
  // Resize(resize) maps the shorter side to `resize` pixels, so one output pixel is
  // shorter / resize source pixels; the size x size center of the output is this box.
  const double scale = double(std::min(height, width)) / double(resize);
  const int64_t h = std::clamp<int64_t>(round_even(opt.size * scale), 1, height);
  const int64_t w = std::clamp<int64_t>(round_even(opt.size * scale), 1, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

void color_jitter(float* chw, int64_t h, int64_t w, const ImageTransformOptions& opt,
                  core::Generator& gen) {
  const int64_t n = h * w;
  float* r = chw;
  float* g = chw + n;
  float* b = chw + 2 * n;
  auto clamp01 = [](float v) { return std::clamp(v, 0.0f, 1.0f); };
  if (opt.brightness > 0) {
    const float f = jitter_factor(gen, opt.brightness);
    for (int64_t i = 0; i < 3 * n; ++i) chw[i] = clamp01(chw[i] * f);
  }
  if (opt.contrast > 0) {
    // Blend with the mean gray level of the whole image (torchvision's adjust_contrast).
    const float f = jitter_factor(gen, opt.contrast);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += 0.299f * r[i] + 0.587f * g[i] + 0.114f * b[i];
    const float mean = static_cast<float>(sum / double(n));
    for (int64_t i = 0; i < 3 * n; ++i) chw[i] = clamp01(mean + f * (chw[i] - mean));
  }
  if (opt.saturation > 0) {
    // Blend each pixel with its own gray level (torchvision's adjust_saturation).
    const float f = jitter_factor(gen, opt.saturation);
    for (int64_t i = 0; i < n; ++i) {
      const float gray = 0.299f * r[i] + 0.587f * g[i] + 0.114f * b[i];
      r[i] = clamp01(gray + f * (r[i] - gray));
      g[i] = clamp01(gray + f * (g[i] - gray));
      b[i] = clamp01(gray + f * (b[i] - gray));
    }
  }
}

ImageTransform::ImageTransform(ImageTransformOptions opt) : opt_(opt) {
  MT_CHECK(opt_.size > 0, "image transform: data.image_size must be > 0, got ", opt_.size);
  MT_CHECK(opt_.scale_min > 0 && opt_.scale_min <= opt_.scale_max && opt_.scale_max <= 1,
           "image transform: crop_scale must be [min, max] with 0 < min <= max <= 1, got [",
           opt_.scale_min, ", ", opt_.scale_max, "]");
  MT_CHECK(opt_.ratio_min > 0 && opt_.ratio_min <= opt_.ratio_max,
           "image transform: crop_ratio must be [min, max] with 0 < min <= max, got [",
           opt_.ratio_min, ", ", opt_.ratio_max, "]");
  MT_CHECK(opt_.resize >= 0, "image transform: resize_size must be >= 0, got ", opt_.resize);
  MT_CHECK(opt_.brightness >= 0 && opt_.contrast >= 0 && opt_.saturation >= 0,
           "image transform: brightness, contrast and saturation must be >= 0, got ",
           opt_.brightness, ", ", opt_.contrast, ", ", opt_.saturation);
}

void ImageTransform::apply(const cv::Mat& bgr, float* chw, core::Generator& gen) const {
  MT_CHECK(bgr.type() == CV_8UC3 && !bgr.empty(), "image transform: expected a non-empty 8-bit BGR image");
  const CropBox box = opt_.random_resized_crop ? random_resized_crop_box(bgr.rows, bgr.cols, opt_, gen)
                                               : center_crop_box(bgr.rows, bgr.cols, opt_);
  const int s = static_cast<int>(opt_.size);
  const cv::Mat roi = bgr(cv::Rect(int(box.x), int(box.y), int(box.w), int(box.h)));  // a view
  cv::Mat out;
  if (box.h == s && box.w == s) {
    out = roi;
  } else {
    const bool shrinking = box.h > s && box.w > s;
    cv::resize(roi, out, cv::Size(s, s), 0, 0, shrinking ? cv::INTER_AREA : cv::INTER_LINEAR);
  }

  // HWC BGR uint8 -> CHW RGB float in [0, 1], one pass over the pixels.
  const int64_t n = int64_t(s) * s;
  float* r = chw;
  float* g = chw + n;
  float* b = chw + 2 * n;
  // Division, not multiplication by 1/255: bit-identical to the other readers' scaling.
  for (int y = 0; y < s; ++y) {
    const uint8_t* p = out.ptr<uint8_t>(y);
    const int64_t row = int64_t(y) * s;
    for (int x = 0; x < s; ++x) {
      b[row + x] = p[3 * x] / 255.0f;
      g[row + x] = p[3 * x + 1] / 255.0f;
      r[row + x] = p[3 * x + 2] / 255.0f;
    }
  }
  if (opt_.brightness > 0 || opt_.contrast > 0 || opt_.saturation > 0) color_jitter(chw, s, s, opt_, gen);
}

}  // namespace mt::data
