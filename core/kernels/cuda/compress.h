// CUDA encode and decode of the gradient compressors (dist/compressor_*.cpp, which dispatch here
// when their input or payload is a CUDA tensor). Every encoder writes byte for byte the payload
// the CPU encoder writes for the same input, so ranks may mix devices and the allgathered
// payloads decode the same everywhere:
//
//   FP16     Float16[n]: core/precision.h's float_to_fp16_bits (round to nearest even), the
//            function the CPU compressor calls.
//   TWO_BIT  UInt8[4 ceil(n/16)]: little-endian uint32 words, value i in bits 2(i%16) of word
//            i/16; 00 zero, 01 +tau (v >= tau), 10 -tau (v <= -tau).
//   SIGN     UInt8[4 + 4 ceil(n/32)]: float32 scale = mean|v|, then uint32 words with bit i%32
//            of word i/32 set where v[i] < 0. The sum of |v| follows the fixed order below on
//            both devices, so the scale has the same bits and every run gives the same bits.
//   TOPK     UInt8[8k]: k float32 values, then their k int32 indices in ascending order; the
//            k values of largest |v|, ties broken towards the lower index.
//
// Inputs are contiguous float32 CUDA vectors; payloads and decoded vectors are new tensors on
// the same device. Everything runs on the legacy default stream (launch.cuh); TOPK's encoder
// synchronizes once (it reads the candidate count back to size its selection).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace mt::core::cuda {

// SIGN's sum of |v|, in double, in this order: blocks of kSignSumBlock consecutive values;
// inside a block, kSignSumLanes partial sums, value j of the block going to partial j % lanes,
// each partial adding its values in index order; the partials added in lane order, then the
// block sums in block order. One GPU warp sums one block with coalesced loads; the CPU loops
// the same way (dist/compressor_sign.cpp).
inline constexpr int64_t kSignSumBlock = 8192;
inline constexpr int64_t kSignSumLanes = 32;

Tensor fp16_encode(const Tensor& in);
Tensor fp16_decode(const Tensor& payload, int64_t numel);

Tensor two_bit_encode(const Tensor& in, float tau);
Tensor two_bit_decode(const Tensor& payload, int64_t numel, float tau);

Tensor sign_encode(const Tensor& in);
Tensor sign_decode(const Tensor& payload, int64_t numel);

// k in [0, n] (the compressor's k_for(n)); n at most INT32_MAX (indices are int32).
Tensor topk_encode(const Tensor& in, int64_t k);
Tensor topk_decode(const Tensor& payload, int64_t numel, int64_t k);

}  // namespace mt::core::cuda
