#include "dist/replicas.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/comm/subgroups.h"

namespace mt::dist {
namespace {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Broadcasts tensors from root: float32 ones packed into one flat buffer (one message instead
// of one per tensor), anything else (integer counters) separately.
void broadcast_tensors(ProcessGroup& group, const NamedTensors& tensors, int root,
                       const std::string& what) {
  core::NoGradGuard no_grad;
  std::vector<Tensor> floats;
  for (const auto& [name, t] : tensors)
    if (t.dtype() == core::DType::Float32) floats.push_back(t);
  if (total_numel(floats) > 0) {
    // On the group's device: a CPU model on an NCCL group, or a GPU model on Gloo (the
    // parameter server's workers), is staged there and back.
    Tensor flat = flatten_values(floats).to(group.device());
    finish(group.broadcast(flat, root), group, "broadcast of the " + what + " from rank " + std::to_string(root));
    unflatten_into_values(flat, floats);
  }
  for (const auto& [name, t] : tensors) {
    if (t.dtype() == core::DType::Float32) continue;
    Tensor c = t.contiguous().to(group.device());
    finish(group.broadcast(c, root), group, "broadcast of " + what + " \"" + name + "\"");
    if (!c.same(t)) Tensor(t).copy_(c);
  }
}

// Gathers every rank's `hashes` and returns, for each, the ranks whose value differs from rank
// 0's. A hash travels as four exact float32 chunks of 16 bits (the collectives move float32).
std::vector<std::vector<int>> ranks_differing(ProcessGroup& group, const std::vector<uint64_t>& hashes,
                                              const std::string& what) {
  const int64_t n = 4 * static_cast<int64_t>(hashes.size());
  Tensor mine = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i)
    mine.data<float>()[i] = static_cast<float>((hashes[static_cast<size_t>(i / 4)] >> (16 * (i % 4))) & 0xffff);
  mine = mine.to(group.device());  // NCCL gathers device tensors
  Tensor all = Tensor::empty({n * group.size()}, core::DType::Float32, group.device());
  finish(group.allgather(mine, all), group, what);
  const std::vector<float> a = all.to(core::Device::cpu()).to_vector();
  std::vector<std::vector<int>> differ(hashes.size());
  for (int r = 1; r < group.size(); ++r)
    for (size_t h = 0; h < hashes.size(); ++h) {
      const auto theirs = a.begin() + n * r + 4 * static_cast<int64_t>(h);
      if (!std::equal(theirs, theirs + 4, a.begin() + 4 * static_cast<int64_t>(h))) differ[h].push_back(r);
    }
  return differ;
}

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

// FNV-1a over 8-byte words (a byte at a time for the tail): the digest reads every weight once,
// so for large models the word steps keep it far below the cost of sending them.
uint64_t hash_bytes(uint64_t h, const unsigned char* bytes, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = (h ^ word) * kFnvPrime;
  }
  for (; i < n; ++i) h = (h ^ bytes[i]) * kFnvPrime;
  return h;
}

uint64_t stable_hash(const std::string& text) {
  return hash_bytes(kFnvOffset, reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

// Rank 0's parameters and buffers to every rank, crossing each rack boundary once: rank 0 sends
// to the representatives (the lowest rank of each rack), each representative inside its rack.
// The communicators are made for this one copy and released after it.
void broadcast_across_racks(ProcessGroup& group, const layers::Module& model, const std::vector<int>& rack_of) {
  const int me = group.rank();
  std::map<int, std::vector<int>> members;  // rack id -> its ranks, ascending
  for (int r = 0; r < group.size(); ++r) members[rack_of[r]].push_back(r);
  std::vector<int> representatives;
  for (const auto& [id, ranks] : members) representatives.push_back(ranks.front());
  std::sort(representatives.begin(), representatives.end());  // rank 0 first: it leads its rack
  const std::vector<int>& rack = members.at(rack_of[me]);
  const bool representative = rack.front() == me;
  // Every rank joins its rack's communicator first, then the representatives theirs: nobody waits
  // on a group whose members still wait on another (as HierarchicalGroup connects them).
  std::shared_ptr<ProcessGroup> rack_group = rack.size() > 1 ? group.subgroup(rack) : nullptr;
  std::shared_ptr<ProcessGroup> cross_group =
      representative && representatives.size() > 1 ? group.subgroup(representatives) : nullptr;
  if (cross_group) {
    broadcast_parameters(*cross_group, model, 0);
    broadcast_buffers(*cross_group, model, 0);
  }
  if (rack_group) {
    broadcast_parameters(*rack_group, model, 0);
    broadcast_buffers(*rack_group, model, 0);
  }
  if (cross_group) group.release_subgroup(representatives);
  if (rack_group) group.release_subgroup(rack);
}

}  // namespace

double mean_over_ranks(ProcessGroup& group, double value) {
  const float hi = static_cast<float>(value);
  const float lo = static_cast<float>(value - static_cast<double>(hi));
  Tensor t = Tensor::from_vector(std::vector<float>{hi, lo}, {2}).to(group.device());
  finish(group.allreduce(t), group, "averaging a metric over ranks");
  const std::vector<float> v = t.to(core::Device::cpu()).to_vector();
  return (static_cast<double>(v[0]) + static_cast<double>(v[1])) / group.size();
}

void check_replicas_agree(ProcessGroup& group, const layers::Module& model,
                          const std::string& config_text) {
  std::ostringstream shapes;
  for (const auto& [name, t] : model.named_parameters()) shapes << name << core::shape_str(t.shape()) << ';';
  for (const auto& [name, t] : model.named_buffers()) shapes << name << core::shape_str(t.shape()) << ';';
  const auto differ = ranks_differing(group, {stable_hash(config_text), stable_hash(shapes.str())},
                                     "the start-up check of configs and models (allgather)");

  MT_CHECK(differ[1].empty(), "rank ", group.rank(), ": the model of rank(s) ", join_ranks(differ[1], ", "),
           " differs from rank 0's (parameter/buffer names or shapes); every rank must build the same "
           "model: start them all with the same config and overrides");
  MT_CHECK(differ[0].empty(), "rank ", group.rank(), ": the config of rank(s) ", join_ranks(differ[0], ", "),
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

uint64_t weights_digest(const layers::Module& model) {
  uint64_t h = kFnvOffset;
  auto add = [&h](const Tensor& t) {
    const Tensor host = t.device().is_cpu() ? t.contiguous() : t.to(core::Device::cpu()).contiguous();
    h = hash_bytes(h, static_cast<const unsigned char*>(host.raw_data()), host.nbytes());
  };
  for (const auto& [name, t] : model.named_parameters()) add(t);
  for (const auto& [name, t] : model.named_buffers()) add(t);
  return h;
}

StartingWeights make_replicas_identical(ProcessGroup& group, const layers::Module& model,
                                        const std::vector<int>& rack_of, std::ostream* log) {
  MT_CHECK(rack_of.empty() || static_cast<int>(rack_of.size()) == group.size(), "rank ", group.rank(),
           ": the start-up broadcast got ", rack_of.size(), " rack ids for ", group.size(),
           " ranks; give one rack id per rank (or none)");
  const uint64_t digest = weights_digest(model);
  const std::vector<int> differ =
      ranks_differing(group, {digest}, "the start-up comparison of the ranks' weights (allgather of digests)")[0];
  const bool chatty = log != nullptr && group.rank() == 0;
  std::ostringstream hex;
  hex << std::hex << std::setw(16) << std::setfill('0') << digest;
  if (differ.empty()) {
    if (chatty) {
      *log << "start-up: all " << group.size() << " ranks hold the same weights (digest " << hex.str()
           << "): nothing broadcast\n";
    }
    return StartingWeights::AlreadyIdentical;
  }
  std::set<int> racks(rack_of.begin(), rack_of.end());
  const bool by_rack = racks.size() > 1;
  if (chatty) {
    size_t bytes = 0;
    for (const auto& [name, t] : model.named_parameters()) bytes += t.nbytes();
    for (const auto& [name, t] : model.named_buffers()) bytes += t.nbytes();
    *log << "start-up: the weights of rank(s) " << join_ranks(differ, ", ") << " differ from rank 0's (digest "
         << hex.str() << "): broadcasting rank 0's parameters and buffers (" << bytes << " bytes)"
         << (by_rack ? ", once into each of " + std::to_string(racks.size()) + " racks, then inside each rack"
                     : std::string())
         << "\n";
  }
  if (by_rack) {
    broadcast_across_racks(group, model, rack_of);
  } else {
    broadcast_parameters(group, model);
    broadcast_buffers(group, model);
  }
  return StartingWeights::Broadcast;
}

std::vector<core::StateDict> gather_states_to_rank0(ProcessGroup& group, const core::StateDict& mine,
                                                    const std::string& what) {
  const core::Device device = group.device();
  core::Archive archive;
  archive.tensors = mine;
  const std::string bytes = core::encode_archive(archive, what);
  std::vector<core::StateDict> states;
  if (group.rank() == 0) {  // a copy: `mine` may alias tensors that training changes later
    core::StateDict copy;
    for (const auto& [name, t] : mine)
      copy.emplace_back(name, t.device().is_cpu() ? t.clone() : t.to(core::Device::cpu()));
    states.push_back(std::move(copy));
  }
  // Every rank must know how many bytes each rank sends before it can receive them.
  Tensor size = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(bytes.size())}, {1}).to(device);
  Tensor sizes = Tensor::empty({group.size()}, core::DType::Int64, device);
  finish(group.allgather(size, sizes), group, what + ": gathering the sizes of every rank's state");
  const Tensor sizes_cpu = sizes.to(core::Device::cpu());
  for (int r = 1; r < group.size(); ++r) {
    Tensor wire = Tensor::empty({sizes_cpu.data<int64_t>()[r]}, core::DType::UInt8);
    if (group.rank() == r) std::memcpy(wire.raw_data(), bytes.data(), bytes.size());
    wire = wire.to(device);
    finish(group.broadcast(wire, r), group, what + ": sending rank " + std::to_string(r) + "'s state to rank 0");
    if (group.rank() != 0) continue;
    wire = wire.to(core::Device::cpu());
    const std::string from = what + " (rank " + std::to_string(r) + "'s state)";
    states.push_back(core::decode_archive(
        std::string(static_cast<const char*>(wire.raw_data()), static_cast<size_t>(wire.numel())), from).tensors);
  }
  return states;
}

void append_rank_states(core::StateDict& out, const std::string& prefix,
                        const std::vector<core::StateDict>& states) {
  if (states.empty()) return;
  out.emplace_back(prefix + "ranks", Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(states.size())}, {1}));
  for (size_t r = 0; r < states.size(); ++r)
    for (const auto& [name, t] : states[r]) out.emplace_back(prefix + "rank" + std::to_string(r) + "." + name, t);
}

