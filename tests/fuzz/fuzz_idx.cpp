// Fuzzes the IDX reader (data/idx_dataset.h), plain or gzipped. The first byte picks what is
// read: an images file, a labels file, or (the rest split in two) an images + labels pair as a
// dataset, whose first examples are then decoded.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "data/idx_dataset.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static mt::fuzz::MemoryFile images_file, labels_file;
  const uint8_t mode = data[0] % 3;
  ++data, --size;
  try {
    if (mode == 0) {
      (void)mt::data::read_idx_file(images_file.write(data, size), 0x00000803);
    } else if (mode == 1) {
      (void)mt::data::read_idx_file(labels_file.write(data, size), 0x00000801);
    } else {
      if (size < 2) return 0;
      const size_t split = std::min<size_t>(size - 2, (size_t(data[0]) << 8) | data[1]);
      data += 2, size -= 2;
      const std::string images = images_file.write(data, split);
      const std::string labels = labels_file.write(data + split, size - split);
      const mt::data::IdxDataset ds(images, labels, "fuzz", 10);
      const auto shape = ds.image_shape();
      std::vector<float> pixels(static_cast<size_t>(shape[1] * shape[2]));
      for (int64_t i = 0; i < std::min<int64_t>(ds.size(), 4); ++i) {
        const int64_t label = ds.get(i, pixels.data());
        if (label < 0 || label >= ds.num_classes()) __builtin_trap();  // the reader let it through
      }
    }
  } catch (const mt::core::Error&) {
  }
  return 0;
}
