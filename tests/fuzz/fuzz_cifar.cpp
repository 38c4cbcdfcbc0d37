// Fuzzes the CIFAR-10 binary reader (data/cifar_dataset.h): the input is the test split's
// test_batch.bin; the first examples of an accepted file are decoded and checked.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/cifar_dataset.h"

namespace {

// A folder of its own on tmpfs when there is one (the reader takes a folder, not a file),
// removed at exit.
struct ScratchFolder {
  std::string path;
  ScratchFolder() {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    path = (base / ("mintrain_fuzz_cifar_" + std::to_string(::getpid()))).string();
    fs::create_directories(path);
  }
  ~ScratchFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& folder() {
  static const ScratchFolder scratch;
  return scratch.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(folder() + "/test_batch.bin", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const mt::data::CifarDataset ds(folder(), /*train=*/false);
    std::vector<float> pixels(mt::data::CifarDataset::kImageBytes);
    for (int64_t i = 0; i < std::min<int64_t>(ds.size(), 4); ++i) {
      const int64_t label = ds.get(i, pixels.data());
      if (label < 0 || label >= 10) __builtin_trap();  // the reader let a bad label through
    }
  } catch (const mt::core::Error&) {
  }
  return 0;
}
