#include "data/loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"
#include "data/seed_mix.h"

namespace mt::data {

namespace {
// Keeps the augmentation streams apart from anything else keyed by the same seed.
constexpr uint64_t kAugmentStream = 0x6175676dull;  // "augm"

// The sampler is built in the initializer list, so the null check must happen there too.
int64_t checked_size(const Dataset* dataset) {
  MT_CHECK(dataset != nullptr, "DataLoader: dataset is null");
  return dataset->size();
}
}  // namespace

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, Transform transform, LoaderOptions opt)
    : dataset_(std::move(dataset)),
      transform_(std::move(transform)),
      opt_(opt),
      sampler_(checked_size(dataset_.get()), opt.rank, opt.world_size, opt.shuffle, opt.seed, opt.drop_last) {
  MT_CHECK(opt_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", opt_.batch_size);
  MT_CHECK(opt_.prefetch_batches >= 1, "DataLoader: prefetch_batches must be >= 1, got ",
           opt_.prefetch_batches);
  MT_CHECK(opt_.threads >= 1, "DataLoader: threads must be >= 1, got ", opt_.threads);
  image_shape_ = dataset_->image_shape();
  MT_CHECK(image_shape_.size() == 3, "DataLoader: ", dataset_->describe(),
           " reports image shape ", core::shape_str(image_shape_), ", expected [C, H, W]");
  MT_CHECK(transform_.identity() || transform_.image_shape() == image_shape_,
           "DataLoader: the transform was built for images ", core::shape_str(transform_.image_shape()),
           " but ", dataset_->describe(), " has ", core::shape_str(image_shape_));
  image_numel_ = core::shape_numel(image_shape_);
  const int64_t n = sampler_.per_rank(), b = opt_.batch_size;
  batches_per_epoch_ = opt_.drop_last ? n / b : (n + b - 1) / b;
  if (opt_.device.is_cuda())
    for (int w = 0; w < opt_.threads; ++w) staging_.push_back(std::make_unique<DeviceStaging>(opt_.device));
  queue_ = std::make_unique<PrefetchQueue>(
      PrefetchOptions{.owner = "DataLoader",
                      .batches_per_epoch = batches_per_epoch_,
                      .prefetch_batches = opt_.prefetch_batches,
                      .threads = opt_.threads},
      [this](const std::vector<int64_t>& indices, int64_t epoch, int64_t batch, int thread) {
        return make_batch(indices, epoch, batch, staging_.empty() ? nullptr : staging_[thread].get());
      });
}

DataLoader::~DataLoader() = default;  // queue_, the last member, stops and joins the threads first

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  // The sampler runs outside the queue's lock: a 60000-element shuffle should not block the
  // threads. (The queue checks first_batch.)
  queue_->start_epoch(epoch, first_batch,
                      std::make_shared<const std::vector<int64_t>>(sampler_.epoch_indices(epoch)));
}

Batch DataLoader::make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch,
                             DeviceStaging* staging) const {
  const int64_t begin = batch * opt_.batch_size;
  const int64_t count = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(indices.size()) - begin);
  const core::Shape shape = {count, image_shape_[0], image_shape_[1], image_shape_[2]};
  Batch out;
  out.index = batch;
  float* x;
  int64_t* y;
  if (staging) {  // GPU: fill pinned memory, copied to the device below
    x = staging->host_inputs(count * image_numel_);
    y = staging->host_targets(count);
  } else {
    out.inputs = core::Tensor::empty(shape);
    out.targets = core::Tensor::empty({count}, core::DType::Int64);
    x = out.inputs.data<float>();
    y = out.targets.data<int64_t>();
  }
  const uint64_t epoch_key = mix_seed(mix_seed(opt_.seed, kAugmentStream), uint64_t(epoch));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[begin + i];
    float* dst = x + i * image_numel_;
    // One stream per example, shared by the dataset's own augmentation (image files: crop,
    // jitter) and the Transform after it (flip, normalization).
    core::Generator gen(mix_seed(epoch_key, uint64_t(index)));
    y[i] = dataset_->get_augmented(index, dst, gen);
    if (!transform_.identity()) transform_.apply(dst, gen);
  }
  if (staging) {
    DeviceStaging::Uploaded up = staging->upload(shape);
    out.inputs = std::move(up.inputs);
    out.targets = std::move(up.targets);
    out.uploaded = std::move(up.done);
  }
  return out;
}

bool DataLoader::next(Batch& out) {
  if (!queue_->next(out)) return false;
  // The copy ran on the loader's stream: the trainer's kernels wait for it on the device.
  if (out.uploaded) DeviceStaging::consumer_wait(out.uploaded, opt_.device);
  return true;
}

}  // namespace mt::data
