// Convolution through oneDNN's primitives, in the builds that find it (MT_WITH_DNNL).
//
// Activations come channels-last (NHWC, core/memory_format.h) from the convolution op, and the
// primitives are made for NHWC: oneDNN has kernels that read and write it directly, about as
// fast as on its channel-blocked layouts, so no activation is reordered. Contiguous (NCHW) operands still
// work: an NCHW batch of images into the first layer, or everything under a 16-bit compute
// precision; then oneDNN picks the layout it wants (format_tag::any: a blocked layout such as
// nChw16c) and reorders convert around the call, as PyTorch's CPU convolution does on NCHW.
// Weights stay OIHW in our tensors and are reordered into oneDNN's blocked layout each call.
// Wide 3x3 stride-1 convolutions (ResNet-50's, from 64 channels) run oneDNN's Winograd kernels
// instead (winograd_pays below): their products are a quarter of the direct kernels' (the input
// and output transforms cost extra; measured, about half the time), and their blocked layout costs
// a reorder each way, far less than that saves.
// oneDNN JIT-compiles its kernels for the CPU it runs on, which is why it is faster than im2col +
// OpenBLAS: Debian's OpenBLAS 0.3.21 does not know newer AMD cores and runs its AVX2 kernels there.
//
// Creating a primitive costs far more than running it, so every primitive (and reorder) is
// made once per shape and kept; the reordered copies and oneDNN's scratchpad live in per-thread
// buffers that only grow, so a training step makes no large allocation, and threads that train
// side by side (ranks as threads in the tests) share only the immutable primitives. oneDNN runs
// on the same OpenMP runtime as our kernels (both libgomp) and takes omp_get_max_threads().
#ifdef MT_WITH_DNNL
#include "core/kernels/cpu/conv_dnnl.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include <dnnl.hpp>

#include "core/error.h"
#include "core/kernels/cpu/conv.h"
#include "core/memory_format.h"
#include "core/op_profile.h"

namespace mt::core::cpu::dnnl_conv {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The shape of one convolution: input, weight, stride, padding, whether it has a bias; the
// formats of x (and dx) and of y (and dy), true for channels-last.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

struct Formats {
  bool src_cl, dst_cl;
};

Key key_of(const Tensor& x, const Tensor& w, int64_t stride, int64_t pad, bool bias, Formats f) {
  return {x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[2], w.shape()[3],
          stride, pad, bias, f.src_cl, f.dst_cl};
}

// Whether oneDNN's Winograd kernels (F(4x4, 3x3): 6x6 input tiles give 4x4 outputs) beat its
// direct ones on this shape. They work on 3x3 stride-1 convolutions with channels in blocks of
// 16, and pay when the channels are wide enough for the transformed products to be GEMMs worth
// blocking, and there are enough 4x4 output tiles (over the batch) to keep the cores busy; for
// ResNet-20's narrow layers and a batch of 8 at 7x7 the direct kernels win (docs/PERF.md).
bool winograd_pays(const Tensor& x, const Tensor& w, int64_t stride, int64_t pad) {
  const int64_t n = x.shape()[0], c = x.shape()[1], o = w.shape()[0];
  if (w.shape()[2] != 3 || w.shape()[3] != 3 || stride != 1 || pad != 1) return false;
  if (c % 16 != 0 || o % 16 != 0 || c < 64 || o < 64) return false;
  const int64_t tiles = n * ((x.shape()[2] + 3) / 4) * ((x.shape()[3] + 3) / 4);
  return tiles >= 128;
}

memory::dims dims_of(const Tensor& t) { return {t.shape().begin(), t.shape().end()}; }

// Buffers for the reordered copies, by role; they grow to the largest layer and are reused.
// Tensors, for the CPU allocator's 64-byte alignment: some kernels (Winograd's) store whole
// cache lines with aligned instructions.
enum Slot { kSrc, kWeights, kDst, kDiffSrc, kDiffWeights, kDiffDst, kScratchpad, kUnwanted, kSlots };
void* buffer(Slot slot, size_t bytes) {
  thread_local Tensor buffers[kSlots];
  Tensor& b = buffers[slot];
  const auto floats = static_cast<int64_t>(bytes / sizeof(float) + 1);
  if (!b.defined() || b.numel() < floats) b = Tensor::empty({floats}, DType::Float32);
  return b.data<float>();
}

// A tensor given to oneDNN in our layout, and the memory the primitive wants: the same one
// when the layouts agree, else a buffer and a reorder made once.
struct Operand {
  memory::desc want;
  memory::desc plain;
  std::unique_ptr<dnnl::reorder> to_want, to_plain;

