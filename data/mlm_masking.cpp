#include "data/mlm_masking.h"

#include "core/error.h"

namespace mt::data {

MlmMasker::MlmMasker(MlmMaskingOptions options) : opt_(std::move(options)) {
  MT_CHECK(opt_.mask_prob > 0 && opt_.mask_prob <= 1, "data.text.mask_prob must be in (0, 1], got ",
           opt_.mask_prob);
  MT_CHECK(opt_.vocab_size > 0 && opt_.vocab_size <= (int64_t(1) << 31),
           "MLM masking: vocab_size must be in [1, 2^31], got ", opt_.vocab_size);
  MT_CHECK(opt_.mask_id >= 0 && opt_.mask_id < opt_.vocab_size, "MLM masking: [MASK] id ",
           opt_.mask_id, " is outside the vocabulary of ", opt_.vocab_size);
  special_.assign(opt_.vocab_size, 0);
  special_[opt_.mask_id] = 1;
  for (const int32_t id : opt_.special_ids) {
    MT_CHECK(id >= 0 && id < opt_.vocab_size, "MLM masking: special id ", id,
             " is outside the vocabulary of ", opt_.vocab_size);
    special_[id] = 1;
  }
  for (int64_t id = 0; id < opt_.vocab_size; ++id)
    if (!special_[id]) replacements_.push_back(static_cast<int32_t>(id));
  MT_CHECK(!replacements_.empty(), "MLM masking: every id of the vocabulary is special");
}

int64_t MlmMasker::replace(int32_t token, core::Generator& gen) const {
  const float kind = gen.uniform();
  if (kind < 0.8f) return opt_.mask_id;
  if (kind < 0.9f) return replacements_[gen.below(replacements_.size())];
  return token;
}

int64_t MlmMasker::apply(const int32_t* tokens, int64_t n, core::Generator& gen, int64_t* inputs,
                         int64_t* labels) const {
  int64_t chosen = 0, maskable_count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    MT_CHECK(t >= 0 && t < opt_.vocab_size, "MLM masking: token id ", t, " at position ", i,
             " is outside the vocabulary of ", opt_.vocab_size,
             " (was the corpus packed with another vocabulary?)");
    inputs[i] = t;
    labels[i] = kIgnoreLabel;
    if (special_[t]) continue;
    ++maskable_count;
    if (gen.uniform() < opt_.mask_prob) {
      labels[i] = t;
      inputs[i] = replace(t, gen);
      ++chosen;
    }
  }
  if (chosen == 0 && maskable_count > 0) {
    // The k-th maskable position, k uniform: one more draw, still a function of the key.
    int64_t k = static_cast<int64_t>(gen.below(static_cast<uint64_t>(maskable_count)));
    for (int64_t i = 0; i < n; ++i) {
      if (special_[tokens[i]] || k-- > 0) continue;
      labels[i] = tokens[i];
      inputs[i] = replace(tokens[i], gen);
      chosen = 1;
      break;
    }
  }
  return chosen;
}

}  // namespace mt::data
