#include "dist/replicas.h"

#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"

namespace mt::dist {
namespace {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Broadcasts tensors from root: float32 ones packed into one flat buffer (one message instead
// of one per tensor), anything else (integer counters) separately.
void broadcast_tensors(ProcessGroup& group, const NamedTensors& tensors, int root,
                       const std::string& what) {
  core::NoGradGuard no_grad;
  int64_t total = 0;
  for (const auto& [name, t] : tensors)
    if (t.dtype() == core::DType::Float32) total += t.numel();
  if (total > 0) {
    const core::Device device = tensors.front().second.device();
    Tensor flat = Tensor::empty({total}, core::DType::Float32, device);
    int64_t off = 0;
    for (const auto& [name, t] : tensors) {
      if (t.dtype() != core::DType::Float32) continue;
      flat.narrow(0, off, t.numel()).copy_(t.contiguous().view({-1}));
      off += t.numel();
    }
    finish(group.broadcast(flat, root), group, "broadcast of the " + what + " from rank " + std::to_string(root));
    off = 0;
    for (const auto& [name, t] : tensors) {
      if (t.dtype() != core::DType::Float32) continue;
      Tensor dst = t;
      dst.copy_(flat.narrow(0, off, t.numel()));
      off += t.numel();
    }
  }
  for (const auto& [name, t] : tensors) {
    if (t.dtype() == core::DType::Float32) continue;
    Tensor c = t.contiguous();
    finish(group.broadcast(c, root), group, "broadcast of " + what + " \"" + name + "\"");
    if (!c.same(t)) Tensor(t).copy_(c);
  }
}

// A 64-bit value as four exact float32 chunks of 16 bits (the collectives move float32).
void put_hash(float* out, uint64_t h) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>((h >> (16 * i)) & 0xffff);
}

}  // namespace

void finish(const std::shared_ptr<Work>& work, const ProcessGroup& group, const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    MT_FAIL("rank ", group.rank(), " of ", group.size(), ": ", what, " failed: ", e.what());
  }
}

uint64_t stable_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void check_replicas_agree(ProcessGroup& group, const layers::Module& model,
                          const std::string& config_text) {
  std::ostringstream shapes;
  for (const auto& [name, t] : model.named_parameters()) shapes << name << core::shape_str(t.shape()) << ';';
  for (const auto& [name, t] : model.named_buffers()) shapes << name << core::shape_str(t.shape()) << ';';
  Tensor mine = Tensor::empty({8});
  put_hash(mine.data<float>(), stable_hash(config_text));
  put_hash(mine.data<float>() + 4, stable_hash(shapes.str()));
  Tensor all = Tensor::empty({8 * static_cast<int64_t>(group.size())});
  finish(group.allgather(mine, all), group, "the start-up check of configs and models (allgather)");

  const float* a = all.data<float>();
  std::vector<int> config_differs, model_differs;
  for (int r = 1; r < group.size(); ++r) {
    for (int i = 0; i < 4; ++i) {
      if (a[8 * r + i] != a[i]) { config_differs.push_back(r); break; }
    }
    for (int i = 4; i < 8; ++i) {
      if (a[8 * r + i] != a[i]) { model_differs.push_back(r); break; }
    }
  }
  auto list = [](const std::vector<int>& ranks) {
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  };
  MT_CHECK(model_differs.empty(), "rank ", group.rank(), ": the model of rank(s) ", list(model_differs),
           " differs from rank 0's (parameter/buffer names or shapes); every rank must build the same "
           "model: start them all with the same config and overrides");
  MT_CHECK(config_differs.empty(), "rank ", group.rank(), ": the config of rank(s) ", list(config_differs),
           " differs from rank 0's (hash of the config text); start every rank with the same config "
           "file and the same --set overrides");
}

void broadcast_parameters(ProcessGroup& group, const layers::Module& model, int root) {
  broadcast_tensors(group, model.named_parameters(), root, "parameters");
}

void broadcast_buffers(ProcessGroup& group, const layers::Module& model, int root) {
  const auto buffers = model.named_buffers();
  if (!buffers.empty()) broadcast_tensors(group, buffers, root, "buffers");
}

}  // namespace mt::dist
