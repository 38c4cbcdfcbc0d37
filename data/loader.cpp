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
  producer_ = std::thread([this] { producer_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  producer_.join();
}

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  MT_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch_, "DataLoader: first_batch ",
           first_batch, " is outside [0, ", batches_per_epoch_,
           "]; is the checkpoint from a run with another batch size or world size?");
  // The sampler runs outside the lock: a 60000-element shuffle should not block the producer.
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
  }
  cv_.notify_all();
}

bool DataLoader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  MT_CHECK(started_, "DataLoader: call start_epoch() before next()");
  if (next_to_consume_ >= batches_per_epoch_) return false;
  const auto t0 = std::chrono::steady_clock::now();
  // The producer always either queues the batch or records an error, so this cannot wait
  // forever; stop_ is only set by the destructor but is checked for completeness.
  cv_.wait(lock, [&] { return stop_ || !ready_.empty() || error_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Batches finished before the failure still come out first, in order.
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    MT_FAIL("DataLoader: stopped while waiting for a batch");
  }
  out = std::move(ready_.front());
  ready_.pop_front();
  ++next_to_consume_;
  lock.unlock();
  cv_.notify_all();  // room in the queue
  return true;
}

double DataLoader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_seconds_;
}

void DataLoader::producer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (started_ && !error_ && next_to_produce_ < batches_per_epoch_ &&
                       static_cast<int64_t>(ready_.size()) < opt_.prefetch_batches);
    });
    if (stop_) return;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_, batch = next_to_produce_++;
    const auto indices = indices_;  // keeps this epoch's order alive if start_epoch replaces it
    lock.unlock();

    Batch b;
    std::exception_ptr err;
    try {
      b = make_batch(*indices, epoch, batch);
    } catch (...) {
      err = std::current_exception();
    }

    lock.lock();
    if (generation != generation_) continue;  // start_epoch() ran meanwhile: stale batch
    if (err) {
      error_ = err;
    } else {
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
}

Batch DataLoader::make_batch(const std::vector<int64_t>& indices, int64_t epoch,
                             int64_t batch) const {
  const int64_t begin = batch * opt_.batch_size;
  const int64_t count = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(indices.size()) - begin);
  Batch out;
  out.index = batch;
  out.inputs = core::Tensor::empty({count, image_shape_[0], image_shape_[1], image_shape_[2]});
  out.targets = core::Tensor::empty({count}, core::DType::Int64);
  float* x = out.inputs.data<float>();
  int64_t* y = out.targets.data<int64_t>();
  const uint64_t epoch_key = mix_seed(mix_seed(opt_.seed, kAugmentStream), uint64_t(epoch));

  // Examples are independent, so threads split them into contiguous chunks. Plain std::threads
  // (not OpenMP) so an exception is simply caught per example and rethrown here, and thread
  // sanitizers see every synchronization. Starting a thread costs microseconds, far below the
  // cost of a batch worth splitting.
  std::exception_ptr err;
  std::mutex err_mu;
  auto fill = [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) {
      try {
        const int64_t index = indices[begin + i];
        float* dst = x + i * image_numel_;
        y[i] = dataset_->get(index, dst);
        if (!transform_.identity()) {
          core::Generator gen(mix_seed(epoch_key, uint64_t(index)));
          transform_.apply(dst, gen);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!err) err = std::current_exception();
        return;
      }
    }
  };
  const int64_t workers = std::min<int64_t>(opt_.threads, count);
  {
    // jthreads join when destroyed, also if starting one of them throws.
    std::vector<std::jthread> helpers;
    for (int64_t w = 1; w < workers; ++w)
      helpers.emplace_back(fill, count * w / workers, count * (w + 1) / workers);
    fill(0, workers > 0 ? count / workers : 0);
  }
  if (err) std::rethrow_exception(err);
  return out;
}

}  // namespace mt::data
