#include "dist/comm/gloo_process_group.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "core/error.h"
#include "core/precision.h"
#include "dist/comm/silent_ranks.h"

namespace mt::dist {

namespace {

// Our Store seen as Gloo's: Gloo uses char bytes and a wait() that may carry a timeout; ours
// always uses the store's own timeout (which is the process group's).
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const auto v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    store_->wait(keys);
  }

 private:
  std::shared_ptr<dist::Store> store_;
};

// Our reduce_scatter's slots; Gloo's own prefixes are 0x01..0x08 (gloo/types.h).
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
// send/recv's slots: the caller's tag, apart from every collective's.
constexpr uint8_t kPointToPointSlotPrefix = 0x41;

// A posted send or recv: wait() is Gloo's waitSend/waitRecv with the group's timeout. The
// tensor is held until then, so its memory outlives the message.
class PointToPointWork : public Work {
 public:
  PointToPointWork(std::unique_ptr<gloo::transport::UnboundBuffer> buffer, Tensor tensor, bool is_send,
                   std::string what, std::chrono::milliseconds timeout)
      : buffer_(std::move(buffer)), tensor_(std::move(tensor)), is_send_(is_send), what_(std::move(what)),
        timeout_(timeout) {}
  void wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    MT_CHECK(error_.empty(), error_);
    if (!buffer_) {  // nothing to move
      done_ = true;
      return;
    }
    try {
      const bool ok = is_send_ ? buffer_->waitSend(timeout_) : buffer_->waitRecv(timeout_);
      if (!ok) error_ = what_ + " was aborted";
    } catch (const gloo::IoException& e) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g s", static_cast<double>(timeout_.count()) / 1000.0);
      error_ = what_ + ": Gloo I/O error (the peer is gone, or nothing came within the " + limit + " timeout): " +
               e.what();
    } catch (const gloo::Exception& e) {
      error_ = what_ + ": Gloo error: " + e.what();
    }
    MT_CHECK(error_.empty(), error_);
    done_ = true;
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  Tensor tensor_;
  bool is_send_;
  std::string what_;
  std::chrono::milliseconds timeout_;
  bool done_ = false;
  std::string error_;  // a failed wait fails again the same way
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return &gloo::sum<T>;
    case ReduceOp::Max: return &gloo::max<T>;
    case ReduceOp::Min: return &gloo::min<T>;
  }
  return &gloo::sum<T>;
}

// Gloo has no bfloat16: each pair is widened to float32, combined and rounded back to nearest
// even (core/precision.h), as NCCL does.
template <ReduceOp Op>
void bf16_reduce(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) {
    const float u = core::bf16_bits_to_float(x[i]), v = core::bf16_bits_to_float(y[i]);
    const float w = Op == ReduceOp::Sum ? u + v : Op == ReduceOp::Max ? std::max(u, v) : std::min(u, v);
    out[i] = core::float_to_bf16_bits(w);
  }
}

// `who` and `name` name the collective when the dtype cannot be reduced.
ReduceFn reduce_fn(core::DType dtype, ReduceOp op, const std::string& who, const std::string& name) {
  switch (dtype) {
    case core::DType::Float32: return reduce_fn<float>(op);
    case core::DType::Int64: return reduce_fn<int64_t>(op);
    // FP16 gradient compression (compressor_fp16.cpp) sums halves.
    case core::DType::Float16: return reduce_fn<gloo::float16>(op);
    // The bf16 hook (dist/ssgd/comm_hook.h) sums bfloat16.
    case core::DType::BFloat16:
      return op == ReduceOp::Sum ? &bf16_reduce<ReduceOp::Sum>
           : op == ReduceOp::Max ? &bf16_reduce<ReduceOp::Max> : &bf16_reduce<ReduceOp::Min>;
    default:
      MT_FAIL(who, ": ", name, ": dtype ", core::dtype_name(dtype),
              " cannot be reduced (float32, int64, float16 and bfloat16 can)");
  }
}

const char* op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : op == ReduceOp::Max ? "max" : "min"; }

