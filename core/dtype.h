// Element types. float32 and int64 have CPU kernels; float16/bfloat16 are declared for the GPU
// mixed-precision work; uint8 holds raw image bytes in the data pipeline.
#pragma once
#include <cstddef>
#include <cstdint>

namespace mt::core {

enum class DType : uint8_t { Float32, Int64, Float16, BFloat16, UInt8 };

inline size_t element_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::UInt8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::UInt8: return "uint8";
  }
  return "?";
}

// Maps a C++ element type to its DType, so data<T>() can check what it is asked for.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };

}  // namespace mt::core
