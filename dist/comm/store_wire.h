// The TCP store's message encoding, shared by client and server (see tcp_store.h for the
// framing). Reader never reads past its buffer: a truncated or lying field makes ok() false,
// which the server answers with an error instead of crashing.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mt::dist::wire {

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5, kWait = 6 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kError = 2 };

// Frames above this are refused before their bytes are buffered: the largest value plus room
// for the key and the header.
constexpr uint32_t kMaxFrameBytes = (64u << 20) + (1u << 20);
constexpr uint32_t kMaxKeys = 1u << 16;

class Writer {
 public:
  Writer& u8(uint8_t v) { buf_.push_back(v); return *this; }
  Writer& u32(uint32_t v) { return raw(&v, 4); }  // little-endian hosts only (x86, arm64)
  Writer& i64(int64_t v) { return raw(&v, 8); }
  Writer& bytes(const void* p, size_t n) { u32(static_cast<uint32_t>(n)); return raw(p, n); }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  // The payload with its u32 length in front, ready to send.
  std::vector<uint8_t> frame() const {
    std::vector<uint8_t> out(4 + buf_.size());
    const uint32_t n = static_cast<uint32_t>(buf_.size());
    std::memcpy(out.data(), &n, 4);
    if (!buf_.empty()) std::memcpy(out.data() + 4, buf_.data(), buf_.size());
    return out;
  }

 private:
  Writer& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    return *this;
  }
  std::vector<uint8_t> buf_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t n) : p_(data), end_(data + n) {}
  uint8_t u8() { uint8_t v = 0; raw(&v, 1); return v; }
  uint32_t u32() { uint32_t v = 0; raw(&v, 4); return v; }
  int64_t i64() { int64_t v = 0; raw(&v, 8); return v; }
  std::vector<uint8_t> bytes() {
    const uint32_t n = u32();
    if (!ok_ || n > static_cast<size_t>(end_ - p_)) { ok_ = false; return {}; }
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  std::string str() { auto b = bytes(); return std::string(b.begin(), b.end()); }
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }

 private:
  void raw(void* out, size_t n) {
    if (!ok_ || n > static_cast<size_t>(end_ - p_)) { ok_ = false; return; }
    std::memcpy(out, p_, n);
    p_ += n;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace mt::dist::wire
