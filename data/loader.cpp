#include "data/loader.h"

#include <algorithm>
#include <chrono>

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

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
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
  window_ = int64_t(opt_.prefetch_batches) + opt_.threads - 1;
  if (opt_.device.is_cuda())
    for (int w = 0; w < opt_.threads; ++w) staging_.push_back(std::make_unique<DeviceStaging>(opt_.device));
  for (int w = 0; w < opt_.threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  MT_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch_, "DataLoader: first_batch ",
           first_batch, " is outside [0, ", batches_per_epoch_,
           "]; is the checkpoint from a run with another batch size or world size?");
  // The sampler runs outside the lock: a 60000-element shuffle should not block the threads.
  auto indices = std::make_shared<const std::vector<int64_t>>(sampler_.epoch_indices(epoch));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    started_ = true;
    epoch_ = epoch;
    indices_ = std::move(indices);
    next_to_produce_ = first_batch;
    next_to_consume_ = first_batch;
    ready_.clear();
    error_ = nullptr;
    failed_batch_ = -1;
  }
  cv_.notify_all();
}

bool DataLoader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  MT_CHECK(started_, "DataLoader: call start_epoch() before next()");
  if (next_to_consume_ >= batches_per_epoch_) return false;
  const auto t0 = std::chrono::steady_clock::now();
  // Every claimed batch is either filed or recorded as failed, so this cannot wait forever;
  // stop_ is only set by the destructor but is checked for completeness.
  auto it = ready_.end();
  cv_.wait(lock, [&] {
    it = ready_.find(next_to_consume_);
    return stop_ || it != ready_.end() || (error_ && failed_batch_ <= next_to_consume_);
  });
  wait_seconds_ += seconds_between(t0, std::chrono::steady_clock::now());
  // Batches before the failed one still come out first, in order.
  if (it == ready_.end()) {
    if (error_) std::rethrow_exception(error_);
    MT_FAIL("DataLoader: stopped while waiting for a batch");
  }
  out = std::move(it->second);
  ready_.erase(it);
  ++next_to_consume_;
  lock.unlock();
  cv_.notify_all();  // room in the window
  return true;
}

double DataLoader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_seconds_;
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoaderStats s;
  s.images = images_;
  s.busy_seconds = busy_seconds_;
  s.wait_seconds = wait_seconds_;
  s.threads = opt_.threads;
  return s;
}

void DataLoader::worker_loop(int worker) {
  DeviceStaging* staging = staging_.empty() ? nullptr : staging_[worker].get();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (started_ && !error_ && next_to_produce_ < batches_per_epoch_ &&
                       next_to_produce_ < next_to_consume_ + window_);
    });
    if (stop_) return;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_, batch = next_to_produce_++;
    const auto indices = indices_;  // keeps this epoch's order alive if start_epoch replaces it
    lock.unlock();

    Batch b;
    std::exception_ptr err;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      b = make_batch(*indices, epoch, batch, staging);
    } catch (...) {
      err = std::current_exception();
    }
    const double busy = seconds_between(t0, std::chrono::steady_clock::now());

    lock.lock();
    busy_seconds_ += busy;
    if (!err) images_ += b.targets.numel();
    if (generation != generation_) continue;  // start_epoch() ran meanwhile: stale batch
    if (err) {
      if (!error_ || batch < failed_batch_) {  // keep the earliest failure: it surfaces first
        error_ = err;
        failed_batch_ = batch;
      }
    } else {
      ready_.emplace(batch, std::move(b));
    }
    cv_.notify_all();
  }
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
  if (staging) std::tie(out.inputs, out.targets) = staging->upload(shape);
  return out;
}

}  // namespace mt::data
