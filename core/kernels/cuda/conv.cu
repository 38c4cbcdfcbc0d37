// 2-d convolution on the GPU, two implementations behind the CPU kernels' signatures:
//
// * cuDNN (builds with MT_WITH_CUDNN, while use_cudnn() is on): cudnnConvolutionForward /
//   BackwardData / BackwardFilter. The algorithm for each direction is chosen once per shape
//   (cudnnGet*_v7 heuristics, or cudnnFind*Ex timings after set_conv_benchmark(true)) among
//   those whose scratch fits conv_workspace_limit(), and cached. TF32 is excluded unless
//   allow_tf32(): FP32 convolutions use TF32 tensor cores by default in cuDNN, and CUDNN_FMA_MATH
//   is what keeps them in full FP32.
// * im2col + cuBLAS (every CUDA build): the CPU's formulation sample by sample -- unfold the
//   receptive fields into col[C*kh*kw, Ho*Wo], multiply by W[O, C*kh*kw], and for the input
//   gradient fold W^T * dy back with col2im. col2im gathers (each input pixel sums the columns
//   that read it, in the CPU's order), so it needs no atomics and is deterministic.
//
// The bias is added, and its gradient summed, by our own kernels in both implementations.
//
// Mixed precision (core/precision.h, BF16 or FP16): x, w and dy are cast into 16-bit scratch
// (kernels/cuda/cast.h) and cuDNN runs its PSEUDO_BFLOAT16 / PSEUDO_HALF configuration: tensor
// and filter descriptors in the 16-bit type, the convolution descriptor's compute type
// float32, tensor-core math. Those configurations write y, dx and dw in the 16-bit type too;
// they are widened back into the float32 outputs, and the bias is added in float32 after. The
// im2col path emulates the same arithmetic as the CPU does: rounded float32 copies of the
// inputs, the float32 GEMMs, then the outputs rounded.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/kernels/cuda/cast.h"
#include "core/kernels/cuda/conv.h"
#include "core/kernels/cuda/gemm.h"
#include "core/kernels/cuda/handles.h"
#include "core/kernels/cuda/channel_reduce.cuh"
#include "core/kernels/cuda/launch.cuh"
#include "core/kernels/cuda/math_mode.h"

namespace mt::core::cuda {

namespace {

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight
  int64_t ho, wo;      // output
  int64_t stride, pad;

  __host__ __device__ int64_t patch() const { return c * kh * kw; }
  __host__ __device__ int64_t pixels() const { return ho * wo; }
  bool pointwise() const { return kh == 1 && kw == 1 && stride == 1 && pad == 0; }
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& y, int64_t stride, int64_t pad) {
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[2],
          w.shape()[3], y.shape()[2], y.shape()[3], stride, pad};
}

// ---------------------------------------------------------------- bias

// y[n, o, p] += bias[o]
__global__ void add_channel_bias(float* y, const float* bias, int64_t total, int64_t o, int64_t pixels) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) y[i] += bias[(i / pixels) % o];
}

// gb[o] = sum over samples and pixels of gy[n, o, :], in double, over many blocks per channel
// (channel_reduce.cuh).
struct SumOf {
  const float* x;
  __device__ void operator()(int64_t, int64_t off, double* acc) const { acc[0] += x[off]; }
};

__global__ void finish_channel_sums(const double* partial, int splits, int64_t o, float* gb) {
  for (int64_t ch = first_index(); ch < o; ch += grid_stride())
    gb[ch] = static_cast<float>(sum_partials<1>(partial, ch, splits, 0));
}

void bias_forward(const Geometry& g, const Tensor& bias, Tensor& y) {
  const int64_t total = g.n * g.o * g.pixels();
  if (!bias.defined() || total == 0) return;
  launch(add_channel_bias, blocks_for(total), y.data<float>(), bias.data<float>(), total, g.o, g.pixels());
}

