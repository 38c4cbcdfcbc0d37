// A run's output folder belongs to one run at a time.
//
// Training into a folder that already holds a run (its checkpoints or its metrics) would mix
// the two: the metrics log started over, best.ckpt replaced by a worse model, the rotation
// deleting the new run's checkpoints because the old run's look newer. So a new run claims its
// folder first, and the claim says what may be found there:
//   Fresh      the folder must hold no run; otherwise an error that says how to continue
//              (--resume auto), start over (--overwrite) or pick another folder;
//   Continue   the folder's run is being resumed: its files are kept;
//   Overwrite  an existing run is moved aside to "<folder>.old-<date>-<time>" (never deleted)
//              and the run starts in an empty folder;
//   StartOver  the same, for `--resume auto` that found no checkpoint: the run there died
//              before its first one (a restart after a crash in the first epoch), so it starts
//              over, and the note says why.
// A Continue claim then sets aside what the resumed run wrote after its checkpoint
// (continue_from): this run writes it again.
// A lock file (.mintrain.lock, with the owner's host, pid and start time) keeps two runs out of
// one folder at once. It is held with flock(), so a run that died left no lock behind: its file
// is only a note, and the next run takes it over and says so.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace mt::apps {

enum class RunFolderMode { Fresh, Continue, Overwrite, StartOver };

// Where a run keeps its files: the output folder, and the checkpoint folder and metrics file,
// which may lie inside it or elsewhere (absolute paths in the config).
struct RunFolderPaths {
  std::string output_dir;
  std::string checkpoint_dir;  // "" = checkpoints off
  std::string metrics_file;    // "" = no metrics log
};

// Where a resumed run continues, for what a Continue claim sets aside.
struct ResumePoint {
  std::string checkpoint;    // the file resumed from
  int64_t iteration = 0;     // where it stopped, as the job that wrote it counted
  int64_t continues_at = 0;  // the same point in this job's count
  // Samples an iteration of that job and of this one: another global batch (ranks, batch per
  // rank, micro-batches) counts the same point as another iteration. 0 = unknown (the same).
  int64_t batch_then = 0, batch_now = 0;
  std::vector<std::string> damaged;  // newer checkpoints --resume auto skipped

  bool recounted() const { return batch_then > 0 && batch_now > 0 && batch_then != batch_now; }
};

class RunFolder {
 public:
  // Claims the folder for this process (creating it): takes the lock, then checks or moves
  // aside what is there per `mode`. Throws core::Error naming the folder, what was found and
  // what to do: a core::ConfigError when a Fresh claim finds a run (starting again will not
  // help), a plain core::Error when another run holds the lock (it may end). Notes (a taken-over lock, a run moved aside) go to `log` when it is not null.
  RunFolder(RunFolderPaths paths, RunFolderMode mode, std::ostream* log);
  ~RunFolder();  // releases the lock
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  // After a Continue claim: what the resumed run wrote after `point`, this run writes again.
  // Moves aside (never deletes) the damaged checkpoints, the newer checkpoints, and the metrics
  // records past that point (the whole previous log is kept as "<metrics>.superseded-<date>-
  // <time>"). With another global batch, the iterations of the records kept are rewritten in
  // this job's count, and the checkpoints numbered past its starting point are moved aside too
  // (they would sort after its own); the trainer then saves the starting point in its count.
  // Notes go to the log.
  void continue_from(const ResumePoint& point);

  // What of a finished or stopped run lies in these paths: checkpoint and metrics files, for
  // the messages ("" when none: the folder is free for a fresh run).
  static std::string previous_run(const RunFolderPaths& paths);

  // The local date and time as 20261125-081500, for the names of things set aside; and `base`,
  // or base-2, base-3 ... whichever does not exist yet.
  static std::string timestamp();
  static std::string unused_name(const std::string& base);

  // The lock file's name inside the output folder.
  static constexpr const char* kLockName = ".mintrain.lock";

 private:
  void lock();
  void unlock();

  RunFolderPaths paths_;
  std::ostream* log_;
  int lock_fd_ = -1;
};

}  // namespace mt::apps
