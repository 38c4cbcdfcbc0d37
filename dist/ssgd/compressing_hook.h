// Compressed S-SGD's communication hook (comm_hook.h): each bucket's gradient travels compressed
// with error feedback, through one GradientExchange per bucket (allreduce when the compressor's
// payloads are summable, else allgather and every rank decodes and sums them in rank order), so
// all ranks get the same average and take the same step. Optionally DGC's momentum correction:
// each rank exchanges its velocity per bucket instead of its gradient, and the optimizer is plain
// SGD (takes_over_momentum). docs/algorithms.md section 1.
//
// Per bucket: v = g + r; send Q(v); r <- v - decode(Q(v)). Buckets on a CUDA device compress
// with the device kernels (compressor.h); the velocity lives in host memory and such a bucket's
// direction is staged through it.
//
// State: the residuals and velocities differ between ranks. A checkpoint holds rank 0's as
// "residual" / "velocity" / "velocity_started" (one float32 vector each, in parameter order,
// whatever the buckets), "steps" (TOPK warm-up), and after prepare_checkpoint every rank's as
// "cssgd.rank<r>.*"; on resume each rank takes its own.
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
