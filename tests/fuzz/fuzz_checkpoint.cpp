// Fuzzes the checkpoint reader: core::load_archive (framing, records, tensors) and
// apps::load_checkpoint (metadata, restoring into a model, optimizer and synchronizer).
// The first byte's low bit asks the harness to repair the archive's size field and CRC-32
// after mutation; without that, nearly every mutated input would stop at the checksum and the
// record parser behind it would never be exercised. (Damaged size and checksum fields are
// covered by the unmodified half of the inputs and by tests/test_serialize.cpp.)
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "apps/checkpoint.h"
#include "core/error.h"
#include "core/serialize.h"
#include "fuzz_input.h"
#include "tiny_run.h"

namespace {

constexpr size_t kSizeFieldAt = 12;  // after "MTARCHV1" and the u32 version
constexpr size_t kHeaderSize = 20;   // magic, version, body size

void repair_size_and_crc(std::vector<uint8_t>& bytes) {
  if (bytes.size() < kHeaderSize + 4) return;
  const uint64_t body = bytes.size() - kHeaderSize - 4;
  std::memcpy(bytes.data() + kSizeFieldAt, &body, sizeof(body));
  const uint32_t crc = static_cast<uint32_t>(
      ::crc32_z(::crc32(0L, Z_NULL, 0), bytes.data(), bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof(crc));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static mt::fuzz::MemoryFile file;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 1) repair_size_and_crc(bytes);
  const std::string path = file.write(bytes.data(), bytes.size());
  try {
    (void)mt::core::load_archive(path);
  } catch (const mt::core::Error&) {
    return 0;
  }
  mt::fuzz::TinyRun run;  // fresh each time: a half-restored state must not leak into the next
  try {
    (void)mt::apps::load_checkpoint(path, run.model.get(), run.optimizer.get(), &run.sync);
  } catch (const mt::core::Error&) {
  }
  return 0;
}
