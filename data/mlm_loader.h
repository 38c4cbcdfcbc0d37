// MlmLoader: masked-language-model batches for one rank, masked on a background thread.
//
// A TokenSource holds fixed-length token sequences (a packed text corpus, or random synthetic
// tokens); the loader picks this rank's sequences of the epoch with DistributedSampler, masks
// each one (data/mlm_masking.h) and hands out batches
//   inputs  int64 [B, S]   token ids after masking
//   targets int64 [B, S]   the original id where a position is to be predicted, else -100
//   mask    float32 [B, S] 1 for a real token, 0 for [PAD]
// as CPU tensors (B*S*8 bytes of ids: the trainer copies them to its device).
//
// Concurrency (data/prefetch_queue.h): one producer thread (masking costs microseconds per
// sequence, far less than a training step) keeps up to `prefetch_batches` finished batches ready;
// start_epoch() drops the previous epoch's batches; the destructor stops the thread, waiting at
// most for the batch in progress.
//
// Determinism: sequence i of epoch e is masked from Generator(mix(seed, "mask", e, i)), so
// batches do not depend on timing or on where an epoch was resumed, and a sequence gets the
// same masks whichever rank reads it. With `fixed_mask_epoch` >= 0 (evaluation), every epoch uses that epoch's masks,
// so evaluation losses are comparable across epochs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch_loader.h"
#include "data/mlm_masking.h"
#include "data/prefetch_queue.h"
#include "data/sampler.h"

namespace mt::data {

// Fixed-length token sequences, read by index. Implementations must be thread-safe for reads.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;     // number of sequences
  virtual int64_t seq_len() const = 0;  // tokens per sequence
  virtual void read(int64_t index, int32_t* dst) const = 0;  // writes seq_len ids
  virtual std::string describe() const = 0;
};

// Sequences packed back to back in memory (data/text_corpus.h).
class PackedTokenSource : public TokenSource {
 public:
  PackedTokenSource(std::vector<int32_t> tokens, int64_t seq_len, std::string description);
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()) / seq_len_; }
  int64_t seq_len() const override { return seq_len_; }
  void read(int64_t index, int32_t* dst) const override;
  std::string describe() const override { return description_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_len_;
  std::string description_;
};

// Uniformly random ids in [first_id, vocab_size), no padding; sequence i of a split is a pure
// function of (seed, split, i), so train (split 0) and eval (split 1) never share a sequence.
// Ids below first_id are left to the special tokens (5 with BERT's [PAD] ... [MASK] layout).
class SyntheticTokenSource : public TokenSource {
 public:
  SyntheticTokenSource(int64_t sequences, int64_t seq_len, int64_t vocab_size, uint64_t seed,
                       int split, int32_t first_id = 5);
  int64_t size() const override { return sequences_; }
  int64_t seq_len() const override { return seq_len_; }
  void read(int64_t index, int32_t* dst) const override;
  std::string describe() const override;

 private:
  int64_t sequences_, seq_len_, vocab_size_;
  uint64_t seed_;
  int split_;
  int32_t first_id_;
};

struct MlmLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = false;  // as in LoaderOptions (data/loader.h)
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  int prefetch_batches = 2;    // finished batches kept ahead of the trainer (>= 1)
  int64_t fixed_mask_epoch = -1;  // >= 0: mask every epoch as this one (evaluation)
  int32_t pad_id = 0;          // what the attention mask marks as padding
};

class MlmLoader : public BatchLoader {
 public:
  MlmLoader(std::shared_ptr<const TokenSource> source, std::shared_ptr<const MlmMasker> masker,
            MlmLoaderOptions options);
  ~MlmLoader() override;  // stops and joins the thread
  MlmLoader(const MlmLoader&) = delete;
  MlmLoader& operator=(const MlmLoader&) = delete;

  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // Blocks until the next batch is ready; false at the end of the epoch. Rethrows an error
  // raised while preparing a batch, after the batches prepared before it; an Error when none
  // comes within PrefetchOptions::timeout (a stuck token source).
  bool next(Batch& out) override { return queue_->next(out); }
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  double wait_seconds() const override { return queue_->wait_seconds(); }
  LoaderStats stats() const override { return queue_->stats(); }  // images = sequences; threads = 1

  int64_t vocab_size() const { return masker_->options().vocab_size; }
  int64_t seq_len() const { return source_->seq_len(); }
  int64_t batch_size() const { return opt_.batch_size; }
  int64_t tokens_per_batch() const { return opt_.batch_size * source_->seq_len(); }
  int64_t sequences_per_epoch() const { return sampler_.per_rank(); }  // this rank's
  std::string describe() const { return source_->describe(); }
  const TokenSource& source() const { return *source_; }

 private:
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch) const;

  std::shared_ptr<const TokenSource> source_;
  std::shared_ptr<const MlmMasker> masker_;
  MlmLoaderOptions opt_;
  DistributedSampler sampler_;
  int64_t batches_per_epoch_ = 0;
  // Last: its thread starts after everything make_batch reads is initialized, and is joined
  // before any of it is destroyed.
  std::unique_ptr<PrefetchQueue> queue_;
};

}  // namespace mt::data
