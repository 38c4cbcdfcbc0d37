// Compressed S-SGD's hook (comm_hook.h): each bucket through a GradientExchange of its own
// (dist/compress/), optionally with momentum correction (the synchronizer then takes over the
// momentum). Residuals and velocities differ between ranks: checkpointed in parameter order,
// whatever the buckets, and every rank's after prepare_checkpoint ("cssgd.rank<r>.*").
#pragma once
#include <memory>
#include <optional>

#include "dist/ssgd/comm_hook.h"
#include "dist/compress/compressor.h"
#include "dist/compress/momentum_correction.h"

namespace mt::dist {

struct CompressingHookOptions {
  CompressionOptions compression;
  std::optional<MomentumCorrectionOptions> momentum_correction;  // set: exchange velocities
};

std::unique_ptr<CommHook> make_compressing_hook(std::shared_ptr<ProcessGroup> group, CompressingHookOptions options);

}  // namespace mt::dist
