// Handing a fuzzer's bytes to readers that take a path (IDX, CIFAR, checkpoints, vocab files):
// an in-memory file (memfd) opened again through /proc/self/fd, so each run costs no disk I/O
// and leaves nothing behind.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace mt::fuzz {

class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("mintrain-fuzz", 0)) {
    if (fd_ < 0) std::abort();  // the harness itself is broken: no point fuzzing
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents with `size` bytes and returns a path that opens them.
  std::string write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace mt::fuzz
