// `mintrain plot`: PNG curves of one or more runs from their metrics.jsonl, drawn by gnuplot.
//
//   mintrain plot RUN_DIR... [--out DIR]
//
// Each RUN_DIR is a run's output folder (the metrics.jsonl that `train` writes there) or the
// metrics file itself. Eight PNGs go to DIR (default: RUN_DIR/plots for one run, ./plots for
// several): loss, accuracy, learning rate and throughput (img_s or tok_s), each against the
// iteration (<chart>-iter.png) and against the seconds since the run started (<chart>-time.png).
// Every run is its own curve, named by its folder in the legend; loss and accuracy have a curve
// for the train records and one for the eval records (dashed, with points, in a darker shade of
// the run's colour). A chart with no
// values at all (e.g. no accuracy) is left out with a note. Next to the PNGs: plots.gp, the
// gnuplot script, and data/, the columns it reads, so a figure can be restyled by hand.
//
// gnuplot (Debian's gnuplot-nox) draws them, with its pngcairo terminal where it has one, else
// png. Errors name the input: a missing folder, a folder without metrics.jsonl, a line that is
// not a JSON record (file and line number; a cut last line is only a warning), gnuplot missing
// (and how to install it). A malformed command line (no RUN_DIR) is a FlagError: exit 2.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace mt::apps {

// One point of a curve: a value against the global iteration and the run's clock.
struct MetricsPoint {
  double iter = 0;
  double time = 0;
  double value = 0;
};

// The curves of one run, read from its metrics.jsonl. A field that is missing or null in a
// record (a diverged loss is written as null) leaves that record out of that curve only.
struct RunCurves {
  std::string name;  // the run's folder name: the legend
  std::string unit;  // "img" or "tok" (from img_s / tok_s); "" when no record has a throughput
  std::vector<MetricsPoint> train_loss, train_acc, train_lr, train_throughput;
  std::vector<MetricsPoint> eval_loss, eval_acc;
};

// Reads RUN_DIR/metrics.jsonl (or RUN_DIR itself when it is a file). Throws core::Error naming
// the folder, or the file and line of a record that does not parse; a last line cut short (a
// run killed while writing it, or still running) is skipped with a warning to `warnings`.
RunCurves read_run_curves(const std::string& run, std::ostream* warnings = nullptr);

// Writes the PNGs, plots.gp and data/ into out_dir (created if needed) by running `gnuplot`
// (found on PATH); returns the PNG paths written. Notes on skipped charts go to `log`.
std::vector<std::string> plot_runs(const std::vector<RunCurves>& runs, const std::string& out_dir,
                                   std::ostream& log);

// The command: parses `RUN_DIR... [--out DIR]` (or --help), plots, lists what it wrote.
int run_plot_command(const std::vector<std::string>& args, std::ostream& out);

}  // namespace mt::apps