std::shared_ptr<gloo::transport::Device> make_device(const ProcessGroupOptions& o, int rank) {
  if (o.transport == "tcp") {
    gloo::transport::tcp::attr attr;
    if (!o.interface.empty()) attr.iface = o.interface;
    else if (!o.hostname.empty()) attr.hostname = o.hostname;
    try {
      return gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      MT_FAIL("rank ", rank, ": cannot open Gloo's tcp transport on ",
              o.interface.empty() ? "host \"" + (o.hostname.empty() ? std::string("<this host's name>") : o.hostname) + "\""
                                  : "interface \"" + o.interface + "\"",
              ": ", e.what(), ". Set the interface (process group option `interface`, e.g. eth0) "
              "or make this host's name resolve to a reachable address");
    }
  }
  if (o.transport == "ibverbs") {
    // Ask libibverbs ourselves first: Gloo's own lookup aborts or throws cryptic errors when
    // the kernel has no RDMA support at all.
    int count = 0;
    ibv_device** list = ibv_get_device_list(&count);
    const std::string name = list != nullptr && count > 0 ? ibv_get_device_name(list[0]) : "";  // the first
    if (list != nullptr) ibv_free_device_list(list);
    MT_CHECK(!name.empty(), "rank ", rank, ": no ibverbs device found: use transport tcp, or install "
             "an RDMA NIC with its driver and rdma-core (`ibv_devices` lists what the kernel sees)");
    gloo::transport::ibverbs::attr attr{name, 1, 0};
    try {
      return gloo::transport::ibverbs::CreateDevice(attr);
    } catch (const std::exception& e) {
      MT_FAIL("rank ", rank, ": cannot open ibverbs device \"", name, "\": ", e.what(),
              ". Use transport tcp, or check the port state with `ibv_devinfo`");
    }
  }
  MT_FAIL("rank ", rank, ": unknown Gloo transport \"", o.transport, "\"; use \"tcp\" or \"ibverbs\"");
}

// A tensor checked for a CPU collective.
void check_cpu(const Tensor& t, const std::string& who, const std::string& op, const char* what) {
  MT_CHECK(t.defined(), who, ": ", op, ": the ", what, " tensor is undefined");
  MT_CHECK(!t.is_cuda(), who, ": ", op, ": the ", what, " tensor is on ", t.device().str(),
           "; the gloo backend takes CPU tensors (use backend \"nccl\" for CUDA tensors)");
  MT_CHECK(t.is_contiguous(), who, ": ", op, ": the ", what, " tensor must be contiguous (call .contiguous())");
}

// An input and an output tensor checked for a CPU collective from one into the other.
void check_cpu_pair(const Tensor& input, const Tensor& output, const std::string& who, const std::string& op) {
  check_cpu(input, who, op, "input");
  check_cpu(output, who, op, "output");
  MT_CHECK(input.dtype() == output.dtype(), who, ": ", op, ": output dtype ", core::dtype_name(output.dtype()),
           " differs from the input's");
}

// A Gloo call that gave up waiting for a peer (not one that lost it): issue() then names the
// ranks that did not answer.
struct CollectiveTimeout : core::Error {
  using core::Error::Error;
};

// Runs one Gloo call, turning Gloo's exceptions (peer gone, timeout) into text for the Work.
template <typename F>
void gloo_call(F&& f) {
  try {
    f();
  } catch (const gloo::IoException& e) {
    const std::string what = e.what();
    if (what.find("Timed out") != std::string::npos) throw CollectiveTimeout("Gloo: " + what);
    throw core::Error("Gloo I/O error (peer gone or timed out): " + what);
  } catch (const gloo::Exception& e) {
    throw core::Error(std::string("Gloo error: ") + e.what());
  }
}

