#include "data/idx_dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/strings.h"

namespace mt::data {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // uint8 values, 3 dims: N, rows, cols
constexpr uint32_t kLabelsMagic = 0x00000801;  // uint8 values, 1 dim: N
// Far above any real IDX file (Fashion-MNIST train is 47 MB); a corrupt header that claims
// more is rejected before we try to allocate it.
constexpr int64_t kMaxPayload = int64_t(1) << 34;

const char* kHowToGet =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or set "
    "data.path to a folder with the IDX files";

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes; returns how many were read (fewer only at the end of the data).
int64_t read_some(gzFile f, const std::string& path, uint8_t* dst, int64_t n) {
  int64_t done = 0;
  while (done < n) {
    // gzread takes an unsigned int count: read in chunks well below 4 GiB.
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, int64_t(1) << 30));
    const int got = gzread(f, dst + done, chunk);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      MT_FAIL(path, ": read error after ", done, " bytes (", msg ? msg : "unknown zlib error",
              "); the file is truncated or corrupt, re-download or reinstall it");
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// The path of `name` or `name`.gz in `folder`, whichever exists; throws an Error that says how
// to get the files when neither does.
std::string find_idx_file(const std::string& folder, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path plain = fs::path(folder) / name;
  std::error_code ec;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  const fs::path gz = fs::path(folder) / (name + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  MT_FAIL("IDX dataset: missing file ", plain.string(), " (or ", gz.filename().string(), ")",
          fs::is_directory(folder, ec) ? "" : " (the folder does not exist)", "; ", kHowToGet);
}

}  // namespace

IdxArray read_idx_file(const std::string& path, uint32_t expected_magic) {
  GzFile f(gzopen(path.c_str(), "rb"));
  MT_CHECK(f != nullptr, path, ": cannot open (", std::strerror(errno), "); ", kHowToGet);

  uint8_t head[4];
  int64_t got = read_some(f.get(), path, head, 4);
  MT_CHECK(got == 4, path, ": truncated IDX file: expected at least 4 header bytes, file has ", got);
  const uint32_t magic = big_endian_u32(head);
  const char* kind = expected_magic == kImagesMagic ? "uint8 images, 3 dims" : "uint8 labels, 1 dim";
  MT_CHECK(magic == expected_magic, path, ": wrong IDX magic ", core::formatted("0x%08X", magic), ", expected ",
           core::formatted("0x%08X", expected_magic), " (", kind, "); is this the right file?");

  IdxArray out;
  const int ndims = static_cast<int>(magic & 0xFF);
  std::vector<uint8_t> dim_bytes(4 * ndims);
  got = read_some(f.get(), path, dim_bytes.data(), 4 * ndims);
  const int64_t header = 4 + 4 * int64_t(ndims);
  MT_CHECK(got == 4 * ndims, path, ": truncated IDX file: expected at least ", header,
           " header bytes, file has ", 4 + got);
  int64_t payload = 1;
  for (int d = 0; d < ndims; ++d) {
    const int64_t n = big_endian_u32(&dim_bytes[4 * d]);
    out.dims.push_back(n);
    // Checked before multiplying: three 32-bit sizes can overflow 64 bits.
    MT_CHECK(n == 0 || payload <= kMaxPayload / n, path, ": IDX header claims an implausible size (dims ", n,
             " ...); the file is corrupt");
    payload *= n;
  }

  // Grown as the data arrives rather than allocated from the header at once: a corrupt or
  // truncated file that claims gigabytes then fails on its real length, not on the allocation.
  constexpr int64_t kChunk = int64_t(64) << 20;
  int64_t have = 0;
  while (have < payload) {
    const int64_t want = std::min(kChunk, payload - have);
    out.values.resize(static_cast<size_t>(have + want));
    got = read_some(f.get(), path, out.values.data() + have, want);
    have += got;
    MT_CHECK(got == want, path, ": truncated IDX file: the header promises ", header + payload, " bytes",
             " (uncompressed), the file has ", header + have, "; re-download or reinstall it");
  }
  // Count what follows, so the message can say how long the file really is.
  int64_t extra = 0;
  uint8_t scratch[4096];
  while (int64_t n = read_some(f.get(), path, scratch, sizeof scratch)) extra += n;
  MT_CHECK(extra == 0, path, ": IDX file longer than its header says: expected ", header + payload,
           " bytes (uncompressed), the file has ", header + payload + extra);
  return out;
}

IdxDataset::IdxDataset(const std::string& folder, bool train, std::string name, int64_t num_classes)
    : name_(std::move(name)), split_(train ? "train" : "test"), source_(folder),
      num_classes_(num_classes) {
  const std::string prefix = train ? "train" : "t10k";
  // Both lookups first, so a folder missing everything fails on the images file.
  const std::string images = find_idx_file(folder, prefix + "-images-idx3-ubyte");
  const std::string labels = find_idx_file(folder, prefix + "-labels-idx1-ubyte");
  load(images, labels);
}

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path,
                       std::string name, int64_t num_classes)
    : name_(std::move(name)), source_(images_path), num_classes_(num_classes) {
  load(images_path, labels_path);
}

void IdxDataset::load(const std::string& images_path, const std::string& labels_path) {
  MT_CHECK(num_classes_ >= 1 && num_classes_ <= 256, name_, ": num_classes must be in [1, 256], got ",
           num_classes_);
  IdxArray images = read_idx_file(images_path, kImagesMagic);
  IdxArray labels = read_idx_file(labels_path, kLabelsMagic);
  MT_CHECK(images.dims[1] > 0 && images.dims[2] > 0, images_path, ": image size ", images.dims[1],
           "x", images.dims[2], " is empty; the file is corrupt");
  MT_CHECK(images.dims[0] == labels.dims[0], images_path, " holds ", images.dims[0], " images but ",
           labels_path, " holds ", labels.dims[0],
           " labels; the two files must come from the same split (train-* with train-*, t10k-* with "
           "t10k-*)");
  for (size_t i = 0; i < labels.values.size(); ++i) {
    MT_CHECK(labels.values[i] < num_classes_, labels_path, ": label ", int(labels.values[i]),
             " of example ", i, " is not below the number of classes (", num_classes_,
             "); the file is corrupt or not a ", name_, " label file");
  }
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  pixels_ = std::move(images.values);
  labels_ = std::move(labels.values);
}

std::string IdxDataset::describe() const {
  return core::detail::concat(name_, split_.empty() ? "" : " ", split_, " (", size(), " images) from ",
                              source_);
}

int64_t IdxDataset::get(int64_t index, float* dst) const {
  MT_CHECK(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(), ")");
  const int64_t n = rows_ * cols_;
  const uint8_t* src = pixels_.data() + index * n;
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  return labels_[index];
}

}  // namespace mt::data
