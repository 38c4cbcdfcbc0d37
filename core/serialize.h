// Named-tensor archives: the on-disk form of state dicts and checkpoints.
//
// Layout (little-endian): magic "MTARCHV1", format version, then records (metadata strings and
// tensors: name, dtype, shape, raw bytes), then a CRC-32 of everything before it. Writes are
// atomic: a temporary file in the same folder, fsync, rename; an interrupted save never
// replaces a good file. Reads check magic, version, sizes and checksum and name the file and
// what is wrong on any mismatch.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace mt::core {

// Ordered (name, tensor) pairs: a module's parameters and buffers, an optimizer's state.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

struct Archive {
  StateDict tensors;                          // stored as CPU tensors
  std::map<std::string, std::string> meta;    // small scalars and strings (epoch, rng state...)

  const Tensor* find(const std::string& name) const;
  // The tensors whose names start with prefix, with the prefix removed.
  StateDict with_prefix(const std::string& prefix) const;
  void add(const std::string& prefix, const StateDict& dict);
};

void save_archive(const std::string& path, const Archive& archive);
Archive load_archive(const std::string& path);

// The same format in memory (for sending state between ranks); `what` names the bytes in
// errors, as the path does for files. decode_archive checks everything load_archive does.
std::string encode_archive(const Archive& archive, const std::string& what);
Archive decode_archive(const std::string& bytes, const std::string& what);

}  // namespace mt::core