  Operand(const memory::desc& want_desc, const memory::desc& plain_desc)
      : want(want_desc), plain(plain_desc) {
    if (want == plain) return;
    to_want = std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(engine(), plain, engine(), want));
    to_plain = std::make_unique<dnnl::reorder>(dnnl::reorder::primitive_desc(engine(), want, engine(), plain));
  }
  // The memory the primitive reads, holding `data` (reordered into `slot` when needed).
  memory input(dnnl::stream& s, const float* data, Slot slot) const {
    memory user(plain, engine(), const_cast<float*>(data));
    if (!to_want) return user;
    memory m(want, engine(), buffer(slot, want.get_size()));
    ProfileScope scope("conv2d_reorder");
    to_want->execute(s, user, m);
    return m;
  }
  // The memory the primitive writes; finish() brings it into `data`.
  memory output(float* data, Slot slot) const {
    if (!to_want) return memory(plain, engine(), data);
    return memory(want, engine(), buffer(slot, want.get_size()));
  }
  void finish(dnnl::stream& s, memory& m, float* data) const {
    if (!to_plain) return;
    memory user(plain, engine(), data);
    ProfileScope scope("conv2d_reorder");
    to_plain->execute(s, m, user);
  }
};

// Primitives keep no scratchpad of their own (the caller passes one), so one primitive can run
// on several threads at once.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