void bias_backward(const Geometry& g, const Tensor& gy, Tensor& gb) {
  if (g.o == 0) return;
  const ChannelLayout L{g.n, g.o, g.pixels()};
  const int splits = channel_splits(L);
  Tensor scratch = Tensor::empty({2 * g.o * splits}, DType::Float32, gy.device());  // o * splits doubles
  auto* partial = static_cast<double*>(scratch.raw_data());
  launch_channel_partial_sums<1>(L, splits, SumOf{gy.data<float>()}, partial);
  launch(finish_channel_sums, blocks_for(g.o), partial, splits, g.o, gb.data<float>());
}

// ---------------------------------------------------------------- im2col + cuBLAS

// col[(c*kh + ki)*kw + kj, oh*wo + ow] = x[c, oh*s - pad + ki, ow*s - pad + kj] (0 outside).
__global__ void im2col_kernel(const float* x, float* col, Geometry g) {
  const int64_t total = g.patch() * g.pixels();
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t row = i / g.pixels(), pix = i % g.pixels();
    const int64_t c = row / (g.kh * g.kw), ki = (row / g.kw) % g.kh, kj = row % g.kw;
    const int64_t ih = (pix / g.wo) * g.stride - g.pad + ki, iw = (pix % g.wo) * g.stride - g.pad + kj;
    col[i] = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? x[(c * g.h + ih) * g.w + iw] : 0.0f;
  }
}

// The adjoint of im2col, gathered: x[c, ih, iw] = sum of the col entries copied from it, over
// (ki, kj) in increasing order like the CPU's col2im.
__global__ void col2im_kernel(const float* col, float* x, Geometry g) {
  const int64_t total = g.c * g.h * g.w;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t c = i / (g.h * g.w), ih = (i / g.w) % g.h, iw = i % g.w;
    float acc = 0.0f;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t th = ih + g.pad - ki;  // = oh * stride for the output row that read it
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.ho) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tw = iw + g.pad - kj;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.wo) continue;
        const int64_t row = (c * g.kh + ki) * g.kw + kj, pix = (th / g.stride) * g.wo + tw / g.stride;
        acc += col[row * g.pixels() + pix];
      }
    }
    x[i] = acc;
  }
}

// The GEMM's right operand for sample xn: xn itself for a pointwise convolution, else its
// receptive fields unfolded into col.
const float* columns(const Geometry& g, const float* xn, const Tensor& col) {
  if (g.pointwise()) return xn;
  launch(im2col_kernel, blocks_for(g.patch() * g.pixels()), xn, col.data<float>(), g);
  return col.data<float>();
}

void gemm_conv_forward(const Geometry& g, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t in_size = g.c * g.h * g.w, out_size = g.o * g.pixels();
  Tensor col = g.pointwise() ? Tensor() : Tensor::empty({g.patch(), g.pixels()}, DType::Float32, x.device());
  for (int64_t n = 0; n < g.n; ++n) {
    const float* cn = columns(g, x.data<float>() + n * in_size, col);
    gemm(false, false, g.o, g.pixels(), g.patch(), 1.0f, w.data<float>(), g.patch(), cn, g.pixels(),
         0.0f, y.data<float>() + n * out_size, g.pixels());
  }
}

