#include "core/precision.h"

#include <atomic>

#include "core/error.h"
#include "core/tensor.h"
#ifdef MT_CUDA_KERNELS
#include "core/kernels/cuda/cast.h"
#endif

namespace mt::core {

namespace {
std::atomic<ComputePrecision> g_precision{ComputePrecision::FP32};

void round_cpu(const float* in, float* out, int64_t n, ComputePrecision p) {
  if (p == ComputePrecision::BF16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(in[i]);
  } else if (p == ComputePrecision::FP16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) out[i] = round_to_fp16(in[i]);
  } else if (in != out) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i];
  }
}
}  // namespace

void set_compute_precision(ComputePrecision p) { g_precision.store(p, std::memory_order_relaxed); }
ComputePrecision compute_precision() { return g_precision.load(std::memory_order_relaxed); }

ComputePrecision parse_compute_precision(const std::string& name) {
  if (name == "fp32") return ComputePrecision::FP32;
  if (name == "bf16") return ComputePrecision::BF16;
  if (name == "fp16") return ComputePrecision::FP16;
  MT_FAIL("precision \"", name, "\" is not known; RunConfig.precision must be \"fp32\", \"bf16\" or "
          "\"fp16\" (e.g. --set precision=bf16)");
}

const char* compute_precision_name(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::FP32: return "fp32";
    case ComputePrecision::BF16: return "bf16";
    case ComputePrecision::FP16: return "fp16";
  }
  return "?";
}

DType storage_dtype(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::BF16: return DType::BFloat16;
    case ComputePrecision::FP16: return DType::Float16;
    case ComputePrecision::FP32: break;
  }
  return DType::Float32;
}

Tensor round_to_precision(const Tensor& t, ComputePrecision p) {
  MT_CHECK(t.dtype() == DType::Float32, "round_to_precision expects a float32 tensor, got ", t.str());
#ifdef MT_CUDA_KERNELS
  if (t.is_cuda()) return cuda::rounded_copy(t, p);
#endif
  MT_CHECK(t.device().is_cpu(), "round_to_precision: ", t.str(), " is on a device this build has no kernels for");
  const Tensor src = t.detach();
  if (!src.is_contiguous()) {  // contiguous() already made a fresh copy: round it in place
    Tensor c = src.contiguous();
    round_cpu(c.data<float>(), c.data<float>(), c.numel(), p);
    return c;
  }
  Tensor out = Tensor::empty(src.shape(), DType::Float32, src.device());
  round_cpu(src.data<float>(), out.data<float>(), src.numel(), p);
  return out;
}

void round_to_precision_(Tensor& t, ComputePrecision p) {
  MT_CHECK(t.dtype() == DType::Float32 && t.is_contiguous(),
           "round_to_precision_ expects a contiguous float32 tensor, got ", t.str());
  if (p == ComputePrecision::FP32 || t.numel() == 0) return;
#ifdef MT_CUDA_KERNELS
  if (t.is_cuda()) return cuda::round_in_place(t, p);
#endif
  round_cpu(t.data<float>(), t.data<float>(), t.numel(), p);
}

}  // namespace mt::core
