// Where a tensor's memory lives. Kernels are chosen by this (see dispatch.h).
#pragma once
#include <string>

namespace mt::core {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
  // Parses "cpu", "cuda" or "cuda:N"; throws Error naming the valid forms otherwise.
  static Device parse(const std::string& s);
};

// True when this binary was built with CUDA and at least one device is visible.
bool cuda_available();
int cuda_device_count();

}  // namespace mt::core