void gemm_conv_backward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& gy,
                        Tensor& gx, Tensor& gw) {
  const int64_t in_size = g.c * g.h * g.w, out_size = g.o * g.pixels();
  const bool unfold = !g.pointwise();
  Tensor col = unfold && gw.defined() ? Tensor::empty({g.patch(), g.pixels()}, DType::Float32, x.device()) : Tensor();
  Tensor dcol = unfold && gx.defined() ? Tensor::empty({g.patch(), g.pixels()}, DType::Float32, x.device()) : Tensor();
  if (gw.defined() && g.n == 0)  // an empty batch: dW is a sum of nothing
    MT_CUDA_CHECK(cudaMemsetAsync(gw.raw_data(), 0, gw.nbytes(), nullptr));
  for (int64_t n = 0; n < g.n; ++n) {
    const float* gyn = gy.data<float>() + n * out_size;
    if (gw.defined()) {
      const float* cn = columns(g, x.data<float>() + n * in_size, col);
      // dW += dy_n * col_n^T; the first sample overwrites (beta 0), so gw needs no zeroing.
      gemm(false, true, g.o, g.patch(), g.pixels(), 1.0f, gyn, g.pixels(), cn, g.pixels(),
           n == 0 ? 0.0f : 1.0f, gw.data<float>(), g.patch());
    }
    if (gx.defined()) {
      float* gxn = gx.data<float>() + n * in_size;
      float* target = unfold ? dcol.data<float>() : gxn;
      gemm(true, false, g.patch(), g.pixels(), g.o, 1.0f, w.data<float>(), g.patch(), gyn, g.pixels(),
           0.0f, target, g.pixels());
      if (unfold) launch(col2im_kernel, blocks_for(in_size), dcol.data<float>(), gxn, g);
    }
  }
}

// ---------------------------------------------------------------- cuDNN
#ifdef MT_WITH_CUDNN

