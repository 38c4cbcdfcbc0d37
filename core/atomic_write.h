// Replacing a file so that a reader, or a crash, never sees it half written: the bytes go to a
// temporary file next to it ("<path>.tmp.<pid>"), which is fsynced and renamed over the path,
// and the folder is fsynced so that the rename itself survives a crash. Errors name the path
// and the cause.
#pragma once
#include <string>

namespace mt::core {

void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace mt::core
