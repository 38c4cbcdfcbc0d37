// Small helpers the tests share: fresh temporary folders, text files, the message of a thrown
// mt::core::Error, a shell command's output and status, and a substring assertion that prints
// both strings on failure.
#pragma once
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace mt::testing {

// A fresh, empty folder under gtest's temporary directory per call, so tests never see each
// other's files.
inline std::string make_temp_dir(const std::string& prefix = "mt_test") {
  std::string tmpl = (std::filesystem::path(::testing::TempDir()) / (prefix + "_XXXXXX")).string();
  char* dir = mkdtemp(tmpl.data());
  if (dir == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return dir;
}

// Writes `text` to `path` as is (binary: no newline translation); fails the test if it cannot.
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// The message of the Error that f throws, or a marker when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.what();
  }
  return "<no mt::core::Error thrown>";
}

// What a shell command printed (stdout and stderr together) and its exit status (-1 when a
// signal ended it).
struct CommandResult {
  int rc = -1;
  std::string out;
};
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\"\n  does not contain \"" << part << "\"";
}

}  // namespace mt::testing
