// dist.compressor as the compressed exchanges read it (compressed S-SGD's hook, CD-SGD): the
// compressor's options, their checks, and DGC momentum correction where the optimizer allows it.
#pragma once
#include <optional>

#include "dist/compress/compressor.h"
#include "dist/compress/momentum_correction.h"
#include "mintrain.pb.h"

namespace mt::dist {

struct AlgorithmContext;  // registry.h

CompressionOptions compression_options(const mintrain::CompressorConfig& config);
// Errors name the field.
void validate_compressor(const mintrain::CompressorConfig& config);
// Set when dist.compressor.momentum_correction is on and the optimizer is SGD with momentum
// (only an SGD momentum can be taken over; Adam keeps its moments).
std::optional<MomentumCorrectionOptions> momentum_correction_options(const AlgorithmContext& context);

}  // namespace mt::dist
