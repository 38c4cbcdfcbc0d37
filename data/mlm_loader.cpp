#include "data/mlm_loader.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/random.h"
#include "data/seed_mix.h"

namespace mt::data {

namespace {
// Keep the masking and synthetic-token streams apart from anything else keyed by the seed.
constexpr uint64_t kMaskStream = 0x6d61736bull;       // "mask"
constexpr uint64_t kSyntheticStream = 0x73796e74ull;  // "synt"

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t checked_size(const TokenSource* source) {
  MT_CHECK(source != nullptr, "MlmLoader: token source is null");
  return source->size();
}
}  // namespace

PackedTokenSource::PackedTokenSource(std::vector<int32_t> tokens, int64_t seq_len,
                                     std::string description)
    : tokens_(std::move(tokens)), seq_len_(seq_len), description_(std::move(description)) {
  MT_CHECK(seq_len_ >= 1, "PackedTokenSource: seq_len must be >= 1, got ", seq_len_);
  MT_CHECK(tokens_.size() % seq_len_ == 0, "PackedTokenSource: ", tokens_.size(),
           " tokens are not a whole number of sequences of ", seq_len_);
}

void PackedTokenSource::read(int64_t index, int32_t* dst) const {
  MT_CHECK(index >= 0 && index < size(), "PackedTokenSource: sequence ", index,
           " is outside [0, ", size(), ")");
  std::copy_n(tokens_.begin() + index * seq_len_, seq_len_, dst);
}

SyntheticTokenSource::SyntheticTokenSource(int64_t sequences, int64_t seq_len, int64_t vocab_size,
                                           uint64_t seed, int split, int32_t first_id)
    : sequences_(sequences), seq_len_(seq_len), vocab_size_(vocab_size), seed_(seed), split_(split),
      first_id_(first_id) {
  MT_CHECK(sequences >= 1, "data.text.synthetic_sequences must be >= 1, got ", sequences);
  MT_CHECK(seq_len >= 8, "data.text.seq_len must be >= 8, got ", seq_len);
  MT_CHECK(first_id >= 0 && vocab_size > first_id && vocab_size <= (int64_t(1) << 31),
           "data.text.synthetic_vocab must be in (", first_id,
           ", 2^31] (ids below it are the special tokens), got ", vocab_size);
}

void SyntheticTokenSource::read(int64_t index, int32_t* dst) const {
  MT_CHECK(index >= 0 && index < sequences_, "SyntheticTokenSource: sequence ", index,
           " is outside [0, ", sequences_, ")");
  const uint64_t key = mix_seed(mix_seed(mix_seed(seed_, kSyntheticStream), uint64_t(split_)),
                                uint64_t(index));
  core::Generator gen(key);
  const uint64_t range = uint64_t(vocab_size_ - first_id_);
  for (int64_t i = 0; i < seq_len_; ++i) dst[i] = first_id_ + static_cast<int32_t>(gen.below(range));
}

std::string SyntheticTokenSource::describe() const {
  return "synthetic tokens" + std::string(split_ == 0 ? "" : " (eval)") + ": " +
         std::to_string(sequences_) + " sequences of " + std::to_string(seq_len_) +
         " tokens, vocabulary " + std::to_string(vocab_size_);
}

MlmLoader::MlmLoader(std::shared_ptr<const TokenSource> source, std::shared_ptr<const MlmMasker> masker,
                     MlmLoaderOptions options)
    : source_(std::move(source)),
      masker_(std::move(masker)),
      opt_(options),
      sampler_(checked_size(source_.get()), options.rank, options.world_size, options.shuffle,
               options.seed, options.drop_last) {
  MT_CHECK(masker_ != nullptr, "MlmLoader: masker is null");
  MT_CHECK(opt_.batch_size >= 1, "MlmLoader: batch_size must be >= 1, got ", opt_.batch_size);
  MT_CHECK(opt_.prefetch_batches >= 1, "MlmLoader: prefetch_batches must be >= 1, got ",
           opt_.prefetch_batches);
  MT_CHECK(source_->size() >= 1, "MlmLoader: ", source_->describe(), " has no sequences");
  const int64_t n = sampler_.per_rank(), b = opt_.batch_size;
  batches_per_epoch_ = opt_.drop_last ? n / b : (n + b - 1) / b;
  MT_CHECK(batches_per_epoch_ >= 1, "MlmLoader: ", source_->describe(), " gives rank ", opt_.rank,
           " of ", opt_.world_size, " only ", n, " sequences, less than one batch of ", b,
           " with drop_last; lower the batch size or turn drop_last off");
  producer_ = std::thread([this] { producer_loop(); });
}

MlmLoader::~MlmLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  producer_.join();
}

void MlmLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  MT_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch_, "MlmLoader: first_batch ",
           first_batch, " is outside [0, ", batches_per_epoch_,
           "]; is the checkpoint from a run with another batch size or world size?");
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

bool MlmLoader::next(Batch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  MT_CHECK(started_, "MlmLoader: call start_epoch() before next()");
  if (next_to_consume_ >= batches_per_epoch_) return false;
  const auto t0 = std::chrono::steady_clock::now();
  // The producer either files the batch or records an error, so this wait ends.
  cv_.wait(lock, [&] { return stop_ || !ready_.empty() || error_; });
  wait_seconds_ += seconds_since(t0);
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    MT_FAIL("MlmLoader: stopped while waiting for a batch");
  }
  out = std::move(ready_.front());
  ready_.pop_front();
  ++next_to_consume_;
  lock.unlock();
  cv_.notify_all();  // room in the queue
  return true;
}

double MlmLoader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_seconds_;
}

LoaderStats MlmLoader::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  LoaderStats s;
  s.images = sequences_;
  s.busy_seconds = busy_seconds_;
  s.wait_seconds = wait_seconds_;
  s.threads = 1;
  return s;
}

void MlmLoader::producer_loop() {
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
    const auto t0 = std::chrono::steady_clock::now();
    try {
      b = make_batch(*indices, epoch, batch);
    } catch (...) {
      err = std::current_exception();
    }
    const double busy = seconds_since(t0);

    lock.lock();
    busy_seconds_ += busy;
    if (!err) sequences_ += b.inputs.shape()[0];
    if (generation != generation_) continue;  // start_epoch() ran meanwhile: stale batch
    if (err) {
      error_ = err;
    } else {
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
}

Batch MlmLoader::make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch) const {
  const int64_t seq_len = source_->seq_len();
  const int64_t begin = batch * opt_.batch_size;
  const int64_t count = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(indices.size()) - begin);
  Batch out;
  out.index = batch;
  out.inputs = core::Tensor::empty({count, seq_len}, core::DType::Int64);
  out.targets = core::Tensor::empty({count, seq_len}, core::DType::Int64);
  out.mask = core::Tensor::empty({count, seq_len});
  int64_t* inputs = out.inputs.data<int64_t>();
  int64_t* targets = out.targets.data<int64_t>();
  float* mask = out.mask.data<float>();
  const int64_t mask_epoch = opt_.fixed_mask_epoch >= 0 ? opt_.fixed_mask_epoch : epoch;
  const uint64_t epoch_key = mix_seed(mix_seed(opt_.seed, kMaskStream), uint64_t(mask_epoch));
  std::vector<int32_t> tokens(seq_len);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t index = indices[begin + i];
    source_->read(index, tokens.data());
    core::Generator gen(mix_seed(epoch_key, uint64_t(index)));
    masker_->apply(tokens.data(), seq_len, gen, inputs + i * seq_len, targets + i * seq_len);
    for (int64_t j = 0; j < seq_len; ++j) mask[i * seq_len + j] = tokens[j] == opt_.pad_id ? 0.f : 1.f;
  }
  return out;
}

}  // namespace mt::data