// Ring reduce-scatter: after step s (0..N-2) rank r has reduced block (r - s - 2) mod N with
// its left neighbour's partial sum; after N-1 steps block r holds everyone's sum.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& ctx, const void* input, void* output,
                         size_t block_bytes, size_t elem, ReduceFn reduce, uint32_t tag,
                         std::chrono::milliseconds timeout) {
  const int n = ctx->size;
  const int r = ctx->rank;
  if (n == 1 || block_bytes == 0) {
    if (block_bytes) std::memcpy(output, input, block_bytes);
    return;
  }
  std::vector<char> acc(static_cast<const char*>(input), static_cast<const char*>(input) + block_bytes * n);
  std::vector<char> incoming(block_bytes);
  auto acc_buf = ctx->createUnboundBuffer(acc.data(), acc.size());
  auto in_buf = ctx->createUnboundBuffer(incoming.data(), incoming.size());
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_block = static_cast<size_t>((r - s - 1 + 2 * n) % n);
    const size_t recv_block = static_cast<size_t>((r - s - 2 + 2 * n) % n);
    acc_buf->send(right, slot, send_block * block_bytes, block_bytes);
    in_buf->recv(left, slot, 0, block_bytes);
    if (!in_buf->waitRecv(timeout)) throw core::Error("reduce_scatter receive aborted");
    char* dst = acc.data() + recv_block * block_bytes;
    reduce(dst, dst, incoming.data(), block_bytes / elem);
    if (!acc_buf->waitSend(timeout)) throw core::Error("reduce_scatter send aborted");
  }
  std::memcpy(output, acc.data() + static_cast<size_t>(r) * block_bytes, block_bytes);
}

}  // namespace

struct GlooProcessGroup::Shared {
  std::shared_ptr<Store> store;
  std::unique_ptr<GlooStoreAdapter> adapter;
  ProcessGroupOptions options;
  std::shared_ptr<gloo::transport::Device> device;
  int world_size = 0;
};

std::shared_ptr<GlooProcessGroup> GlooProcessGroup::create(std::shared_ptr<Store> store, int rank, int size,
                                                           const ProcessGroupOptions& options) {
  MT_CHECK(store != nullptr, "create_process_group: no store");
  MT_CHECK(size >= 1 && rank >= 0 && rank < size, "create_process_group: rank ", rank,
           " is outside the world of ", size);
  auto shared = std::make_shared<Shared>();
  shared->store = store;
  shared->adapter = std::make_unique<GlooStoreAdapter>(store);
  shared->options = options;
  shared->device = make_device(options, rank);
  shared->world_size = size;
  // Each world group of a process gets a fresh key prefix: every rank creates its world
  // groups in the same order, so the counters agree, and a second group never reads the
  // first one's addresses.
  static std::atomic<int> generation{0};
  const std::string prefix = "gloo/world/" + std::to_string(generation++);
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  return std::shared_ptr<GlooProcessGroup>(new GlooProcessGroup(shared, prefix, rank, ranks));
}

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Shared> shared, std::string prefix, int rank,
                                   std::vector<int> world_ranks)
    : shared_(std::move(shared)),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(static_cast<int>(world_ranks.size())),
      world_ranks_(std::move(world_ranks)) {
  const auto& o = shared_->options;
  if (size_ == shared_->world_size) {
    description_ = "gloo/" + o.transport + " world of " + std::to_string(size_);
  } else {
    description_ = "gloo/" + o.transport + " group {" + join_ranks(world_ranks_) + "} of world " +
                   std::to_string(shared_->world_size);
  }
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  ctx->setTimeout(o.timeout);
  gloo::rendezvous::PrefixStore store(prefix_, *shared_->adapter);
  try {
    ctx->connectFullMesh(store, shared_->device);
  } catch (const core::Error& e) {
    MT_FAIL(who(), ": connecting the group failed: ", e.what());
  } catch (const std::exception& e) {
    MT_FAIL(who(), ": connecting the group failed (Gloo: ", e.what(),
            "); check that every rank started and can reach the others' addresses");
  }
  context_ = ctx;
  queue_ = std::make_unique<CommQueue>(who(), o.timeout);
}

GlooProcessGroup::~GlooProcessGroup() = default;

std::string GlooProcessGroup::who() const { return "rank " + std::to_string(rank_) + " of " + description_; }

std::shared_ptr<Work> GlooProcessGroup::issue(std::string op, std::function<void(uint32_t)> run) {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  const uint32_t tag = tag_++;
  // On a timeout, the roll call of silent_ranks.h: the error names who did not answer, rather
  // than leaving the blame on whichever rank times out and exits first.
  const auto timeout = shared_->options.timeout;
  const auto window = std::min(kMaxRollCall, std::chrono::duration_cast<std::chrono::milliseconds>(timeout / 2));
  return queue_->enqueue(std::move(op), [run = std::move(run), tag, shared = shared_, prefix = prefix_,
                                         me = rank_, members = world_ranks_, timeout, window] {
    try {
      run(tag);
    } catch (const CollectiveTimeout& e) {
      const std::string who = name_silent_ranks(*shared->store, prefix, me, members, window);
      throw core::Error("timed out after " + seconds_number(timeout) + " s waiting for a peer" + (who.empty() ? "" : "; " + who) + " (" + e.what() + ")");
    }
  });
}

