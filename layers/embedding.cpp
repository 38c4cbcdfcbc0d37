#include "layers/embedding.h"

#include "core/ops/transformer.h"
#include "layers/init.h"

namespace mt::layers {

Embedding::Embedding(int64_t num_embeddings, int64_t dim, double init_std, core::Generator& gen)
    : num_(num_embeddings), dim_(dim) {
  MT_CHECK(num_embeddings > 0 && dim > 0, "Embedding: num_embeddings and dim must be > 0, got ", num_embeddings,
           " and ", dim);
  MT_CHECK(init_std >= 0.0, "Embedding: init_std must be >= 0, got ", init_std);
  Tensor w = Tensor::empty({num_embeddings, dim});
  normal_(w, 0.0, init_std, gen);
  weight_ = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) {
  run_forward_pre_hooks();
  MT_CHECK(ids.defined() && ids.dtype() == core::DType::Int64, "Embedding(", num_, " x ", dim_,
           "): expected int64 ids, got ", ids.defined() ? ids.str() : std::string("an undefined tensor"));
  return core::embedding(weight_, ids);
}

}  // namespace mt::layers