std::optional<int64_t> saved_int64(const core::StateDict& state, const std::string& name) {
  for (const auto& [n, t] : state) {
    if (n != name) continue;
    MT_CHECK(t.dtype() == core::DType::Int64 && t.numel() == 1, "checkpoint entry sync.", name,
             " must be one int64, got ", t.str());
    return t.to(core::Device::cpu()).data<int64_t>()[0];
  }
  return std::nullopt;
}

std::optional<core::StateDict> rank_state(const core::StateDict& state, const std::string& prefix,
                                          int rank, int world_size, std::string* why_not) {
  const int64_t saved_ranks = saved_int64(state, prefix + "ranks").value_or(0);
  const std::string mine = prefix + "rank" + std::to_string(rank) + ".";
  core::StateDict out;
  for (const auto& [name, t] : state)
    if (name.rfind(mine, 0) == 0) out.emplace_back(name.substr(mine.size()), t);
  if (saved_ranks == 0) {
    if (why_not) *why_not = "the checkpoint holds no per-rank state (an older build, or saved without prepare_eval)";
    return std::nullopt;
  }
  if (saved_ranks != world_size) {
    if (why_not)
      *why_not = "the checkpoint was written by " + std::to_string(saved_ranks) + " ranks, this run has " +
                 std::to_string(world_size);
    return std::nullopt;
  }
  MT_CHECK(!out.empty(), "checkpoint: the per-rank entries sync.", mine, "* are missing although it "
           "holds per-rank state for ", saved_ranks, " ranks (a damaged checkpoint?)");
  return out;
}