std::shared_ptr<Work> GlooProcessGroup::allreduce(Tensor& tensor, ReduceOp op) {
  const std::string name = std::string("allreduce(") + op_name(op) + ") of " + tensor.str();
  check_cpu(tensor, who(), name, "input");
  const ReduceFn fn = reduce_fn(tensor.dtype(), op, who(), name);
  auto ctx = context_;
  const auto timeout = shared_->options.timeout;
  return issue(name, [ctx, tensor, fn, timeout](uint32_t tag) {
    if (tensor.numel() == 0) return;
    gloo::AllreduceOptions opts(ctx);
    // In place: only an output buffer, which Gloo reads and overwrites.
    const size_t n = static_cast<size_t>(tensor.numel());
    if (tensor.dtype() == core::DType::Float32) opts.setOutput(tensor.data<float>(), n);
    else if (tensor.dtype() == core::DType::Int64) opts.setOutput(tensor.data<int64_t>(), n);
    else opts.setOutput(static_cast<gloo::float16*>(tensor.raw_data()), n);  // any 16-bit float
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo_call([&] { gloo::allreduce(opts); });
  });
}

// Broadcast, allgather and allgatherv move bytes without looking at them, so any dtype works:
// the buffers are described to Gloo as bytes.
std::shared_ptr<Work> GlooProcessGroup::broadcast(Tensor& tensor, int root) {
  const std::string name = "broadcast from rank " + std::to_string(root) + " of " + tensor.str();
  check_cpu(tensor, who(), name, "input");
  MT_CHECK(root >= 0 && root < size_, who(), ": ", name, ": root ", root, " is outside the group of ", size_);
  auto ctx = context_;
  const auto timeout = shared_->options.timeout;
  return issue(name, [ctx, tensor, root, timeout](uint32_t tag) {
    if (tensor.numel() == 0 || ctx->size == 1) return;
    gloo::BroadcastOptions opts(ctx);
    opts.setOutput(static_cast<uint8_t*>(tensor.raw_data()), tensor.nbytes());
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo_call([&] { gloo::broadcast(opts); });
  });
}

std::shared_ptr<Work> GlooProcessGroup::allgather(const Tensor& input, Tensor& output) {
  const std::string name = "allgather of " + input.str();
  check_cpu_pair(input, output, who(), name);
  MT_CHECK(output.numel() == input.numel() * size_, who(), ": ", name, ": output holds ", output.numel(),
           " elements, expected ", size_, " x ", input.numel(), " = ", input.numel() * size_);
  // An allgather is an allgatherv with equal counts.
  return allgatherv(input, output, std::vector<int64_t>(static_cast<size_t>(size_), input.numel()));
}

std::shared_ptr<Work> GlooProcessGroup::allgatherv(const Tensor& input, Tensor& output,
                                                   const std::vector<int64_t>& counts) {
  const std::string name = "allgatherv of " + input.str();
  check_cpu_pair(input, output, who(), name);
  MT_CHECK(static_cast<int>(counts.size()) == size_, who(), ": ", name, ": ", counts.size(),
           " counts given, one per rank (", size_, ") expected");
  int64_t total = 0;
  for (const int64_t c : counts) {
    MT_CHECK(c >= 0, who(), ": ", name, ": negative count ", c);
    total += c;
  }
  MT_CHECK(counts[static_cast<size_t>(rank_)] == input.numel(), who(), ": ", name, ": counts[", rank_,
           "] = ", counts[static_cast<size_t>(rank_)], " but this rank's input holds ", input.numel());
  MT_CHECK(output.numel() == total, who(), ": ", name, ": output holds ", output.numel(),
           " elements, the counts sum to ", total);
  const size_t elem = core::element_size(input.dtype());
  std::vector<size_t> bytes;
  for (const int64_t c : counts) bytes.push_back(static_cast<size_t>(c) * elem);
  auto ctx = context_;
  const auto timeout = shared_->options.timeout;
  return issue(name, [ctx, input, output, bytes, total, timeout](uint32_t tag) {
    if (total == 0) return;
    if (ctx->size == 1) {
      std::memcpy(output.raw_data(), input.raw_data(), input.nbytes());
      return;
    }
    gloo::AllgathervOptions opts(ctx);
    opts.setInput(static_cast<uint8_t*>(input.raw_data()), input.nbytes());
    opts.setOutput(static_cast<uint8_t*>(output.raw_data()), bytes);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo_call([&] { gloo::allgatherv(opts); });
  });
}