int to_int(int64_t v) {
  MT_CHECK(v >= 0 && v <= INT32_MAX, "conv2d: size ", v, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

// cuDNN's element type for a compute precision's storage: float32, or the 16-bit format.
cudnnDataType_t cudnn_type(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::BF16: return CUDNN_DATA_BFLOAT16;
    case ComputePrecision::FP16: return CUDNN_DATA_HALF;
    case ComputePrecision::FP32: break;
  }
  return CUDNN_DATA_FLOAT;
}

// The four descriptors of one convolution, created per call (host-side structs, cheap) and
// destroyed with it. `p` picks the data type of x, w and y; the arithmetic is float32 in every
// case (FLOAT_CONFIG, PSEUDO_HALF_CONFIG, PSEUDO_BFLOAT16_CONFIG).
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(const Geometry& g, bool tf32, ComputePrecision p) {
    const cudnnDataType_t type = cudnn_type(p);
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, to_int(g.n),
                                              to_int(g.c), to_int(g.h), to_int(g.w)));
    MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, to_int(g.n),
                                              to_int(g.o), to_int(g.ho), to_int(g.wo)));
    MT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, to_int(g.o),
                                              to_int(g.c), to_int(g.kh), to_int(g.kw)));
    MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, to_int(g.pad), to_int(g.pad), to_int(g.stride),
                                                   to_int(g.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    // 16-bit inputs: tensor cores (what the format is for). float32: TF32 tensor cores only
    // when allowed, else FMA math keeps every product in full float32.
    const cudnnMathType_t math = p != ComputePrecision::FP32 ? CUDNN_TENSOR_OP_MATH
                                 : tf32                      ? CUDNN_DEFAULT_MATH
                                                             : CUDNN_FMA_MATH;
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

enum class Direction { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

struct Algo {
  bool found = false;  // false: no cuDNN algorithm fits (the im2col path runs instead)
  int algo = 0;        // the cudnnConvolution*Algo_t value
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // the math type the algorithm was ranked with
};

// Everything the choice depends on: device, shape, direction and the numeric switches.
using AlgoKey = std::array<int64_t, 15>;

AlgoKey key_of(const Geometry& g, Direction dir, bool tf32, ComputePrecision p) {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  return {dev, g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, static_cast<int64_t>(dir), tf32,
          static_cast<int64_t>(conv_workspace_limit()), conv_benchmark(), static_cast<int64_t>(p)};
}

std::mutex g_algo_mu;
std::map<AlgoKey, Algo>& algo_cache() {
  static auto* cache = new std::map<AlgoKey, Algo>();  // never destroyed, like the allocator
  return *cache;
}

// The results that succeeded, fit the workspace limit and, for float32 data, keep to FP32 when
// TF32 is off (16-bit data is meant for tensor cores), best first: cuDNN ranks heuristics
// results by expected speed and Find results by time. Under FP32-only rules each runs with
// CUDNN_FMA_MATH whatever math type it was ranked with: cuDNN documents CUDNN_DEFAULT_MATH as
// permitting TF32 tensor cores on Ampere and later (GpuOps.Conv2dFloat32KeepsFullPrecision).
//
// For 16-bit data the FFT and Winograd algorithms are left out too: they keep their transformed
// tiles in the data's 16-bit type, so their sums are not float32 sums of 16-bit products (what
// mixed precision means here, and what the CPU emulates). On the H200, Find ranked Winograd
// first for a fp16 input gradient that then came out 1% (nine fp16 steps) off.
bool transforms_in_16_bits(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transforms_in_16_bits(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transforms_in_16_bits(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

template <typename Perf>
std::vector<Algo> candidates(const Perf* perf, int count, bool tf32, ComputePrecision p) {
  std::vector<Algo> out;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (p != ComputePrecision::FP32 && transforms_in_16_bits(perf[i].algo)) continue;
    if (perf[i].memory > conv_workspace_limit()) continue;
    if (!tf32 && (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                  perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
      continue;
    out.push_back({true, static_cast<int>(perf[i].algo), perf[i].memory, tf32 ? perf[i].mathType : CUDNN_FMA_MATH});
  }
  return out;
}

// Scratch memory from the caching allocator (returned to its cache when the call ends).
Tensor workspace_tensor(size_t bytes, Device device) {
  return bytes == 0 ? Tensor() : Tensor::empty({static_cast<int64_t>(bytes)}, DType::UInt8, device);
}
void* ptr_of(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// Chooses (or recalls) the algorithm of one direction. `x`, `w`, `y` are the direction's
// buffers (the output one is overwritten when timing with Find).
Algo choose(const Geometry& g, Direction dir, const Descriptors& d, const Tensor& x, const Tensor& w,
            const Tensor& y, ComputePrecision p) {
  // Tensor-core algorithms are always fine for 16-bit data: candidates() filters them out only for
  // float32 without TF32.
  const bool tf32 = allow_tf32() || p != ComputePrecision::FP32;
  const AlgoKey key = key_of(g, dir, allow_tf32(), p);
  {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) return it->second;
  }
  cudnnHandle_t h = cudnn_handle();
  std::vector<Algo> ranked;
  int returned = 0;
  // Find times the algorithms (set_conv_benchmark), which needs scratch up to the limit; the
  // block stays in the caching allocator after. Otherwise the heuristics rank them.
  const bool find = conv_benchmark();
  const size_t ws_bytes = conv_workspace_limit();
  Tensor ws = find ? workspace_tensor(ws_bytes, x.device()) : Tensor();
  switch (dir) {
    case Direction::Forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      MT_CUDNN_CHECK(find ? cudnnFindConvolutionForwardAlgorithmEx(
                                h, d.x, x.raw_data(), d.w, w.raw_data(), d.conv, d.y, y.raw_data(),
                                CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, ptr_of(ws), ws_bytes)
                          : cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      ranked = candidates(perf, returned, tf32, p);
      break;
    }
    case Direction::BackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      MT_CUDNN_CHECK(find ? cudnnFindConvolutionBackwardDataAlgorithmEx(
                                h, d.w, w.raw_data(), d.y, y.raw_data(), d.conv, d.x, x.raw_data(),
                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf, ptr_of(ws), ws_bytes)
                          : cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perf));
      ranked = candidates(perf, returned, tf32, p);
      break;
    }
    case Direction::BackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      MT_CUDNN_CHECK(find ? cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                h, d.x, x.raw_data(), d.y, y.raw_data(), d.conv, d.w, w.raw_data(),
                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf, ptr_of(ws), ws_bytes)
                          : cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, perf));
      ranked = candidates(perf, returned, tf32, p);
      break;
    }
  }
  // The first candidate whose scratch cuDNN reports under the math type it will run with (the
  // ranking's figure can be for another) and that still fits. None (every result failed, needs
  // more than the workspace limit, is TF32 where TF32 is off, or has no kernel under FMA math):
  // the caller takes the im2col path, which is always available.
  Algo chosen;
  for (Algo a : ranked) {
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, a.math));
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (dir) {
      case Direction::Forward:
        st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), &a.workspace);
        break;
      case Direction::BackwardData:
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), &a.workspace);
        break;
      case Direction::BackwardFilter:
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), &a.workspace);
        break;
    }
    if (st == CUDNN_STATUS_SUCCESS && a.workspace <= conv_workspace_limit()) {
      chosen = a;
      break;
    }
  }
  // MT_CUDNN_LOG=1: one line per shape and direction, to see what cuDNN chose and why a result
  // differs or runs slowly (cuDNN's own CUDNN_LOGLEVEL_DBG logs every call, far more).
  static const bool log = std::getenv("MT_CUDNN_LOG") != nullptr;
  if (log)
    std::fprintf(stderr, "mt cudnn: %s x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] stride %lld pad %lld %s%s: %s\n",
                 dir == Direction::Forward ? "forward" : dir == Direction::BackwardData ? "backward-data" : "backward-filter",
                 (long long)g.n, (long long)g.c, (long long)g.h, (long long)g.w, (long long)g.o, (long long)g.c,
                 (long long)g.kh, (long long)g.kw, (long long)g.stride, (long long)g.pad,
                 compute_precision_name(p), conv_benchmark() ? " (searched)" : "",
                 chosen.found ? ("algo " + std::to_string(chosen.algo) + " math " + std::to_string(chosen.math) +
                                 " workspace " + std::to_string(chosen.workspace) + " of " +
                                 std::to_string(ranked.size()) + " candidates").c_str()
                              : "none fits: im2col");
  std::lock_guard<std::mutex> lock(g_algo_mu);
  algo_cache()[key] = chosen;
  return chosen;
}