core::StateDict replica_state(const ModelVector& model, const optim::Optimizer& optimizer) {
  core::StateDict mine = {{"local", model.showing_average() ? model.aside() : model.flatten()}};
  for (const auto& [name, t] : optimizer.state_dict()) mine.emplace_back("optim." + name, t);
  return mine;
}

bool restore_own_replica(const core::StateDict& state, const std::string& prefix, const ProcessGroup& group,
                         ModelVector& model, optim::Optimizer& optimizer, std::ostream* log) {
  std::string why_not;
  const std::optional<core::StateDict> mine = rank_state(state, prefix, group.rank(), group.size(), &why_not);
  if (!mine) {
    if (group.rank() == 0 && log) {
      *log << "note: " << why_not << ": every rank resumes from the stored average and rank 0's optimizer "
           << "state, so the run will not match one that never stopped" << std::endl;
    }
    return false;
  }
  const std::string entry = "sync." + prefix + "rank" + std::to_string(group.rank()) + ".";  // names it in errors
  const Tensor* local = nullptr;
  core::StateDict optim_state;
  for (const auto& [name, t] : *mine) {
    if (name == "local") local = &t;
    if (name.rfind("optim.", 0) == 0) optim_state.emplace_back(name.substr(6), t);
  }
  MT_CHECK(local != nullptr, "checkpoint entry ", entry, "local is missing although the checkpoint holds "
           "per-rank state (a damaged checkpoint?)");
  MT_CHECK(local->dtype() == core::DType::Float32 && local->numel() == model.numel(), "checkpoint entry ", entry,
           "local is ", local->str(), "; this model's parameters and float32 buffers hold ", model.numel(),
           " float32 values (was it written for another model?)");
  optimizer.load_state_dict(optim_state);
  core::NoGradGuard no_grad;
  // Whatever the model held (the loaded average, or an average shown for evaluation), this
  // rank's own weights are what it trains on from here.
  model.drop_aside();
  model.unflatten(local->to(model.device()));
  return true;
}

}  // namespace mt::dist