template <typename PrimitiveDesc>
void add_scratchpad(const PrimitiveDesc& pd, std::unordered_map<int, memory>& args) {
  const memory::desc d = pd.scratchpad_desc();
  if (d.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = memory(d, engine(), buffer(kScratchpad, d.get_size()));
}

struct Plan {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  std::unique_ptr<dnnl::convolution_forward> fwd;
  std::unique_ptr<dnnl::convolution_backward_data> bwd_data;
  std::unique_ptr<dnnl::convolution_backward_weights> bwd_weights;
  // Forward: src, weights, dst. Backward data: diff_dst, weights, diff_src. Backward weights:
  // src, diff_dst, diff_weights. Each with its own wanted layout.
  std::unique_ptr<Operand> f_src, f_w, f_dst, d_ddst, d_w, d_dsrc, w_src, w_ddst, w_dw;
};

std::unique_ptr<Plan> make_plan(const Tensor& x, const Tensor& w, int64_t stride, int64_t pad, bool bias, Formats f,
                                bool winograd) {
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;

  const int64_t n = x.shape()[0], o = w.shape()[0];
  const int64_t ho = (x.shape()[2] + 2 * pad - w.shape()[2]) / stride + 1;
  const int64_t wo = (x.shape()[3] + 2 * pad - w.shape()[3]) / stride + 1;
  const memory::dims src_dims = dims_of(x), w_dims = dims_of(w), dst_dims = {n, o, ho, wo};
  const memory::dims strides = {stride, stride}, padding = {pad, pad};
  // With a channels-last output the direct primitives work in NHWC (an NCHW input is reordered
  // into it); otherwise, and for Winograd (blocked layouts only), in the layout oneDNN prefers.
  const tag act = f.dst_cl && !winograd ? tag::nhwc : tag::any;
  const memory::desc src_any(src_dims, dt::f32, act), w_any(w_dims, dt::f32, tag::any),
      dst_any(dst_dims, dt::f32, act), bias_md({o}, dt::f32, tag::a);
  const memory::desc src_plain(src_dims, dt::f32, f.src_cl ? tag::nhwc : tag::nchw),
      w_plain(w_dims, dt::f32, tag::oihw), dst_plain(dst_dims, dt::f32, f.dst_cl ? tag::nhwc : tag::nchw);
  const auto algo = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;

  const auto fwd_desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_any, w_any,
                                                               bias_md, dst_any, strides, padding, padding)
                             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_any, w_any,
                                                               dst_any, strides, padding, padding);
  const dnnl::primitive_attr attr = user_scratchpad();
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, attr, engine());
  p.fwd = std::make_unique<dnnl::convolution_forward>(p.fwd_pd);
  p.f_src = std::make_unique<Operand>(p.fwd_pd.src_desc(), src_plain);
  p.f_w = std::make_unique<Operand>(p.fwd_pd.weights_desc(), w_plain);
  p.f_dst = std::make_unique<Operand>(p.fwd_pd.dst_desc(), dst_plain);

  p.data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algo, src_any, w_any, dst_any, strides, padding, padding), attr, engine(),
      p.fwd_pd);
  p.bwd_data = std::make_unique<dnnl::convolution_backward_data>(p.data_pd);
  p.d_ddst = std::make_unique<Operand>(p.data_pd.diff_dst_desc(), dst_plain);
  p.d_w = std::make_unique<Operand>(p.data_pd.weights_desc(), w_plain);
  p.d_dsrc = std::make_unique<Operand>(p.data_pd.diff_src_desc(), src_plain);

  const auto weights_desc =
      bias ? dnnl::convolution_backward_weights::desc(algo, src_any, w_any, bias_md, dst_any, strides, padding, padding)
           : dnnl::convolution_backward_weights::desc(algo, src_any, w_any, dst_any, strides, padding, padding);
  p.weights_pd = dnnl::convolution_backward_weights::primitive_desc(weights_desc, attr, engine(), p.fwd_pd);
  p.bwd_weights = std::make_unique<dnnl::convolution_backward_weights>(p.weights_pd);
  p.w_src = std::make_unique<Operand>(p.weights_pd.src_desc(), src_plain);
  p.w_ddst = std::make_unique<Operand>(p.weights_pd.diff_dst_desc(), dst_plain);
  p.w_dw = std::make_unique<Operand>(p.weights_pd.diff_weights_desc(), w_plain);
  return plan;
}

// The plan of a shape, made on its first call; null when oneDNN has no kernel for it (also
// remembered, so that it is asked once). Winograd where it pays, else, or when oneDNN has no
// Winograd kernel for a pass, direct.
const Plan* plan_for(const Tensor& x, const Tensor& w, int64_t stride, int64_t pad, bool bias, Formats f) {
  static std::map<Key, std::unique_ptr<Plan>> plans;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const Key key = key_of(x, w, stride, pad, bias, f);
  if (auto it = plans.find(key); it != plans.end()) return it->second.get();
  const bool winograd = winograd_pays(x, w, stride, pad);
  auto try_plan = [&](bool wino) -> std::unique_ptr<Plan> {
    try {
      return make_plan(x, w, stride, pad, bias, f, wino);
    } catch (const dnnl::error&) {
      return nullptr;
    }
  };
  std::unique_ptr<Plan> plan = try_plan(winograd);
  if (!plan && winograd) plan = try_plan(false);
  return (plans[key] = std::move(plan)).get();
}

}  // namespace

