// A reference-counted block of device memory. Tensors are views into a Storage: several
// tensors (a reshape, a transpose, a slice) may share one.
#pragma once
#include <cstddef>

#include "core/device.h"

namespace mt::core {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace mt::core
