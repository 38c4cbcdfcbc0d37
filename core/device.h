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
// Why no CUDA device can be used, or "" when one can. It tells "there is no GPU" (a CPU-only
// build, no NVIDIA driver, no visible device) from "there is a GPU we cannot use" (a driver
// older than the toolkit, a device in a bad state), with CUDA's own error text.
std::string cuda_unavailable_reason();

// This process's index among the ranks of its node, by the torchrun convention: LOCAL_RANK
// (mintrain launch, torchrun), else SLURM_LOCALID (srun), else OMPI_COMM_WORLD_LOCAL_RANK
// (mpirun); -1 when none is set (a process started by hand).
int local_rank_from_env();

// The device a config's `device` means for this process. "cuda" is the node-local rank's GPU
// (cuda:local_rank, counted among the visible devices: CUDA_VISIBLE_DEVICES renumbers them
// from 0), so every rank of a node gets its own; "cuda:N" and "cpu" are taken as written. More
// local ranks than visible devices is an error naming both numbers.
Device resolve_device(const std::string& spec, int local_rank, int visible_devices);

// Makes `device` the calling thread's current GPU: kernels, streams, events and NCCL
// communicators are made on the current device, which starts at GPU 0 in every thread. The
// trainer selects its rank's GPU once, before anything touches CUDA; a CPU device does nothing.
void select_device(const Device& device);

}  // namespace mt::core
