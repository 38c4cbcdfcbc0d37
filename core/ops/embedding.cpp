// Row gathers (declared in transformer.h).
#include "core/dispatch.h"
#include "core/function_node.h"
#include "core/kernels/cpu/embedding.h"
#include "core/ops/transformer.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/embedding.h"
#endif

namespace mt::core {

Tensor embedding(const Tensor& table, const Tensor& indices) {
  MT_CHECK(table.dtype() == DType::Float32 && table.dim() == 2,
           "embedding expects a float32 table [rows, dim], got ", table.str());
  MT_CHECK(indices.dtype() == DType::Int64, "embedding expects int64 indices, got ", indices.str());
  MT_CHECK(indices.device() == table.device(), "embedding: indices ", indices.str(),
           " are on another device than the table ", table.str());
  const int64_t rows = table.shape()[0], d = table.shape()[1];
  Tensor tc = table.contiguous(), ic = indices.contiguous();
  // CUDA kernels check the range on the device instead: reading indices here would copy them back.
  if (!ic.is_cuda()) {
    const int64_t* p = ic.data<int64_t>();
    for (int64_t i = 0; i < ic.numel(); ++i)
      MT_CHECK(p[i] >= 0 && p[i] < rows, "embedding: index ", p[i], " at position ", i,
               " is out of range for a table of ", rows, " rows (valid indices are 0..", rows - 1,
               "); check the token ids against the vocabulary size");
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(d);
  Tensor out = Tensor::empty(out_shape, DType::Float32, table.device());
  MT_DISPATCH(table.device(), embedding_forward, tc, ic, out);
  record("EmbeddingBackward", {table}, {out}, [ic, shape = table.shape()](const Grads& g, const Needs&) -> Grads {
    Tensor gy = g[0].contiguous();
    Tensor gtable = Tensor::empty(shape, DType::Float32, gy.device());
    MT_DISPATCH(gy.device(), embedding_backward, gy, ic, gtable);
    return {gtable};
  });
  return out;
}

}  // namespace mt::core
