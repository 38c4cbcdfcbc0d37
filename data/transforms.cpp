#include "data/transforms.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mt::data {

namespace {
// Expands mean/std given as empty, one value, or one per channel to one per channel.
std::vector<float> per_channel(const std::vector<float>& v, int64_t channels, float fallback,
                               const char* what) {
  if (v.empty()) return std::vector<float>(channels, fallback);
  if (v.size() == 1) return std::vector<float>(channels, v[0]);
  MT_CHECK(static_cast<int64_t>(v.size()) == channels, "transform: ", what, " has ", v.size(),
           " values but the images have ", channels,
           " channels; give one value per channel, a single value for all, or none");
  return v;
}
}  // namespace

Transform::Transform(TransformOptions opt, core::Shape image_shape)
    : opt_(std::move(opt)), shape_(std::move(image_shape)) {
  MT_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] > 0 && shape_[2] > 0,
           "transform: image shape must be [C, H, W] with positive sizes, got ",
           core::shape_str(shape_));
  MT_CHECK(opt_.random_crop_padding >= 0, "transform: random_crop_padding must be >= 0, got ",
           opt_.random_crop_padding);
  const int64_t c = shape_[0];
  mean_ = per_channel(opt_.mean, c, 0.0f, "mean");
  const std::vector<float> stdv = per_channel(opt_.std, c, 1.0f, "std");
  for (int64_t i = 0; i < c; ++i) {
    MT_CHECK(stdv[i] > 0.0f, "transform: std[", i, "] = ", stdv[i], " must be > 0");
    std_.push_back(stdv[i]);
    if (mean_[i] != 0.0f || stdv[i] != 1.0f) normalize_ = true;
  }
}

bool Transform::identity() const {
  return opt_.random_crop_padding == 0 && !opt_.random_flip && !normalize_;
}

void Transform::apply(float* chw, core::Generator& gen) const {
  if (identity()) return;
  const int64_t C = shape_[0], H = shape_[1], W = shape_[2];

  if (const int64_t pad = opt_.random_crop_padding; pad > 0) {
    // Window offset in the padded image, in [0, 2*pad]; output(y, x) = input(y + dy, x + dx).
    const int64_t dy = static_cast<int64_t>(gen.below(2 * pad + 1)) - pad;
    const int64_t dx = static_cast<int64_t>(gen.below(2 * pad + 1)) - pad;
    if (dy != 0 || dx != 0) {
      std::vector<float> src(chw, chw + C * H * W);
      std::fill(chw, chw + C * H * W, 0.0f);
      // The output columns whose source column x + dx lies inside the image.
      const int64_t x0 = std::max<int64_t>(0, -dx), x1 = std::min<int64_t>(W, W - dx);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y) {
          const int64_t sy = y + dy;
          if (sy < 0 || sy >= H || x1 <= x0) continue;
          std::memcpy(chw + (c * H + y) * W + x0, src.data() + (c * H + sy) * W + x0 + dx,
                      sizeof(float) * (x1 - x0));
        }
    }
  }

  if (opt_.random_flip && gen.uniform() < 0.5f) {
    for (int64_t row = 0; row < C * H; ++row) std::reverse(chw + row * W, chw + (row + 1) * W);
  }

  if (normalize_) {
    for (int64_t c = 0; c < C; ++c) {
      const float m = mean_[c], s = std_[c];
      float* p = chw + c * H * W;
      for (int64_t i = 0; i < H * W; ++i) p[i] = (p[i] - m) / s;
    }
  }
}

}  // namespace mt::data
