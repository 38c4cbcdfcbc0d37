// Masked-language-model masking of one token sequence (BERT's recipe).
//
// Every position holding a maskable token (not [PAD], [CLS], [SEP], [MASK], [UNK] or another
// special id) is chosen for prediction with probability mask_prob. A chosen position becomes
// [MASK] with probability 0.8, a random token with 0.1 (uniform over the non-special ids; it may
// happen to be the original), and keeps its token with 0.1; its label is the original token.
// Positions not chosen get the label -100, which the loss ignores. If no position was chosen
// but some are maskable, one of them is chosen uniformly (and treated as above), so no sequence
// contributes an empty loss.
//
// [UNK] is not predicted: it is not a word, and teaching the model to guess it only rewards
// predicting [UNK]. All draws come from the Generator passed in, in a fixed order (per position:
// choose?, then kind, then random id), so a sequence's masking is a pure function of the
// generator's key: the loader keys it by (seed, epoch, sequence index).
#pragma once
#include <cstdint>
#include <vector>

#include "core/random.h"

namespace mt::data {

inline constexpr int64_t kIgnoreLabel = -100;

struct MlmMaskingOptions {
  float mask_prob = 0.15f;
  int64_t vocab_size = 0;
  int32_t mask_id = 4;
  // Ids never chosen and never drawn as random replacements ([PAD] [UNK] [CLS] [SEP] [MASK] ...).
  std::vector<int32_t> special_ids;
};

class MlmMasker {
 public:
  explicit MlmMasker(MlmMaskingOptions options);

  // Reads `n` token ids; writes the model's input ids and the labels (n each). Returns the
  // number of positions chosen for prediction.
  int64_t apply(const int32_t* tokens, int64_t n, core::Generator& gen, int64_t* inputs,
                int64_t* labels) const;

  const MlmMaskingOptions& options() const { return opt_; }
  bool maskable(int32_t id) const { return id >= 0 && id < opt_.vocab_size && !special_[id]; }

 private:
  int64_t replace(int32_t token, core::Generator& gen) const;

  MlmMaskingOptions opt_;
  std::vector<uint8_t> special_;
  std::vector<int32_t> replacements_;  // the non-special ids, for the random 10%
};

}  // namespace mt::data
