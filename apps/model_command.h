// `mintrain model`: what data-parallel training of a config's model would cost on N workers.
// It profiles the model on this machine (one process, a few iterations), then feeds the per-layer
// times into the cost model (dist/predict/) on a network the user describes and prints, for each
// N, the predicted seconds per iteration and the scaling efficiency of every method, and for one
// N the critical path of each DAG: the chain of tasks that sets the iteration time.
//
//   mintrain model CONFIG [--set k=v ...] [--workers 1,2,4,...] [--at N]
//                  [--bandwidth-gbps X] [--latency-us Y]
//                  [--ranks-per-rack R --inter-bandwidth-gbps X --inter-latency-us Y]
//                  [--allreduce ring|hierarchical] [--profile-iters K] [--warmup-iters W]
//                  [--layer-times FILE.json] [--save-profile FILE.json] [--comm-profile FILE.json]
//
// Profiling. Layers are the model's parameter tensors (the unit S-SGD sends), in forward order
// (the reverse of the order in which their gradients complete). A layer's backward time is the
// time since the previous grad-ready hook (the first: since backward started), the way MG-WFBP
// profiles. Per-layer forward times cannot be observed without forward hooks, so the
// measured forward time (including the loss) is split across layers in proportion to their
// backward time (evenly if backward time is zero). The update time is the optimizer step plus
// zero_grad plus whatever backward does after the last gradient is final. Data loading is not
// timed (the loader prefetches). On a GPU every hook waits for the gradient (one-value copy to
// the host), so times are completion times, slightly inflated.
//
// The profile (dist/predict/model_profile.h) and the communication profiles feed the prediction
// (dist/predict/scaling.h); this command measures the first and prints the second.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace mt::apps {

// The subcommand; args exclude "model". Returns the exit status (errors throw core::Error).
int run_model_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace mt::apps