// x, w, y (and gy, gx, gw below) hold storage_dtype(p) elements, contiguous.
// Runs one direction on its buffers (x, w, y as in choose(): the output among them is
// overwritten); false when no algorithm fits and the caller runs the im2col path instead.
bool cudnn_run(const Geometry& g, Direction dir, const Descriptors& d, const Tensor& x, const Tensor& w,
               const Tensor& y, ComputePrecision p) {
  const Algo a = choose(g, dir, d, x, w, y, p);
  if (!a.found) return false;
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, a.math));
  Tensor ws = workspace_tensor(a.workspace, x.device());
  const float one = 1.0f, zero = 0.0f;
  cudnnHandle_t h = cudnn_handle();
  switch (dir) {
    case Direction::Forward:
      MT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x, x.raw_data(), d.w, w.raw_data(), d.conv,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ptr_of(ws),
                                             a.workspace, &zero, d.y, y.raw_data()));
      break;
    case Direction::BackwardData:  // x is dx, y is dy
      MT_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w, w.raw_data(), d.y, y.raw_data(), d.conv,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo), ptr_of(ws),
                                                  a.workspace, &zero, d.x, x.raw_data()));
      break;
    case Direction::BackwardFilter:  // w is dw, y is dy
      MT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x, x.raw_data(), d.y, y.raw_data(), d.conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
                                                    ptr_of(ws), a.workspace, &zero, d.w, w.raw_data()));
      break;
  }
  return true;
}

bool cudnn_forward(const Geometry& g, const Tensor& x, const Tensor& w, Tensor& y, ComputePrecision p) {
  return cudnn_run(g, Direction::Forward, Descriptors(g, allow_tf32(), p), x, w, y, p);
}

