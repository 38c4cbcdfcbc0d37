#include "apps/image_classification_task.h"

#include <algorithm>

#include "core/error.h"
#include "core/ops/nn.h"
#include "data/registry.h"
#include "data/transforms.h"
#include "layers/models/registry.h"

namespace mt::apps {
namespace {

data::TransformOptions transform_options(const mintrain::TransformConfig& t) {
  data::TransformOptions o;
  o.mean.assign(t.mean().begin(), t.mean().end());
  o.std.assign(t.std().begin(), t.std().end());
  o.random_crop_padding = t.random_crop_padding();
  o.random_flip = t.random_flip();
  return o;
}

// The decode-time part of a TransformConfig, for image-file datasets (data/image_transform.h).
data::ImageTransformOptions image_options(const mintrain::DataConfig& d, const mintrain::TransformConfig& t,
                                          const char* field) {
  data::ImageTransformOptions o;
  o.size = d.image_size();
  o.random_resized_crop = t.random_resized_crop();
  MT_CHECK(t.crop_scale_size() == 0 || t.crop_scale_size() == 2, "data.", field,
           ".crop_scale must be [min, max] (got ", t.crop_scale_size(), " values)");
  MT_CHECK(t.crop_ratio_size() == 0 || t.crop_ratio_size() == 2, "data.", field,
           ".crop_ratio must be [min, max] (got ", t.crop_ratio_size(), " values)");
  if (t.crop_scale_size() == 2) o.scale_min = t.crop_scale(0), o.scale_max = t.crop_scale(1);
  if (t.crop_ratio_size() == 2) o.ratio_min = t.crop_ratio(0), o.ratio_max = t.crop_ratio(1);
  o.resize = t.resize_size();
  o.brightness = t.brightness();
  o.contrast = t.contrast();
  o.saturation = t.saturation();
  return o;
}

}  // namespace

ImageClassificationTask::ImageClassificationTask(const RunConfig& config, const TaskContext& context)
    : config_(config), device_(context.device) {
  const auto& dc = config_.data();
  data::DatasetOptions dopt;
  dopt.type = dc.type();
  dopt.path = dc.path();
  dopt.synthetic_size = dc.synthetic().size();
  if (dc.synthetic().shape_size() == 3) dopt.synthetic_shape.assign(dc.synthetic().shape().begin(), dc.synthetic().shape().end());
  dopt.synthetic_classes = dc.synthetic().classes();
  dopt.seed = config_.seed();
  dopt.train_list = dc.train_list();
  dopt.eval_list = dc.eval_list();
  dopt.num_classes = dc.num_classes();
  dopt.on_bad_image = dc.on_bad_image();
  dopt.train_image = image_options(dc, dc.train_transform(), "train_transform");
  dopt.eval_image = image_options(dc, dc.eval_transform(), "eval_transform");
  test_set_ = data::build_dataset(dopt, /*train=*/false);
  if (!context.eval_only) train_set_ = data::build_dataset(dopt, /*train=*/true);
  const core::Shape image_shape = test_set_->image_shape();

  data::LoaderOptions lopt;
  lopt.seed = config_.seed();
  lopt.rank = context.rank;
  lopt.world_size = context.world_size;
  lopt.prefetch_batches = std::max(1, dc.prefetch_batches());
  lopt.threads = std::max(1, dc.loader_threads());
  lopt.device = device_;  // on a GPU: pinned staging and the host-to-device copy in the loader
  if (train_set_) {
    lopt.batch_size = dc.batch_size();
    lopt.shuffle = dc.shuffle();
    lopt.drop_last = dc.drop_last();
    train_loader_ = std::make_unique<data::DataLoader>(
        train_set_, data::Transform(transform_options(dc.train_transform()), image_shape), lopt);
  }
  lopt.batch_size = dc.eval_batch_size() > 0 ? dc.eval_batch_size() : dc.batch_size();
  lopt.shuffle = false;
  lopt.drop_last = false;
  test_loader_ = std::make_unique<data::DataLoader>(
      test_set_, data::Transform(transform_options(dc.eval_transform()), image_shape), lopt);
}

std::shared_ptr<layers::Module> ImageClassificationTask::build_model(core::Generator& gen) {
  const auto& mc = config_.model();
  const core::Shape image_shape = test_set_->image_shape();
  MT_CHECK(image_shape.size() == 3, "dataset images have shape ", core::shape_str(image_shape),
           "; the models expect [C, H, W]");
  layers::ModelOptions mopt;
  mopt.in_channels = image_shape[0];
  mopt.image_size = image_shape[1];
  mopt.num_classes = mc.num_classes() > 0 ? mc.num_classes() : test_set_->num_classes();
  MT_CHECK(mopt.num_classes >= test_set_->num_classes(), "model.num_classes is ",
           mopt.num_classes, " but the dataset has ", test_set_->num_classes(),
           " classes; set model.num_classes: 0 to take it from the dataset");
  if (mc.hidden_size() > 0) mopt.hidden.assign(mc.hidden().begin(), mc.hidden().end());
  mopt.dropout = mc.dropout();
  return layers::build_model(mc.name(), mopt, gen);
}

Prediction ImageClassificationTask::predict(layers::Module& model, const data::Batch& batch) {
  Prediction p;
  p.targets = batch.targets.to(device_);
  p.logits = model.forward(batch.inputs.to(device_));
  p.loss = core::cross_entropy(p.logits, p.targets);
  return p;
}

}  // namespace mt::apps
