// A model's profile, what the cost model predicts from: per layer (one per parameter tensor,
// in forward order) the forward and backward seconds and the gradient bytes, the update's
// seconds, and where tied parameters' earlier uses become final. `mintrain model` measures it
// (apps/model_command.cpp) or reads it from a file.
//
// The file (--save-profile writes it, --layer-times reads it; every time in seconds):
//   {"model": "lenet5", "device": "cpu", "batch_size": 64, "iterations": 10,
//    "update_seconds": 0.0004, "buffer_bytes": 0,
//    "layers": [{"name": "conv1", "forward": 1e-4, "backward": 2e-4, "bytes": 624}, ...]}
// plus, optionally, "compress_seconds" and "decode_seconds" (CD-SGD's compressor on the whole
// gradient; measured on this machine when absent) and "early_parts".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dist/predict/cost_model.h"

namespace mt::dist {

struct LayerProfile {
  std::string name;
  double forward = 0.0;   // seconds
  double backward = 0.0;  // seconds
  double bytes = 0.0;     // gradient bytes
};

// A tied parameter's earlier uses (docs/algorithms.md section 6, "Tied parameters in two
// parts"): `bytes` of layer `from`'s gradient are final when layer `layer`'s backward ends (BERT's
// word embedding: its decoder part, with the MLM head, long before the lookup's).
struct EarlyPart {
  size_t layer = 0;
  size_t from = 0;
  double bytes = 0.0;
};

struct ModelProfile {
  std::string model;
  std::string device = "cpu";
  int64_t batch_size = 0;  // per worker
  int iterations = 0;      // profiled (0: read from a file written by hand)
  std::vector<LayerProfile> layers;  // forward order
  double update_seconds = 0.0;
  double buffer_bytes = 0.0;         // float32 buffers (DS-Sync averages them too)
  double compress_seconds = -1.0;    // < 0: unknown (measured when needed)
  double decode_seconds = -1.0;      // one payload
  std::vector<EarlyPart> early_parts;  // tied parameters' earlier uses, where the profile saw them
  double forward_total() const;
  double backward_total() const;
  double gradient_bytes() const;
  std::vector<LayerCost> layer_costs() const;
  // The same with every early part's bytes moved to the layer they become final with: what the
  // parameter server's split exchanges (its lookup rows, riding with partitions not pushed yet,
  // are not priced).
  std::vector<LayerCost> layer_costs_split() const;
};

// Errors name the file and the field.
ModelProfile read_profile(const std::string& path);
void write_profile(const ModelProfile& profile, const std::string& path);

}  // namespace mt::dist
