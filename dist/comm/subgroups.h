// The subgroups a process group has made, by member list: Gloo's and NCCL's groups keep theirs
// alike (ProcessGroup::subgroup and release_subgroup).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm/process_group.h"

namespace mt::dist {

class Subgroups {
 public:
  // Made by `make(prefix, rank in the subgroup, members as world ranks)` the first time, the
  // same one after. `ranks`: sorted, distinct, this rank among them (else an Error naming
  // `who`); `parent_world`: the parent's members as world ranks. Each connection gets store keys
  // of its own (prefix "<parent>/sub/0,3", "#1" after a release, and so on).
  using Make = std::function<std::shared_ptr<ProcessGroup>(const std::string&, int, std::vector<int>)>;
  std::shared_ptr<ProcessGroup> get(const std::vector<int>& ranks, int rank, const std::vector<int>& parent_world,
                                    const std::string& parent_prefix, const std::string& who, const Make& make);
  void release(const std::vector<int>& ranks);

 private:
  std::mutex mutex_;
  std::map<std::vector<int>, std::shared_ptr<ProcessGroup>> groups_;
  std::map<std::vector<int>, int> released_;  // subgroups of these ranks released so far
};

// A fresh communicator over all of `group`'s ranks that nothing else shares, for exchanges run
// from a thread of their own (CD-SGD's pipeline, ByteScheduler's engine): nothing the training
// thread issues can interleave with them. Collective.
std::shared_ptr<ProcessGroup> private_communicator(ProcessGroup& group);

// "0,3,4", or joined by another separator.
std::string join_ranks(const std::vector<int>& ranks, const std::string& sep = ",");

}  // namespace mt::dist
