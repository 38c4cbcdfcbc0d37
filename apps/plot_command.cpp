#include "apps/plot_command.h"

#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "apps/flags.h"
#include "core/atomic_write.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace mt::apps {

namespace {

constexpr const char* kUsage =
    "usage: mintrain plot RUN_DIR... [--out DIR]\n"
    "  PNG curves of loss, accuracy, learning rate and throughput against iterations and time,\n"
    "  from each RUN_DIR's metrics.jsonl, several runs overlaid; DIR defaults to RUN_DIR/plots\n"
    "  for one run and ./plots for several. Needs gnuplot (apt-get install gnuplot-nox).\n";

// One colour family per run, in the order the runs come: its train curve in the colour, its
// eval curve in a darker shade of it (and dashed, with points).
struct Colours {
  const char* train;
  const char* eval;
};
const std::vector<Colours> kColours = {{"#1f77b4", "#114163"}, {"#ff7f0e", "#8c4608"}, {"#2ca02c", "#185818"},
                                       {"#d62728", "#761516"}, {"#9467bd", "#513968"}, {"#8c564b", "#4d2f29"},
                                       {"#e377c2", "#7d416b"}, {"#17becf", "#0d6972"}, {"#bcbd22", "#676813"},
                                       {"#7f7f7f", "#464646"}};

// A field of a record as a number; false when it is missing or null (a non-finite value).
bool number_of(const nlohmann::json& record, const std::string& key, const std::string& where, double* v) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) return false;
  MT_CHECK(it->is_number(), where, ": \"", key, "\" is ", it->dump(), ", not a number");
  *v = it->get<double>();
  return std::isfinite(*v);
}

std::string run_name(const fs::path& folder) {
  const fs::path clean = folder.lexically_normal();
  const std::string name = (clean.has_filename() ? clean : clean.parent_path()).filename().string();
  return name.empty() || name == "." ? fs::absolute(folder).lexically_normal().parent_path().filename().string()
                                     : name;
}

// `text` in single quotes, a quote inside written as `quote`: a gnuplot string literal doubles
// it, the shell writes '\''.
std::string quoted(const std::string& text, const char* quote = "''") {
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string(quote) : std::string(1, c);
  return out + "'";
}

// One chart: which curve of each run it draws, for train and eval records.
struct Chart {
  std::string file;    // "loss" -> loss-iter.png and loss-time.png
  std::string title;
  std::string ylabel;
  std::function<const std::vector<MetricsPoint>*(const RunCurves&)> train, eval;  // eval may be null
};

std::string throughput_label(const std::vector<RunCurves>& runs) {
  std::string unit;
  for (const auto& r : runs) {
    if (r.unit.empty()) continue;
    if (!unit.empty() && unit != r.unit) return "samples/s (images or tokens)";
    unit = r.unit;
  }
  return unit == "tok" ? "tokens/s" : unit == "img" ? "images/s" : "samples/s";
}

void write_points(const fs::path& file, const std::vector<MetricsPoint>& points) {
  std::ostringstream out;
  out << "# iter\ttime\tvalue\n";
  for (const auto& p : points) out << p.iter << '\t' << p.time << '\t' << p.value << '\n';
  core::write_file_atomically(file.string(), out.str());
}

}  // namespace

RunCurves read_run_curves(const std::string& run, std::ostream* warnings) {
  const fs::path folder(run);
  MT_CHECK(fs::exists(folder), "plot: run folder \"", run, "\" does not exist");
  const fs::path file = fs::is_directory(folder) ? folder / "metrics.jsonl" : folder;
  MT_CHECK(fs::exists(file), "plot: no metrics.jsonl in \"", run, "\": give a run's output folder "
           "(`train` writes metrics.jsonl there unless logging.metrics_file names another file; "
           "then give that file)");
  std::ifstream in(file);
  MT_CHECK(in.good(), "plot: cannot read \"", file.string(), "\"");
  RunCurves curves;
  curves.name = run_name(fs::is_directory(folder) ? folder : folder.parent_path());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string::npos) lines.pop_back();
  int records = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file.string() + " line " + std::to_string(i + 1);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // The last line of a run killed while writing it (or still writing it) is cut short.
      if (i + 1 == lines.size()) {
        if (warnings) {
          *warnings << "plot: warning: " << where << " is cut short (the run was killed, or is writing it); skipped\n";
        }
        break;
      }
      MT_FAIL("plot: ", where, ": not a JSON record (", e.what(), "); remove that line to plot the rest");
    }
    MT_CHECK(record.is_object(), where, ": not a JSON object");
    const std::string type = record.value("type", "");
    if (type != "train" && type != "eval") continue;  // other kinds of records are not curves
    MetricsPoint at;
    MT_CHECK(number_of(record, "iter", where, &at.iter), "plot: ", where, ": no \"iter\" number");
    MT_CHECK(number_of(record, "time", where, &at.time), "plot: ", where, ": no \"time\" number");
    ++records;
    auto add = [&](std::vector<MetricsPoint>& curve, const std::string& key) {
      MetricsPoint p = at;
      if (number_of(record, key, where, &p.value)) curve.push_back(p);
    };
    if (type == "train") {
      add(curves.train_loss, "loss");
      add(curves.train_acc, "acc");
      add(curves.train_lr, "lr");
      for (const std::string unit : {"img", "tok"}) {
        if (!record.contains(unit + "_s")) continue;
        curves.unit = unit;
        add(curves.train_throughput, unit + "_s");
      }
    } else {
      add(curves.eval_loss, "loss");
      add(curves.eval_acc, "acc");
    }
  }
  MT_CHECK(records > 0, "plot: ", file.string(), " has no train or eval records yet");
  return curves;
}

