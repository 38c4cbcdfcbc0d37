#include "dist/comm/nccl_process_group.h"

#include <cstdio>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "core/cuda/cuda_memory.h"
#include "core/cuda/device_guard.h"
#include "core/error.h"

namespace mt::dist {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(core::DType t) {
  switch (t) {
    case core::DType::Float32: return ncclFloat32;
    case core::DType::Int64: return ncclInt64;
    case core::DType::Float16: return ncclFloat16;
    case core::DType::BFloat16: return ncclBfloat16;
    case core::DType::UInt8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace

struct NcclProcessGroup::Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  std::string who;
  std::mutex mutex;
  std::string broken;  // set once the communicator was aborted
  uint64_t issued = 0;  // collectives issued so far: each one's sequence number, for messages

  // A non-blocking communicator answers ncclInProgress until the call has been enqueued (or
  // the init finished); poll until done, aborting at the deadline so that nothing hangs.
  void settle(ncclResult_t r, const std::string& op, Clock::time_point deadline) {
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) abort_and_fail(op, "timed out");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm, &r);
    }
    if (r != ncclSuccess) abort_and_fail(op, ncclGetErrorString(r));
  }
  [[noreturn]] void abort_and_fail(const std::string& op, const std::string& why) {
    std::string msg = who + ": " + op + " failed: " + why +
                      "; the NCCL communicator was aborted (a peer probably died or hung)";
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (broken.empty()) {
        broken = msg;
        if (comm != nullptr) ncclCommAbort(comm);
        comm = nullptr;
      }
    }
    throw core::Error(msg);
  }
  void check_healthy(const std::string& op) {
    std::lock_guard<std::mutex> lock(mutex);
    MT_CHECK(broken.empty(), who, ": ", op, " not run: the group is broken by an earlier failure: ", broken);
  }
  ~Comm() {
    if (comm != nullptr) {
      // Finalize would wait for peers; destroy after our own stream has drained is enough. The
      // drain is bounded like every other wait: a collective stuck on a dead peer would keep
      // the stream busy forever, and then the communicator is aborted instead.
      const auto deadline = Clock::now() + timeout;
      cudaError_t e = cudaStreamQuery(stream);
      while (e == cudaErrorNotReady && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        e = cudaStreamQuery(stream);
      }
      if (e == cudaSuccess) {
        ncclCommDestroy(comm);
      } else {
        std::fprintf(stderr, "%s: the NCCL stream did not drain within %lld s at shutdown; aborting the communicator\n",
                     who.c_str(), static_cast<long long>(timeout.count() / 1000));
        ncclCommAbort(comm);
      }
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

namespace {

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclProcessGroup::Comm> comm, std::string op, cudaEvent_t done,
           std::vector<Tensor> keep)
      : comm_(std::move(comm)), op_(std::move(op)), done_(done), keep_(std::move(keep)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  bool is_completed() override { return cudaEventQuery(done_) == cudaSuccess; }

  // Polls the event; checks the communicator's asynchronous error while waiting and aborts it
  // at the timeout.
  void wait() override {
    const auto deadline = Clock::now() + comm_->timeout;
    while (true) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      MT_CHECK(e == cudaErrorNotReady, comm_->who, ": ", op_, ": CUDA error ", cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(comm_->mutex);
        MT_CHECK(comm_->broken.empty(), comm_->who, ": ", op_, " failed: ", comm_->broken);
        ncclCommGetAsyncError(comm_->comm, &async);
      }
      if (async != ncclSuccess && async != ncclInProgress) comm_->abort_and_fail(op_, ncclGetErrorString(async));
      if (Clock::now() > deadline) {
        comm_->abort_and_fail(op_, "did not finish within " + std::to_string(comm_->timeout.count() / 1000) + " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    keep_.clear();
  }

 private:
  std::shared_ptr<NcclProcessGroup::Comm> comm_;
  std::string op_;
  cudaEvent_t done_;
  std::vector<Tensor> keep_;  // the tensors stay alive until the collective has finished
};

void cuda_ok(cudaError_t e, const std::string& who, const std::string& what) {
  MT_CHECK(e == cudaSuccess, who, ": ", what, ": CUDA error ", cudaGetErrorString(e));
}

}  // namespace

std::shared_ptr<NcclProcessGroup> NcclProcessGroup::create(std::shared_ptr<Store> store, int rank, int size,
                                                           const ProcessGroupOptions& options) {
  MT_CHECK(size >= 1 && rank >= 0 && rank < size, "create_process_group(nccl): rank ", rank,
           " is outside the world of ", size);
  static std::atomic<int> generation{0};
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = i;
  return std::shared_ptr<NcclProcessGroup>(new NcclProcessGroup(
      std::move(store), options, "nccl/world/" + std::to_string(generation++), rank, ranks, size));
}

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, const ProcessGroupOptions& options,
                                   std::string prefix, int rank, std::vector<int> world_ranks, int world_size)
    : store_(std::move(store)),
      options_(options),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(static_cast<int>(world_ranks.size())),
      world_ranks_(std::move(world_ranks)),
      world_size_(world_size) {
  description_ = size_ == world_size_ ? "nccl world of " + std::to_string(size_)
                                      : "nccl group {" + join_ranks(world_ranks_) + "} of world " +
                                            std::to_string(world_size_);
  comm_ = std::make_shared<Comm>();
  comm_->who = who();
  comm_->timeout = options_.timeout;
  cuda_ok(cudaGetDevice(&comm_->device), who(), "cudaGetDevice");

  // The unique id travels through the store: rank 0 makes it, the others wait for it.
  ncclUniqueId id;
  const std::string key = prefix_ + "/unique_id";
  if (rank_ == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    MT_CHECK(r == ncclSuccess, who(), ": ncclGetUniqueId failed: ", ncclGetErrorString(r));
    const auto* b = reinterpret_cast<const uint8_t*>(&id);
    store_->set(key, std::vector<uint8_t>(b, b + sizeof(id)));
  } else {
    const auto v = store_->get(key);
    MT_CHECK(v.size() == sizeof(id), who(), ": the NCCL unique id in the store has ", v.size(),
             " bytes, expected ", sizeof(id), " (ranks built with different NCCL versions?)");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const auto deadline = Clock::now() + options_.timeout;
  const ncclResult_t r = ncclCommInitRankConfig(&comm_->comm, size_, id, rank_, &config);
  comm_->settle(r, "ncclCommInitRank", deadline);
  cuda_ok(cudaStreamCreateWithFlags(&comm_->stream, cudaStreamNonBlocking), who(), "cudaStreamCreate");
}

NcclProcessGroup::~NcclProcessGroup() = default;

core::Device NcclProcessGroup::device() const { return core::Device::cuda(comm_->device); }

std::string NcclProcessGroup::who() const { return "rank " + std::to_string(rank_) + " of " + description_; }

std::shared_ptr<Work> NcclProcessGroup::issue(const std::string& op, const std::vector<Tensor>& keep,
                                              const std::function<int()>& launch) {
  for (const auto& t : keep) {
    MT_CHECK(t.is_cuda(), who(), ": ", op, ": the tensor is on ", t.device().str(),
             "; the nccl backend takes CUDA tensors (use backend \"gloo\" for CPU tensors)");
    MT_CHECK(t.device().index == comm_->device, who(), ": ", op, ": the tensor is on ", t.device().str(),
             " but this group's communicator is on cuda:", comm_->device);
    MT_CHECK(t.is_contiguous(), who(), ": ", op, ": tensors must be contiguous");
  }
  // The caller may be another thread than the one that made the group (the hierarchical
  // allreduce's queue): its events and the default stream it orders after must be our GPU's.
  core::cuda::DeviceGuard on_our_device(comm_->device);
  std::lock_guard<std::mutex> lock(mutex_);
  comm_->check_healthy(op);
  // Every message about this collective names its sequence number: the ranks issue the same
  // collectives in the same order, so a rank stuck at #N shows where the others went on.
  const std::string numbered = op + " (collective #" + std::to_string(++comm_->issued) + ")";
  // Our kernels run on the default stream: the collective must start after them.
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  cuda_ok(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), who(), "cudaEventCreate");
  cuda_ok(cudaEventRecord(ready, 0), who(), "cudaEventRecord");
  cuda_ok(cudaStreamWaitEvent(comm_->stream, ready, 0), who(), "cudaStreamWaitEvent");
  cudaEventDestroy(ready);
  const auto deadline = Clock::now() + options_.timeout;
  comm_->settle(static_cast<ncclResult_t>(launch()), numbered, deadline);
  cuda_ok(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), who(), "cudaEventCreate");
  cuda_ok(cudaEventRecord(done, comm_->stream), who(), "cudaEventRecord");
  // The Work keeps the tensors alive until wait(); should it be dropped unwaited (an error
  // path), the allocator still keeps their blocks until our stream is done with them.
  for (const auto& t : keep) core::cuda::record_stream(t, comm_->stream);
  return std::make_shared<NcclWork>(comm_, numbered, done, keep);
}

std::shared_ptr<Work> NcclProcessGroup::allreduce(Tensor& tensor, ReduceOp op) {
  auto c = comm_;
  return issue("allreduce of " + tensor.str(), {tensor}, [&] {
    return ncclAllReduce(tensor.raw_data(), tensor.raw_data(), static_cast<size_t>(tensor.numel()),
                         nccl_type(tensor.dtype()), nccl_op(op), c->comm, c->stream);
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(Tensor& tensor, int root) {
  MT_CHECK(root >= 0 && root < size_, who(), ": broadcast: root ", root, " is outside the group of ", size_);
  auto c = comm_;
  return issue("broadcast from rank " + std::to_string(root) + " of " + tensor.str(), {tensor}, [&] {
    return ncclBroadcast(tensor.raw_data(), tensor.raw_data(), static_cast<size_t>(tensor.numel()),
                         nccl_type(tensor.dtype()), root, c->comm, c->stream);
  });
}

std::shared_ptr<Work> NcclProcessGroup::allgather(const Tensor& input, Tensor& output) {
  MT_CHECK(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(), who(),
           ": allgather: output must hold ", size_, " x ", input.numel(), " elements of the input's dtype");
  auto c = comm_;
  return issue("allgather of " + input.str(), {input, output}, [&] {
    return ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                         nccl_type(input.dtype()), c->comm, c->stream);
  });
}

// NCCL has no allgatherv: one broadcast per rank into its slice, fused in a group call.
std::shared_ptr<Work> NcclProcessGroup::allgatherv(const Tensor& input, Tensor& output,
                                                   const std::vector<int64_t>& counts) {
  MT_CHECK(static_cast<int>(counts.size()) == size_, who(), ": allgatherv: one count per rank expected");
  MT_CHECK(counts[static_cast<size_t>(rank_)] == input.numel(), who(), ": allgatherv: counts[", rank_,
           "] differs from the input's ", input.numel(), " elements");
  int64_t total = 0;
  for (const int64_t n : counts) total += n;
  MT_CHECK(output.numel() == total && output.dtype() == input.dtype(), who(), ": allgatherv: output must hold ",
           total, " elements of the input's dtype");
  auto c = comm_;
  const size_t elem = core::element_size(input.dtype());
  return issue("allgatherv of " + input.str(), {input, output}, [&]() -> int {
    ncclGroupStart();
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const size_t n = static_cast<size_t>(counts[static_cast<size_t>(r)]);
      char* dst = static_cast<char*>(output.raw_data()) + offset * elem;
      const void* src = r == rank_ ? input.raw_data() : dst;
      ncclBroadcast(src, dst, n, nccl_type(input.dtype()), r, c->comm, c->stream);
      offset += n;
    }
    return ncclGroupEnd();
  });
}

std::shared_ptr<Work> NcclProcessGroup::reduce_scatter(const Tensor& input, Tensor& output) {
  MT_CHECK(input.numel() == output.numel() * size_ && output.dtype() == input.dtype(), who(),
           ": reduce_scatter: input must hold ", size_, " x the output's ", output.numel(), " elements");
  auto c = comm_;
  return issue("reduce_scatter of " + input.str(), {input, output}, [&] {
    return ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<size_t>(output.numel()),
                             nccl_type(input.dtype()), ncclSum, c->comm, c->stream);
  });
}

void NcclProcessGroup::barrier() {
  Tensor one = Tensor::ones({1}, core::DType::Float32, core::Device::cuda(comm_->device));
  allreduce(one)->wait();
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::subgroup(const std::vector<int>& ranks) {
  return subgroups_.get(ranks, rank_, world_ranks_, prefix_, who(), [this](const std::string& prefix, int rank,
                                                                          std::vector<int> world) {
    return std::shared_ptr<NcclProcessGroup>(
        new NcclProcessGroup(store_, options_, prefix, rank, std::move(world), world_size_));
  });
}

void NcclProcessGroup::release_subgroup(const std::vector<int>& ranks) { subgroups_.release(ranks); }

}  // namespace mt::dist