std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(const Tensor& input, Tensor& output) {
  const std::string name = "reduce_scatter(sum) of " + input.str();
  check_cpu_pair(input, output, who(), name);
  MT_CHECK(input.numel() == output.numel() * size_, who(), ": ", name, ": input holds ", input.numel(),
           " elements, expected ", size_, " x the output's ", output.numel());
  const ReduceFn fn = reduce_fn(input.dtype(), ReduceOp::Sum, who(), name);
  auto ctx = context_;
  const auto timeout = shared_->options.timeout;
  return issue(name, [ctx, input, output, fn, timeout](uint32_t tag) {
    gloo_call([&] {
      ring_reduce_scatter(ctx, input.raw_data(), output.raw_data(), output.nbytes(),
                          core::element_size(input.dtype()), fn, tag, timeout);
    });
  });
}

void GlooProcessGroup::barrier() {
  auto ctx = context_;
  const auto timeout = shared_->options.timeout;
  issue("barrier", [ctx, timeout](uint32_t tag) {
    if (ctx->size == 1) return;
    gloo::BarrierOptions opts(ctx);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo_call([&] { gloo::barrier(opts); });
  })->wait();
}

std::shared_ptr<Work> GlooProcessGroup::send(const Tensor& tensor, int peer, uint32_t tag) {
  return point_to_point(tensor, peer, tag, /*sending=*/true);
}

std::shared_ptr<Work> GlooProcessGroup::recv(Tensor& tensor, int peer, uint32_t tag) {
  return point_to_point(tensor, peer, tag, /*sending=*/false);
}

// A send or a receive posted at once on its own slot (kPointToPointSlotPrefix + tag): a pending
// receive never holds up a later send, and the Work waits with the group's timeout.
std::shared_ptr<Work> GlooProcessGroup::point_to_point(const Tensor& tensor, int peer, uint32_t tag, bool sending) {
  const std::string name = std::string(sending ? "send of " : "recv of ") + tensor.str() +
                           (sending ? " to rank " : " from rank ") + std::to_string(peer) + " (tag " +
                           std::to_string(tag) + ")";
  check_cpu(tensor, who(), name, sending ? "input" : "output");
  MT_CHECK(peer >= 0 && peer < size_ && peer != rank_, who(), ": ", name, ": the peer must be another rank of "
           "the group of ", size_);
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  if (tensor.nbytes() > 0) {
    buffer = context_->createUnboundBuffer(tensor.raw_data(), tensor.nbytes());
    const auto slot = gloo::Slot::build(kPointToPointSlotPrefix, tag);
    try {
      gloo_call([&] { sending ? buffer->send(peer, slot) : buffer->recv(peer, slot); });
    } catch (const core::Error& e) {
      MT_FAIL(who(), ": ", name, ": ", e.what());  // the pair broke earlier: the peer is gone
    }
  }
  return std::make_shared<PointToPointWork>(std::move(buffer), tensor, sending, who() + ": " + name,
                                            shared_->options.timeout);
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::subgroup(const std::vector<int>& ranks) {
  return subgroups_.get(ranks, rank_, world_ranks_, prefix_, who(), [this](const std::string& prefix, int rank,
                                                                          std::vector<int> world) {
    return std::shared_ptr<GlooProcessGroup>(new GlooProcessGroup(shared_, prefix, rank, std::move(world)));
  });
}

void GlooProcessGroup::release_subgroup(const std::vector<int>& ranks) { subgroups_.release(ranks); }

}  // namespace mt::dist