std::vector<std::string> plot_runs(const std::vector<RunCurves>& runs, const std::string& out_dir,
                                   std::ostream& log) {
  MT_CHECK(!runs.empty(), "plot: no runs to plot");
  MT_CHECK(std::system("command -v gnuplot >/dev/null 2>&1") == 0, "plot: gnuplot not found on PATH; install it "
           "(Debian/Ubuntu: apt-get install gnuplot-nox, which apps/scripts/install_deps.sh does)");
  const fs::path out = fs::absolute(out_dir);
  std::error_code ec;
  fs::create_directories(out / "data", ec);
  MT_CHECK(!ec, "plot: cannot create \"", (out / "data").string(), "\": ", ec.message());

  const std::vector<Chart> charts = {
      {"loss", "loss", "loss", [](const RunCurves& r) { return &r.train_loss; },
       [](const RunCurves& r) { return &r.eval_loss; }},
      {"accuracy", "accuracy", "accuracy (%)", [](const RunCurves& r) { return &r.train_acc; },
       [](const RunCurves& r) { return &r.eval_acc; }},
      {"lr", "learning rate", "learning rate", [](const RunCurves& r) { return &r.train_lr; }, nullptr},
      {"throughput", "throughput", throughput_label(runs),
       [](const RunCurves& r) { return &r.train_throughput; }, nullptr},
  };

  // Every curve's points in a file of its own; a curve without points is not drawn (gnuplot
  // refuses a plot whose every point is undefined).
  std::ostringstream script;
  script << "# Written by `mintrain plot`; run `gnuplot " << (out / "plots.gp").string()
         << "` to draw again.\n"
         << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         << "  set terminal pngcairo size 1000,600 noenhanced font ',11'\n"
         << "} else {\n"
         << "  set terminal png size 1000,600 noenhanced\n"
         << "}\n"
         << "set grid\nset key below\n";
  std::vector<std::string> written;
  for (const Chart& chart : charts) {
    std::vector<std::string> curves;  // the plot command's parts
    for (size_t i = 0; i < runs.size(); ++i) {
      const RunCurves& run = runs[i];
      const bool two_kinds = chart.eval != nullptr;
      auto add = [&](const std::vector<MetricsPoint>& points, const std::string& kind, bool eval) {
        if (points.empty()) return;
        const Colours& family = kColours[i % kColours.size()];
        const fs::path data = out / "data" / ("run" + std::to_string(i) + "-" + kind + "-" + chart.file + ".tsv");
        write_points(data, points);
        const std::string title = run.name + (two_kinds ? " " + kind : "");
        curves.push_back(quoted(data.string()) + " using X:3 with " +
                         (eval ? "linespoints dt 2 pt 7 ps 0.8" : "lines") + " lw 2 lc rgb '" +
                         (eval ? family.eval : family.train) + "' title " + quoted(title));
      };
      add(*chart.train(run), "train", false);
      if (two_kinds) add(*chart.eval(run), "eval", true);
    }
    if (curves.empty()) {
      log << "plot: no " << chart.title << " in the metrics; " << chart.file << "-iter.png and "
          << chart.file << "-time.png not written\n";
      continue;
    }
    for (const auto& [axis, column, label] : {std::tuple<std::string, std::string, std::string>{"iter", "1", "iteration"},
                                              {"time", "2", "time since the start (s)"}}) {
      const fs::path png = out / (chart.file + "-" + axis + ".png");
      script << "\nset output " << quoted(png.string()) << "\nset title " << quoted(chart.title)
             << "\nset xlabel " << quoted(label) << "\nset ylabel " << quoted(chart.ylabel) << "\nplot ";
      for (size_t c = 0; c < curves.size(); ++c) {
        std::string curve = curves[c];
        curve.replace(curve.find("using X:"), 8, "using " + column + ":");
        script << (c ? ", \\\n     " : "") << curve;
      }
      script << "\nunset output\n";
      written.push_back(png.string());
    }
  }
  const fs::path script_file = out / "plots.gp";
  core::write_file_atomically(script_file.string(), script.str());
  const std::string command = "gnuplot " + quoted(script_file.string(), "'\\''") + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  MT_CHECK(pipe != nullptr, "plot: cannot run gnuplot: ", std::strerror(errno));
  std::string output;
  char buf[4096];
  while (const size_t n = std::fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int status = ::pclose(pipe);
  MT_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "plot: gnuplot failed on ",
           script_file.string(), ":\n", output);
  return written;
}

int run_plot_command(const std::vector<std::string>& args, std::ostream& out) {
  std::vector<std::string> runs;
  std::string out_dir;
  Flags f("plot", args);
  while (f.next()) {
    if (f.is("--help") || f.is("-h")) {
      out << kUsage;
      return 0;
    }
    if (f.is("--out")) out_dir = f.value();
    else if (f.is_flag()) f.unknown();
    else runs.push_back(f.arg());
  }
  if (runs.empty()) throw FlagError("plot: no run folder given (mintrain plot RUN_DIR... [--out DIR])");
  MT_CHECK(out_dir.empty() || !fs::exists(out_dir) || fs::is_directory(out_dir), "plot: --out \"", out_dir,
           "\" is a file, not a folder");
  std::vector<RunCurves> curves;
  for (const auto& run : runs) curves.push_back(read_run_curves(run, &std::cerr));
  if (out_dir.empty()) out_dir = runs.size() == 1 && fs::is_directory(runs[0]) ? (fs::path(runs[0]) / "plots").string()
                                                                              : std::string("plots");
  const auto written = plot_runs(curves, out_dir, out);
  for (const auto& png : written) out << png << "\n";
  return 0;
}

}  // namespace mt::apps