// Computes what it can of dx and dw; says which in gx_done and gw_done (the im2col path does the rest).
void cudnn_backward(const Geometry& g, const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                    Tensor& gw, ComputePrecision p, bool& gx_done, bool& gw_done) {
  const Descriptors d(g, allow_tf32(), p);
  gx_done = gx.defined() && cudnn_run(g, Direction::BackwardData, d, gx, w, gy, p);
  gw_done = gw.defined() && cudnn_run(g, Direction::BackwardFilter, d, x, gw, gy, p);
}

#endif  // MT_WITH_CUDNN

// An empty 16-bit twin of a float32 output (undefined stays undefined: not requested).
Tensor reduced_like(const Tensor& t, ComputePrecision p) {
  return t.defined() ? Tensor::empty(t.shape(), storage_dtype(p), t.device()) : Tensor();
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, Tensor& y) {
  const Geometry g = geometry(x, w, y, stride, padding);
  if (y.numel() == 0) return;
  const ComputePrecision p = compute_precision();
#ifdef MT_WITH_CUDNN
  if (use_cudnn() && x.numel() > 0 && w.numel() > 0) {
    bool done = false;
    if (p == ComputePrecision::FP32) {
      done = cudnn_forward(g, x, w, y, p);
    } else {
      Tensor yh = reduced_like(y, p);
      done = cudnn_forward(g, to_reduced(x, p), to_reduced(w, p), yh, p);
      if (done) from_reduced(yh, y);
    }
    if (done) {
      bias_forward(g, bias, y);
      return;
    }
  }
#endif
  if (p == ComputePrecision::FP32) {
    gemm_conv_forward(g, x, w, y);
  } else {
    gemm_conv_forward(g, rounded_copy(x, p), rounded_copy(w, p), y);
    round_in_place(y, p);
  }
  bias_forward(g, bias, y);
}

void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride,
                     int64_t padding, Tensor& gx, Tensor& gw, Tensor& gb) {
  const Geometry g = geometry(x, w, gy, stride, padding);
  if (gb.defined()) bias_backward(g, gy, gb);  // float32 dy in every precision
  const ComputePrecision p = compute_precision();
  // What cuDNN leaves (no algorithm fits) the im2col path computes: gx_left and gw_left.
  Tensor gx_left = gx, gw_left = gw;
#ifdef MT_WITH_CUDNN
  if (use_cudnn() && x.numel() > 0 && w.numel() > 0 && gy.numel() > 0) {
    bool gx_done = false, gw_done = false;
    if (p == ComputePrecision::FP32) {
      cudnn_backward(g, x, w, gy, gx, gw, p, gx_done, gw_done);
    } else if (gx.defined() || gw.defined()) {
      // dx reads w and dy, dw reads x and dy: cast only what the requested passes use
      // (cudnn_backward touches x's data only for dw and w's only for dx).
      Tensor gxh = reduced_like(gx, p), gwh = reduced_like(gw, p);
      const Tensor xh = gw.defined() ? to_reduced(x, p) : x;
      const Tensor wh = gx.defined() ? to_reduced(w, p) : w;
      cudnn_backward(g, xh, wh, to_reduced(gy, p), gxh, gwh, p, gx_done, gw_done);
      if (gx_done) from_reduced(gxh, gx);
      if (gw_done) from_reduced(gwh, gw);
    }
    if (gx_done) gx_left = Tensor();
    if (gw_done) gw_left = Tensor();
  }
#endif
  if (!gx_left.defined() && !gw_left.defined()) return;
  if (p == ComputePrecision::FP32) return gemm_conv_backward(g, x, w, gy, gx_left, gw_left);
  gemm_conv_backward(g, gw_left.defined() ? rounded_copy(x, p) : x, gx_left.defined() ? rounded_copy(w, p) : w,
                     rounded_copy(gy, p), gx_left, gw_left);
  if (gx_left.defined()) round_in_place(gx_left, p);
  if (gw_left.defined()) round_in_place(gw_left, p);
}

}  // namespace mt::core::cuda
