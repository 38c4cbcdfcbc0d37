#include "apps/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <system_error>

#include "apps/checkpoint.h"
#include "core/error.h"
#include "core/strings.h"

namespace mt::apps {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// Whether `path` lies inside `dir` (both as given, made absolute and normal).
bool inside(const std::string& path, const std::string& dir) {
  const fs::path p = fs::absolute(path).lexically_normal(), d = fs::absolute(dir).lexically_normal();
  const auto rel = p.lexically_relative(d);
  return !rel.empty() && *rel.begin() != "..";
}

// "<path>.old-<date>-<time>".
std::string aside_name(const std::string& path) {
  std::string base = fs::path(path).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return RunFolder::unused_name(base + ".old-" + RunFolder::timestamp());
}

void move_aside(const std::string& path, std::vector<std::string>& moved) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return;
  const std::string to = aside_name(path);
  fs::rename(path, to, ec);
  MT_CHECK(!ec, "cannot move the previous run's \"", path, "\" aside to \"", to, "\": ", ec.message(),
           "; move or remove it by hand, or pick another folder with --output DIR");
  moved.push_back(to);
}

// The metrics log of a resumed run keeps the records up to the resume point (see
// RunFolder::continue_from); a line that is no whole record (cut by a kill) goes too.
std::string rewind_metrics(const std::string& file, const ResumePoint& point) {
  std::error_code ec;
  if (file.empty() || !fs::is_regular_file(file, ec)) return "";
  const bool recount = point.recounted();
  std::ifstream in(file);
  std::string kept, line;
  int64_t dropped = 0, recounted = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // The integers of "iter" and "epoch_iter" in the record's text (m[1]: where it stands).
    static const std::regex kIter("\"iter\":([0-9]+)"), kEpochIter("\"epoch_iter\":([0-9]+)");
    std::smatch m;
    const bool whole = line.front() == '{' && line.back() == '}';
    if (!whole || (std::regex_search(line, m, kIter) && std::stoll(m[1].str()) > point.iteration)) {
      ++dropped;
      continue;
    }
    if (recount) {
      for (const std::regex* key : {&kIter, &kEpochIter}) {
        if (!std::regex_search(line, m, *key)) continue;
        const int64_t theirs = std::stoll(m[1].str());
        line.replace(m.position(1), m.length(1), std::to_string(theirs * point.batch_then / point.batch_now));
      }
      ++recounted;
    }
    kept += line + "\n";
  }
  in.close();
  if (dropped == 0 && recounted == 0) return "";
  const std::string aside = RunFolder::unused_name(file + ".superseded-" + RunFolder::timestamp());
  fs::rename(file, aside, ec);
  MT_CHECK(!ec, "cannot move the metrics log \"", file, "\" aside to \"", aside, "\": ", ec.message());
  std::ofstream out(file, std::ios::trunc);
  out << kept;
  out.flush();
  MT_CHECK(out.good(), "cannot write the metrics log \"", file, "\" (disk full?); the previous one is \"",
           aside, "\"");
  std::string note = file + ": ";
  if (dropped > 0) note += std::to_string(dropped) + " records after iteration " + std::to_string(point.iteration) +
                           " dropped (this run writes them again)";
  if (recounted > 0) {
    note += std::string(dropped > 0 ? "; " : "") + "the iterations of the " + std::to_string(recounted) +
            " records kept converted to this job's count (global batch " + std::to_string(point.batch_now) +
            ", theirs " + std::to_string(point.batch_then) + ")";
  }
  return note + "; the previous log is kept as " + aside;
}

// Interrupted checkpoint writes leave "<file>.tmp.<pid>" behind (core/atomic_write.h writes to
// such a file, then renames it). With the folder locked no other run is writing one.
void remove_stale_temporaries(const std::string& dir, std::ostream* log) {
  std::error_code ec;  // no folder (checkpoints off, or none yet): nothing to iterate
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().find(".ckpt.tmp.") == std::string::npos) continue;
    std::error_code rm;
    fs::remove(entry.path(), rm);
    if (log && !rm) *log << "note: removed " << entry.path().string() << ", left by an interrupted save\n";
  }
}

std::string local_time(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

}  // namespace

std::string RunFolder::timestamp() { return local_time("%Y%m%d-%H%M%S"); }

std::string RunFolder::unused_name(const std::string& base) {
  std::string name = base;
  std::error_code ec;
  for (int i = 2; fs::exists(name, ec); ++i) name = base + "-" + std::to_string(i);
  return name;
}

std::string RunFolder::previous_run(const RunFolderPaths& paths) {
  std::string found;
  std::error_code ec;
  if (!paths.checkpoint_dir.empty() && fs::is_directory(paths.checkpoint_dir, ec)) {
    const std::vector<std::string> files = CheckpointDir::list(paths.checkpoint_dir);
    if (!files.empty()) {
      found = std::to_string(files.size()) + " checkpoint" + (files.size() > 1 ? "s" : "") +
              " (newest " + fs::path(files.back()).filename().string() + ")";
    }
    if (fs::exists(fs::path(paths.checkpoint_dir) / "best.ckpt", ec)) {
      found += std::string(found.empty() ? "" : ", ") + "best.ckpt";
    }
  }
  if (!paths.metrics_file.empty() && fs::is_regular_file(paths.metrics_file, ec) &&
      fs::file_size(paths.metrics_file, ec) > 0) {
    found += std::string(found.empty() ? "" : " and ") + "a metrics log (" +
             fs::path(paths.metrics_file).filename().string() + ")";
  }
  return found;
}

