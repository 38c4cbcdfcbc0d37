#include "data/cifar_dataset.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace mt::data {

namespace {

const char* kHowToGet =
    "download the CIFAR-10 binary version (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz), "
    "extract it, and set data.path to the cifar-10-batches-bin folder";

std::vector<std::string> split_files(bool train) {
  if (!train) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

}  // namespace

CifarDataset::CifarDataset(const std::string& folder, bool train)
    : split_(train ? "train" : "test"), folder_(folder) {
  namespace fs = std::filesystem;
  const std::vector<std::string> names = split_files(train);
  std::error_code ec;
  // Accept the folder the tarball was extracted in, a common mistake that costs nothing to allow.
  if (!fs::exists(fs::path(folder) / names[0], ec) &&
      fs::exists(fs::path(folder) / "cifar-10-batches-bin" / names[0], ec)) {
    folder_ = (fs::path(folder) / "cifar-10-batches-bin").string();
  }
  // Check every file before reading any, so a half-extracted folder fails fast.
  for (const std::string& name : names) {
    const fs::path path = fs::path(folder_) / name;
    MT_CHECK(fs::is_regular_file(path, ec), "CIFAR-10: missing file ", path.string(),
             fs::is_directory(folder_, ec) ? "" : " (the folder does not exist)", "; ", kHowToGet);
  }
  for (const std::string& name : names) append_file((fs::path(folder_) / name).string());
}

void CifarDataset::append_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MT_CHECK(in.good(), path, ": cannot open (", std::strerror(errno), "); ", kHowToGet);
  const int64_t bytes = static_cast<int64_t>(in.tellg());
  MT_CHECK(bytes > 0 && bytes % kRecordBytes == 0, path, ": size ", bytes,
           " bytes is not a positive multiple of the ", kRecordBytes,
           "-byte CIFAR-10 record (1 label + 3072 pixels); the file is truncated or not the "
           "binary version; ",
           kHowToGet);
  in.seekg(0);
  std::vector<uint8_t> raw(static_cast<size_t>(bytes));
  in.read(reinterpret_cast<char*>(raw.data()), bytes);
  MT_CHECK(in.gcount() == bytes, path, ": read ", in.gcount(), " of ", bytes, " bytes");

  const int64_t n = bytes / kRecordBytes;
  const size_t base = labels_.size();
  labels_.resize(base + n);
  pixels_.resize((base + n) * kImageBytes);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = raw.data() + r * kRecordBytes;
    MT_CHECK(rec[0] < 10, path, ": label ", int(rec[0]), " of record ", r,
             " is not a CIFAR-10 class (0..9); is this CIFAR-100 or a corrupt file?");
    labels_[base + r] = rec[0];
    std::memcpy(&pixels_[(base + r) * kImageBytes], rec + 1, kImageBytes);
  }
}

std::string CifarDataset::describe() const {
  return core::detail::concat("cifar10 ", split_, " (", size(), " images) from ", folder_);
}

int64_t CifarDataset::get(int64_t index, float* dst) const {
  MT_CHECK(index >= 0 && index < size(), "cifar10: index ", index, " out of range [0, ", size(), ")");
  const uint8_t* src = pixels_.data() + index * kImageBytes;
  for (int64_t i = 0; i < kImageBytes; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  return labels_[index];
}

}  // namespace mt::data
