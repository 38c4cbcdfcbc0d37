#include "core/serialize.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/atomic_write.h"
#include "core/error.h"

namespace mt::core {
namespace {

// Format (little-endian, as every machine we target):
//   "MTARCHV1"  u32 version  u64 body_size
//   body: u64 record_count, then per record
//     u8 kind (0 = meta, 1 = tensor)  u32 name_len  name
//     meta:   u64 value_len  value
//     tensor: u8 dtype  u32 ndim  i64 dims[ndim]  u64 nbytes  bytes
//   u32 CRC-32 of every byte before it
// body_size lets a reader tell "truncated" from "corrupt" before it checks the CRC.
constexpr char kMagic[8] = {'M', 'T', 'A', 'R', 'C', 'H', 'V', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = sizeof(kMagic) + 4 + 8;
constexpr uint8_t kMetaRecord = 0, kTensorRecord = 1;
constexpr uint32_t kMaxDims = 64;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    buf.append(p, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) { buf.append(static_cast<const char*>(p), n); }
  void put_string32(const std::string& s) {
    MT_CHECK(s.size() <= std::numeric_limits<uint32_t>::max(), "archive name too long");
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    put_bytes(s.data(), s.size());
  }
  std::string buf;
};

// Reads from an in-memory file, checking every length against what is left, so a damaged
// file produces an Error naming the file instead of a wild read or a huge allocation.
class Reader {
 public:
  Reader(const std::string& path, const char* data, size_t size)
      : path_(path), p_(data), end_(data + size) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  void need(size_t n, const char* what) const {
    MT_CHECK(n <= remaining(), "archive \"", path_, "\" is corrupt: ", what, " needs ", n,
             " bytes but only ", remaining(), " remain");
  }
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  const char* get_bytes(size_t n, const char* what) {
    need(n, what);
    const char* at = p_;
    p_ += n;
    return at;
  }
  std::string get_string32(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    return std::string(get_bytes(n, what), n);
  }

 private:
  const std::string& path_;
  const char* p_;
  const char* end_;
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

const Tensor* Archive::find(const std::string& name) const {
  const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& e) { return e.first == name; });
  return it == tensors.end() ? nullptr : &it->second;
}

StateDict Archive::with_prefix(const std::string& prefix) const {
  StateDict out;
  for (const auto& [n, t] : tensors) {
    if (n.compare(0, prefix.size(), prefix) == 0) out.emplace_back(n.substr(prefix.size()), t);
  }
  return out;
}

void Archive::add(const std::string& prefix, const StateDict& dict) {
  for (const auto& [n, t] : dict) tensors.emplace_back(prefix + n, t);
}

std::string encode_archive(const Archive& archive, const std::string& what) {
  const std::string& path = what;  // named in errors
  Writer body;
  body.put<uint64_t>(archive.meta.size() + archive.tensors.size());
  for (const auto& [key, value] : archive.meta) {
    body.put<uint8_t>(kMetaRecord);
    body.put_string32(key);
    body.put<uint64_t>(value.size());
    body.put_bytes(value.data(), value.size());
  }
  for (const auto& [name, tensor] : archive.tensors) {
    MT_CHECK(tensor.defined(), "cannot save \"", path, "\": tensor \"", name, "\" is undefined");
    const Tensor cpu = tensor.to(Device::cpu()).contiguous();
    body.put<uint8_t>(kTensorRecord);
    body.put_string32(name);
    body.put<uint8_t>(static_cast<uint8_t>(cpu.dtype()));
    body.put<uint32_t>(static_cast<uint32_t>(cpu.dim()));
    for (int64_t d : cpu.shape()) body.put<int64_t>(d);
    body.put<uint64_t>(cpu.nbytes());
    if (cpu.nbytes() > 0) body.put_bytes(cpu.raw_data(), cpu.nbytes());
  }

  Writer file;
  file.put_bytes(kMagic, sizeof(kMagic));
  file.put<uint32_t>(kVersion);
  file.put<uint64_t>(body.buf.size());
  file.buf += body.buf;
  body.buf.clear();
  body.buf.shrink_to_fit();
  const uLong crc = ::crc32_z(::crc32(0L, Z_NULL, 0),
                              reinterpret_cast<const Bytef*>(file.buf.data()), file.buf.size());
  file.put<uint32_t>(static_cast<uint32_t>(crc));
  return std::move(file.buf);
}

void save_archive(const std::string& path, const Archive& archive) {
  write_file_atomically(path, encode_archive(archive, path));
}

Archive load_archive(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "cannot open archive \"", path, "\": ", errno_text());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MT_CHECK(!in.bad(), "cannot read archive \"", path, "\": ", errno_text());
  return decode_archive(bytes, path);
}

