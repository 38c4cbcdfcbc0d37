// create_process_group: picks the engine for the backend name.
#include "dist/comm/process_group.h"

#include <algorithm>
#include <csignal>

#include "core/device.h"
#include "core/error.h"
#include "dist/comm/gloo_process_group.h"
#ifdef MT_WITH_NCCL
#include "dist/comm/nccl_process_group.h"
#endif

namespace mt::dist {

void check_collective_transport(const std::string& transport) {
  if (transport == "tcp") return;
  MT_CHECK(transport != "ibverbs",
           "dist.transport \"ibverbs\": this Gloo runs only its bound-buffer algorithms over ibverbs, and "
           "mintrain's collectives use unbound buffers, so no collective could run on it. On an InfiniBand "
           "cluster use transport \"tcp\" over IPoIB (dist.interface: \"ib0\") for CPU training, or train on "
           "GPUs with backend \"nccl\", whose InfiniBand transport uses rdma-core directly");
  MT_FAIL("unknown dist.transport \"", transport, "\"; use \"tcp\"");
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int peer, uint32_t tag) {
  MT_FAIL("rank ", rank(), " of ", describe(), ": send to rank ", peer, ": the ", backend(), " backend has no "
          "point-to-point messages here; the parameter server (dist.algorithm \"ps\") needs dist.backend "
          "\"gloo\" (device gradients are staged through host memory)");
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor& tensor, int peer, uint32_t tag) {
  MT_FAIL("rank ", rank(), " of ", describe(), ": recv from rank ", peer, ": the ", backend(), " backend has no "
          "point-to-point messages here; the parameter server (dist.algorithm \"ps\") needs dist.backend "
          "\"gloo\" (device gradients are staged through host memory)");
}

std::shared_ptr<ProcessGroup> private_communicator(ProcessGroup& group) {
  std::vector<int> everyone(static_cast<size_t>(group.size()));
  for (int r = 0; r < group.size(); ++r) everyone[static_cast<size_t>(r)] = r;
  group.release_subgroup(everyone);
  std::shared_ptr<ProcessGroup> fresh = group.subgroup(everyone);
  group.release_subgroup(everyone);
  return fresh;
}

void finish(const std::shared_ptr<Work>& work, const ProcessGroup& group, const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    MT_FAIL("rank ", group.rank(), " of ", group.size(), ": ", what, " failed: ", e.what());
  }
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::shared_ptr<ProcessGroup> Subgroups::get(const std::vector<int>& ranks, int rank,
                                             const std::vector<int>& parent_world, const std::string& parent_prefix,
                                             const std::string& who, const Make& make) {
  const std::string what = who + ": subgroup({" + join_ranks(ranks) + "})";
  MT_CHECK(!ranks.empty() && std::is_sorted(ranks.begin(), ranks.end()) &&
               std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(),
           what, ": ranks must be sorted and distinct");
  MT_CHECK(ranks.front() >= 0 && ranks.back() < static_cast<int>(parent_world.size()), what,
           ": ranks outside this group of ", parent_world.size());
  const auto me = std::find(ranks.begin(), ranks.end(), rank);
  MT_CHECK(me != ranks.end(), what, " does not include this rank; only the members call subgroup()");
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = groups_.find(ranks); it != groups_.end()) return it->second;
  std::vector<int> world;
  for (const int r : ranks) world.push_back(parent_world[static_cast<size_t>(r)]);
  const int generation = released_[ranks];
  const std::string prefix =
      parent_prefix + "/sub/" + join_ranks(ranks) + (generation > 0 ? "#" + std::to_string(generation) : "");
  return groups_[ranks] = make(prefix, static_cast<int>(me - ranks.begin()), std::move(world));
}

void Subgroups::release(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (groups_.erase(ranks) > 0) ++released_[ranks];
}

std::shared_ptr<ProcessGroup> create_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                   const ProcessGroupOptions& options) {
  // A peer that dies closes its sockets; Gloo's next write to one would raise SIGPIPE and kill
  // this rank silently. Ignored, the write fails and surfaces as an Error naming the operation.
  std::signal(SIGPIPE, SIG_IGN);
  if (options.backend == "gloo") return GlooProcessGroup::create(std::move(store), rank, size, options);
  if (options.backend == "nccl") {
#ifdef MT_WITH_NCCL
    MT_CHECK(core::cuda_available(), "rank ", rank, ": backend \"nccl\" needs a CUDA GPU and none is "
             "visible; use backend \"gloo\" for CPU training");
    return NcclProcessGroup::create(std::move(store), rank, size, options);
#else
    MT_FAIL("rank ", rank, ": backend \"nccl\" is not built into this mintrain (it needs the CUDA "
            "toolkit and NCCL at build time); use backend \"gloo\"");
#endif
  }
  MT_FAIL("rank ", rank, ": unknown process group backend \"", options.backend, "\"; use \"gloo\" (CPU "
          "tensors) or \"nccl\" (CUDA tensors)");
}

}  // namespace mt::dist
