#include "core/atomic_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mt::core {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "cannot write \"", path, "\": creating \"", tmp, "\" failed: ", errno_text(),
           "; check that the folder exists and is writable");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      MT_FAIL("cannot write \"", path, "\": ", why, " (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    MT_FAIL("cannot write \"", path, "\": flushing to disk failed: ", why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    MT_FAIL("cannot write \"", path, "\": renaming the temporary file failed: ", why);
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on folders
    ::close(dfd);
  }
}

}  // namespace mt::core
