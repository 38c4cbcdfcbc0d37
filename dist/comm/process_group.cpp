// create_process_group: picks the engine for the backend name.
#include "dist/comm/process_group.h"

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