RunFolder::RunFolder(RunFolderPaths paths, RunFolderMode mode, std::ostream* log)
    : paths_(std::move(paths)), log_(log) {
  lock();
  const std::string previous = previous_run(paths_);
  if (mode == RunFolderMode::Fresh && !previous.empty()) {
    unlock();
    throw core::ConfigError(core::detail::concat(
        "the output folder \"", paths_.output_dir, "\" already holds a run: ", previous,
        ". To continue that run: the same command with --resume auto; to start over: add --overwrite (moves "
        "the old run aside to \"", paths_.output_dir, ".old-<date>-<time>\", deleting nothing); or train into "
        "another folder with --output DIR"));
  }
  if ((mode == RunFolderMode::Overwrite || mode == RunFolderMode::StartOver) && !previous.empty()) {
    // The pieces outside the output folder first, then the folder itself (with our lock file
    // in it), which is then made again, empty, and locked again.
    std::vector<std::string> moved;
    if (!inside(paths_.checkpoint_dir, paths_.output_dir)) move_aside(paths_.checkpoint_dir, moved);
    if (!inside(paths_.metrics_file, paths_.output_dir)) move_aside(paths_.metrics_file, moved);
    move_aside(paths_.output_dir, moved);
    unlock();
    lock();
    if (log && mode == RunFolderMode::StartOver) {
      *log << "--resume auto: no checkpoint to continue from, but \"" << paths_.output_dir << "\" holds a run ("
           << previous << ") that stopped before its first checkpoint: starting it over; its files were moved to "
           << core::join(moved) << " (nothing was deleted)\n";
    } else if (log) {
      for (const auto& m : moved) *log << "--overwrite: the previous run was moved to " << m << "\n";
    }
  }
  remove_stale_temporaries(paths_.checkpoint_dir, log);
}

void RunFolder::continue_from(const ResumePoint& point) {
  std::vector<std::string> notes;
  if (!paths_.checkpoint_dir.empty()) {
    notes.push_back(CheckpointDir::set_aside_damaged(point.damaged));
    const int64_t past = point.recounted() ? std::min(point.iteration, point.continues_at) : point.iteration;
    const CheckpointDir::SetAside moved = CheckpointDir::set_aside_newer_than(paths_.checkpoint_dir, past);
    if (!moved.names.empty()) {
      const std::string names = core::join(moved.names);
      notes.push_back(
          point.recounted()
              ? "the checkpoints numbered past iteration " + std::to_string(past) + " (" + names + ") were moved to " +
                    moved.folder + ": they count iterations of global batch " + std::to_string(point.batch_then) +
                    ", and this run counts global batch " + std::to_string(point.batch_now) +
                    " from iteration " + std::to_string(point.continues_at) + " on, so they would sort after its own"
              : "the checkpoints newer than " + fs::path(point.checkpoint).filename().string() + " (" + names +
                    ") were moved to " + moved.folder + " (this run replaces them)");
    }
  }
  notes.push_back(rewind_metrics(paths_.metrics_file, point));
  if (log_ == nullptr) return;
  for (const auto& note : notes) {
    if (!note.empty()) *log_ << "note: " << note << "\n";
  }
}

RunFolder::~RunFolder() { unlock(); }

void RunFolder::lock() {
  std::error_code ec;
  fs::create_directories(paths_.output_dir, ec);
  MT_CHECK(!ec, "cannot create the output folder \"", paths_.output_dir, "\": ", ec.message(),
           "; pass --output DIR or set output_dir to a writable place");
  const std::string path = (fs::path(paths_.output_dir) / kLockName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "cannot open the lock file \"", path, "\": ", std::strerror(errno),
           "; pass --output DIR with a writable folder");
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  const std::string owner = core::trim(n > 0 ? std::string(buf, static_cast<size_t>(n)) : "");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    MT_CHECK(err != EWOULDBLOCK, "the output folder \"", paths_.output_dir, "\" is in use by another run (",
             owner.empty() ? "owner unknown" : owner, "); wait for it to finish or stop it, or train into ",
             "another folder with --output DIR");
    MT_FAIL("cannot lock \"", path, "\": ", std::strerror(err), "; pass --output DIR on a local disk");
  }
  // A held lock leaves an empty file when released (see unlock); text in it is the note of a
  // run that ended without releasing it (killed, or its machine went down).
  if (!owner.empty() && log_ != nullptr) {
    *log_ << "note: taking over the lock of \"" << paths_.output_dir << "\" left by a run that is no longer "
          << "running (" << owner << ")\n";
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host_name() + ", since " +
                         local_time("%Y-%m-%d %H:%M:%S") + "\n";
  const bool written = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  if (!written) {
    ::close(fd);
    MT_FAIL("cannot write the lock file \"", path, "\": ", std::strerror(errno),
            "; free some disk space or pass --output DIR");
  }
  lock_fd_ = fd;
}

void RunFolder::unlock() {
  if (lock_fd_ < 0) return;
  // Emptied, not removed: removing a lock file races with a process that opened it already.
  [[maybe_unused]] const int truncated = ::ftruncate(lock_fd_, 0);
  ::close(lock_fd_);  // releases the flock
  lock_fd_ = -1;
}

}  // namespace mt::apps