bool forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding, Tensor& y) {
  const Plan* plan = plan_for(x, w, stride, padding, bias.defined(), {is_channels_last(x), is_channels_last(y)});
  if (!plan) return false;
  const Plan& p = *plan;
  dnnl::stream s(engine());
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, p.f_src->input(s, x.data<float>(), kSrc)},
                                          {DNNL_ARG_WEIGHTS, p.f_w->input(s, w.data<float>(), kWeights)}};
  memory dst = p.f_dst->output(y.data<float>(), kDst);
  args[DNNL_ARG_DST] = dst;
  if (bias.defined()) {
    args[DNNL_ARG_BIAS] = memory({{w.shape()[0]}, dt::f32, tag::a}, engine(), const_cast<float*>(bias.data<float>()));
  }
  add_scratchpad(p.fwd_pd, args);
  ProfileScope scope("conv2d_forward_dnnl");
  p.fwd->execute(s, args);
  p.f_dst->finish(s, dst, y.data<float>());
  s.wait();
  return true;
}

bool backward(const Tensor& x, const Tensor& w, const Tensor& gy, int64_t stride, int64_t padding, Tensor& gx,
              Tensor& gw, Tensor& gb) {
  MT_CHECK(!gx.defined() || is_channels_last(gx) == is_channels_last(x),
           "conv2d backward: dx ", gx.str(), " must have the format of x ", x.str());
  const Plan* plan = plan_for(x, w, stride, padding, gb.defined(), {is_channels_last(x), is_channels_last(gy)});
  if (!plan) return false;
  const Plan& p = *plan;
  dnnl::stream s(engine());
  if (gw.defined() || gb.defined()) {
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, p.w_src->input(s, x.data<float>(), kSrc)},
                                            {DNNL_ARG_DIFF_DST, p.w_ddst->input(s, gy.data<float>(), kDiffDst)}};
    // The weight gradient is always computed with the bias's when asked: one pass over dy.
    float* gw_data = gw.defined() ? gw.data<float>()
                                  : static_cast<float*>(buffer(kUnwanted, w.numel() * sizeof(float)));
    memory dw = p.w_dw->output(gw_data, kDiffWeights);
    args[DNNL_ARG_DIFF_WEIGHTS] = dw;
    if (gb.defined()) args[DNNL_ARG_DIFF_BIAS] = memory({{w.shape()[0]}, dt::f32, tag::a}, engine(), gb.data<float>());
    add_scratchpad(p.weights_pd, args);
    ProfileScope scope("conv2d_backward_weights_dnnl");
    p.bwd_weights->execute(s, args);
    p.w_dw->finish(s, dw, gw_data);
  }
  if (gx.defined()) {
    // The same dy in the same wanted layout was reordered above for the weight gradient:
    // reuse that copy rather than reordering it again.
    const bool same = (gw.defined() || gb.defined()) && p.w_ddst->to_want && p.d_ddst->want == p.w_ddst->want;
    memory ddst = same ? memory(p.d_ddst->want, engine(), buffer(kDiffDst, p.d_ddst->want.get_size()))
                       : p.d_ddst->input(s, gy.data<float>(), kDiffDst);
    memory dsrc = p.d_dsrc->output(gx.data<float>(), kDiffSrc);
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, ddst},
                                            {DNNL_ARG_WEIGHTS, p.d_w->input(s, w.data<float>(), kWeights)},
                                            {DNNL_ARG_DIFF_SRC, dsrc}};
    add_scratchpad(p.data_pd, args);
    ProfileScope scope("conv2d_backward_data_dnnl");
    p.bwd_data->execute(s, args);
    p.d_dsrc->finish(s, dsrc, gx.data<float>());
  }
  s.wait();
  return true;
}

std::string kernel_names(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding, bool x_channels_last,
                         bool y_channels_last) {
  const Plan* p = plan_for(x, w, stride, padding, false, {x_channels_last, y_channels_last});
  if (!p) return "";
  return std::string(p->fwd_pd.impl_info_str()) + " " + p->data_pd.impl_info_str() + " " +
         p->weights_pd.impl_info_str();
}

}  // namespace mt::core::cpu::dnnl_conv
#endif  // MT_WITH_DNNL