Archive decode_archive(const std::string& bytes, const std::string& what) {
  const std::string& path = what;  // named in errors
  MT_CHECK(bytes.size() >= sizeof(kMagic) &&
               std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0,
           "\"", path, "\" is not a mintrain archive (bad magic bytes; is it a checkpoint?)");
  MT_CHECK(bytes.size() >= kHeaderSize + 4, "archive \"", path, "\" is truncated (",
           bytes.size(), " bytes, shorter than its header)");
  Reader header(path, bytes.data() + sizeof(kMagic), kHeaderSize - sizeof(kMagic));
  const auto version = header.get<uint32_t>("version");
  MT_CHECK(version == kVersion, "archive \"", path, "\" has format version ", version,
           "; this build reads version ", kVersion);
  const auto body_size = header.get<uint64_t>("body size");
  const uint64_t expected = uint64_t(kHeaderSize) + 4;
  MT_CHECK(body_size <= bytes.size() && body_size + expected == bytes.size(), "archive \"", path,
           "\" is ", body_size + expected > bytes.size() ? "truncated" : "corrupt", " (",
           bytes.size(), " bytes, its header says ", body_size, " + ", expected,
           "); the write was interrupted or the file was damaged");

  const size_t crc_at = bytes.size() - 4;
  const auto stored_crc = Reader(path, bytes.data() + crc_at, 4).get<uint32_t>("checksum");
  const uLong crc = ::crc32_z(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                              crc_at);
  MT_CHECK(static_cast<uint32_t>(crc) == stored_crc, "archive \"", path,
           "\" is corrupt: checksum mismatch (the file was damaged after it was written)");

  Archive archive;
  Reader r(path, bytes.data() + kHeaderSize, static_cast<size_t>(body_size));
  const auto count = r.get<uint64_t>("record count");
  for (uint64_t i = 0; i < count; ++i) {
    const auto kind = r.get<uint8_t>("record kind");
    std::string name = r.get_string32("record name");
    if (kind == kMetaRecord) {
      const auto n = r.get<uint64_t>("meta value length");
      archive.meta[name] = std::string(r.get_bytes(n, "meta value"), n);
    } else if (kind == kTensorRecord) {
      const auto dtype_code = r.get<uint8_t>("tensor dtype");
      MT_CHECK(dtype_code <= static_cast<uint8_t>(DType::UInt8), "archive \"", path,
               "\" is corrupt: tensor \"", name, "\" has unknown dtype code ", int(dtype_code));
      const auto dtype = static_cast<DType>(dtype_code);
      const auto ndim = r.get<uint32_t>("tensor rank");
      MT_CHECK(ndim <= kMaxDims, "archive \"", path, "\" is corrupt: tensor \"", name, "\" has ",
               ndim, " dimensions");
      Shape shape(ndim);
      // The element count is bounded by the bytes left, so no product can overflow past it.
      uint64_t numel = 1;
      const uint64_t limit = r.remaining();
      // An empty tensor holds no bytes, but its other sizes are still multiplied (element
      // count, strides): [2^40, 2^40, 0] must not get that far.
      int64_t nonzero_product = 1;
      for (auto& d : shape) {
        d = r.get<int64_t>("tensor shape");
        MT_CHECK(d >= 0, "archive \"", path, "\" is corrupt: tensor \"", name,
                 "\" has a negative size");
        MT_CHECK(d == 0 || !__builtin_mul_overflow(nonzero_product, d, &nonzero_product),
                 "archive \"", path, "\" is corrupt: tensor \"", name, "\" has an impossible shape");
        if (d != 0 && numel > limit / static_cast<uint64_t>(d)) numel = limit + 1;
        else numel *= static_cast<uint64_t>(d);
      }
      const auto nbytes = r.get<uint64_t>("tensor byte count");
      MT_CHECK(numel <= limit && nbytes == numel * element_size(dtype), "archive \"", path,
               "\" is corrupt: tensor \"", name, "\" of shape ", shape_str(shape), " and dtype ",
               dtype_name(dtype), " says it holds ", nbytes, " bytes");
      const char* src = r.get_bytes(nbytes, "tensor data");
      Tensor t = Tensor::empty(shape, dtype);
      if (nbytes > 0) std::memcpy(t.raw_data(), src, nbytes);
      archive.tensors.emplace_back(std::move(name), std::move(t));
    } else {
      MT_FAIL("archive \"", path, "\" is corrupt: record ", i, " has unknown kind ", int(kind));
    }
  }
  MT_CHECK(r.remaining() == 0, "archive \"", path, "\" is corrupt: ", r.remaining(),
           " unexpected bytes after the last record");
  return archive;
}

}  // namespace mt::core
