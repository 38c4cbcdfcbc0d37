#include "data/mlm_loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/random.h"
#include "data/seed_mix.h"

namespace mt::data {

namespace {
// Keep the masking and synthetic-token streams apart from anything else keyed by the seed.
constexpr uint64_t kMaskStream = 0x6d61736bull;       // "mask"
constexpr uint64_t kSyntheticStream = 0x73796e74ull;  // "synt"

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
  queue_ = std::make_unique<PrefetchQueue>(
      PrefetchOptions{.owner = "MlmLoader",
                      .batches_per_epoch = batches_per_epoch_,
                      .prefetch_batches = opt_.prefetch_batches,
                      .threads = 1},
      [this](const std::vector<int64_t>& indices, int64_t epoch, int64_t batch, int /*thread*/) {
        return make_batch(indices, epoch, batch);
      });
}

MlmLoader::~MlmLoader() = default;  // queue_, the last member, stops and joins the thread first

void MlmLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  queue_->start_epoch(epoch, first_batch,
                      std::make_shared<const std::vector<int64_t>>(sampler_.epoch_indices(epoch)));
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
