#include "apps/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "apps/task.h"
#include "core/strings.h"
#include "dist/registry.h"
#include "layers/models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/registry.h"

namespace mt::apps {
namespace {

namespace pb = google::protobuf;

// Keeps protobuf's first error with its position instead of letting it log to stderr (warnings:
// the base class drops them).
class FirstErrorCollector : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (has_error) return;
    has_error = true;
    this->line = line;
    this->column = column;
    this->message = message;
  }

  bool has_error = false;
  int line = 0;
  int column = 0;
  std::string message;
};

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool is_quoted(const std::string& s) {
  return s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front();
}

std::vector<std::string> field_names(const pb::Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
  return names;
}

// The text-format value for one element of `field` given as the user typed it.
std::string element_text(const pb::FieldDescriptor* field, const std::string& raw) {
  const std::string v = core::trim(raw);
  if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING && !is_quoted(v)) return quote(v);
  return v;
}

void check_name(const std::string& field, const std::string& value,
                const std::vector<std::string>& valid) {
  if (std::find(valid.begin(), valid.end(), value) != valid.end()) return;
  MT_FAIL(field, ": unknown name \"", value, "\"; valid names are: ", core::join(valid));
}

template <typename T>
void check_min(const std::string& field, T value, T min, const char* what = ">=") {
  const bool ok = std::string(what) == ">" ? value > min : value >= min;
  MT_CHECK(ok, field, " must be ", what, " ", min, " (got ", value, ")");
}

void validate_transform(const std::string& where, const mintrain::TransformConfig& t) {
  MT_CHECK(t.mean_size() == t.std_size(), where, ".mean and ", where,
           ".std must have the same number of values (got ", t.mean_size(), " and ", t.std_size(),
           ")");
  for (float s : t.std()) MT_CHECK(s > 0, where, ".std values must be > 0 (got ", s, ")");
  check_min<int64_t>(where + ".random_crop_padding", t.random_crop_padding(), 0);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Every float and double the config sets must be a finite number: protobuf's text format reads
// "inf" and "nan", and no field means either.
void check_finite(const pb::Message& msg, const std::string& prefix) {
  const pb::Reflection* refl = msg.GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  refl->ListFields(msg, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const std::string name = prefix + f->name();
    const int n = f->is_repeated() ? refl->FieldSize(msg, f) : 1;
    for (int i = 0; i < n; ++i) {
      double v = 0.0;
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
          check_finite(f->is_repeated() ? refl->GetRepeatedMessage(msg, f, i) : refl->GetMessage(msg, f), name + ".");
          continue;
        case pb::FieldDescriptor::CPPTYPE_FLOAT:
          v = f->is_repeated() ? refl->GetRepeatedFloat(msg, f, i) : refl->GetFloat(msg, f);
          break;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
          v = f->is_repeated() ? refl->GetRepeatedDouble(msg, f, i) : refl->GetDouble(msg, f);
          break;
        default:
          continue;
      }
      MT_CHECK(std::isfinite(v), name, " must be a finite number (got ", v, ")");
    }
  }
}

// A flat dist field of older configs, which moved into an algorithm's message: what to set now.
// "" for any other name.
std::string moved_field_note(const std::string& field) {
  const std::string now = dist::moved_dist_field(field);
  return now.empty() ? "" : "dist." + field + " is no longer read by training: set " + now + " instead";
}

}  // namespace

RunConfig parse_config(const std::string& text, const std::string& source_name) {
  RunConfig config;
  FirstErrorCollector errors;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config) || errors.has_error) {
    // protobuf says: Message type "mintrain.DistConfig" has no field named "schedule".
    const std::string& m = errors.message;
    const size_t end = m.rfind('"'), begin = end == std::string::npos || end == 0 ? end : m.rfind('"', end - 1);
    if (m.find("DistConfig") != std::string::npos && begin != std::string::npos) {
      const std::string note = moved_field_note(m.substr(begin + 1, end - begin - 1));
      if (!note.empty()) MT_FAIL(source_name, ":", errors.line + 1, ": ", note);
    }
    MT_FAIL(source_name, ":", errors.line + 1, ":", errors.column + 1, ": ",
            errors.has_error ? errors.message : std::string("could not parse the config"));
  }
  return config;
}

RunConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good(), "cannot read config file \"", path, "\": ", std::strerror(errno),
           "; pass the path of a .prototxt config, e.g. configs/lenet_fashion_mnist.prototxt");
  std::ostringstream ss;
  ss << in.rdbuf();
  RunConfig config = parse_config(ss.str(), path);
  // An empty file would train the default MLP on the default data: never what was meant.
  MT_CHECK(config.ByteSizeLong() > 0, "config file \"", path, "\" sets nothing; a run needs at least its ",
           "model { name: ... }, data { type: ... } and optimizer { name: ... lr: ... } sections (see ",
           "configs/mintrain.proto); start from one of the examples in configs/");
  return config;
}

void apply_override(RunConfig& config, const std::string& assignment) {
  const auto eq = assignment.find('=');
  MT_CHECK(eq != std::string::npos && eq > 0, "--set \"", assignment,
           "\": expected path.to.field=value, e.g. --set optimizer.lr=0.05");
  const std::string path = core::trim(assignment.substr(0, eq));
  const std::string value = core::trim(assignment.substr(eq + 1));
  const std::vector<std::string> parts = core::split(path, '.');

  pb::Message* msg = &config;
  std::string walked;  // the path so far, for messages
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::Descriptor* desc = msg->GetDescriptor();
    const pb::FieldDescriptor* field = desc->FindFieldByName(parts[i]);
    if (field == nullptr) {
      if (walked == "dist" && !moved_field_note(parts[i]).empty()) MT_FAIL("--set ", path, ": ", moved_field_note(parts[i]));
      MT_FAIL("--set ", path, ": ", walked.empty() ? "the config" : "\"" + walked + "\"",
              " has no field \"", parts[i], "\"; valid fields are: ", core::join(field_names(desc)));
    }
    walked += (walked.empty() ? "" : ".") + parts[i];
    const pb::Reflection* refl = msg->GetReflection();
    const bool is_message = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    if (i + 1 < parts.size()) {
      MT_CHECK(is_message && !field->is_repeated(), "--set ", path, ": \"", walked,
               "\" is a value, not a group of fields; use --set ", walked, "=VALUE");
      msg = refl->MutableMessage(msg, field);
      continue;
    }

    // Build "field: value" text and let protobuf parse it, so every type and its error
    // messages behave exactly as in a config file.
    std::string text;
    if (is_message) {
      MT_CHECK(value.size() >= 2 && value.front() == '{' && value.back() == '}', "--set ", path,
               ": \"", walked, "\" is a group of fields; set one of them (", walked, ".",
               core::join(field_names(field->message_type()), ", " + walked + "."),
               ") or give its text in braces, e.g. ", walked, "={ ... }");
      text = field->name() + " " + value;
    } else if (field->is_repeated()) {
      std::string inner = value;
      if (inner.size() >= 2 && inner.front() == '[' && inner.back() == ']') {
        inner = core::trim(inner.substr(1, inner.size() - 2));
      }
      std::vector<std::string> elems;  // none for "" and "[]"
      for (const auto& e : core::split(inner, ',')) elems.push_back(element_text(field, e));
      if (!elems.empty()) text = field->name() + ": [" + core::join(elems) + "]";
    } else {
      text = field->name() + ": " + element_text(field, value);
    }
    // Repeated fields and messages are replaced, not appended to / merged.
    if (is_message || field->is_repeated()) refl->ClearField(msg, field);
    if (text.empty()) return;

    FirstErrorCollector errors;
    pb::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.MergeFromString(text, msg) || errors.has_error) {
      MT_FAIL("--set ", path, "=", value, ": ",
              errors.has_error ? errors.message : std::string("invalid value"));
    }
  }
}

void normalize_names(RunConfig& c) {
  c.set_on_nonfinite(lower(c.on_nonfinite()));
  c.set_precision(lower(c.precision()));
  c.mutable_model()->set_name(lower(c.model().name()));
  c.mutable_data()->set_type(lower(c.data().type()));
  c.mutable_optimizer()->set_name(lower(c.optimizer().name()));
  c.mutable_lr_schedule()->set_type(lower(c.lr_schedule().type()));
  dist::normalize_dist_names(*c.mutable_dist());
}

void validate_config(const RunConfig& config) {
  RunConfig c = config;  // names are checked as the trainer will use them, in any case
  normalize_names(c);
  check_finite(c, "");
  check_min("epochs", c.epochs(), 1);
  check_min<int64_t>("max_steps", c.max_steps(), 0);
  check_min("threads", c.threads(), 0);
  check_name("on_nonfinite", c.on_nonfinite(), {"stop", "skip"});
  core::Device::parse(c.device());
  check_name("precision", c.precision(), {"fp32", "bf16", "fp16"});
  check_min("cuda.cudnn_workspace_mb", c.cuda().cudnn_workspace_mb(), 0);
  const auto& ls = c.loss_scale();
  check_name("loss_scale.mode", ls.mode(), {"dynamic", "static", "none"});
  check_min("loss_scale.init_scale", ls.init_scale(), 0.0, ">");  // finite: check_finite saw to it
  check_min("loss_scale.growth_factor", ls.growth_factor(), 1.0, ">");
  MT_CHECK(ls.backoff_factor() > 0 && ls.backoff_factor() < 1,
           "loss_scale.backoff_factor must be in (0, 1) (got ", ls.backoff_factor(), ")");
  check_min("loss_scale.growth_interval", ls.growth_interval(), 1);

  const auto& m = c.model();
  check_name("model.name", m.name(), layers::model_names());
  check_min<int64_t>("model.num_classes", m.num_classes(), 0);
  for (int64_t h : m.hidden()) check_min<int64_t>("model.hidden values", h, 0, ">");
  MT_CHECK(m.dropout() >= 0 && m.dropout() < 1, "model.dropout must be in [0, 1) (got ",
           m.dropout(), ")");

  const auto& d = c.data();
  check_name("data.type", d.type(), data_types());
  check_min<int64_t>("data.batch_size", d.batch_size(), 0, ">");
  check_min<int64_t>("data.eval_batch_size", d.eval_batch_size(), 0);
  check_min("data.prefetch_batches", d.prefetch_batches(), 0);
  check_min("data.loader_threads", d.loader_threads(), 0);
  check_min<int64_t>("data.limit_train_batches", d.limit_train_batches(), 0);
  check_min<int64_t>("data.limit_eval_batches", d.limit_eval_batches(), 0);
  check_min<int64_t>("data.synthetic.size", d.synthetic().size(), 0, ">");
  check_min<int64_t>("data.synthetic.classes", d.synthetic().classes(), 2);
  MT_CHECK(d.synthetic().shape_size() == 0 || d.synthetic().shape_size() == 3,
           "data.synthetic.shape must be [C, H, W] (got ", d.synthetic().shape_size(), " values)");
  for (int64_t s : d.synthetic().shape()) check_min<int64_t>("data.synthetic.shape values", s, 0, ">");
  validate_transform("data.train_transform", d.train_transform());
  validate_transform("data.eval_transform", d.eval_transform());

  const auto& o = c.optimizer();
  check_name("optimizer.name", o.name(), optim::optimizer_names());
  check_min("optimizer.lr", o.lr(), 0.0);
  MT_CHECK(o.momentum() >= 0 && o.momentum() < 1, "optimizer.momentum must be in [0, 1) (got ", o.momentum(),
           "): 1 or more keeps every past gradient forever and the weights diverge; 0.9 is usual");
  check_min("optimizer.weight_decay", o.weight_decay(), 0.0);
  check_min("optimizer.max_grad_norm", o.max_grad_norm(), 0.0);
  MT_CHECK(o.beta1() >= 0 && o.beta1() < 1 && o.beta2() >= 0 && o.beta2() < 1,
           "optimizer.beta1 and optimizer.beta2 must be in [0, 1) (got ", o.beta1(), ", ", o.beta2(), ")");
  check_min("optimizer.eps", o.eps(), 0.0, ">");

  const auto& b = m.bert();
  for (const auto& [field, v] : {std::pair{"hidden", b.hidden()}, {"layers", b.layers()},
                                 {"heads", b.heads()}, {"intermediate", b.intermediate()}}) {
    check_min<int64_t>(std::string("model.bert.") + field, v, 0);
  }
  check_min<int64_t>("model.bert.max_position", b.max_position(), 1);
  check_min<int64_t>("model.bert.type_vocab", b.type_vocab(), 1);
  MT_CHECK(b.hidden_dropout() >= 0 && b.hidden_dropout() < 1 && b.attention_dropout() >= 0 &&
               b.attention_dropout() < 1,
           "model.bert.hidden_dropout and attention_dropout must be in [0, 1)");
  const auto& t = d.text();
  check_min<int64_t>("data.text.seq_len", t.seq_len(), 8);
  check_min<int64_t>("data.text.vocab_size", t.vocab_size(), 16);
  MT_CHECK(t.mask_prob() > 0 && t.mask_prob() < 1, "data.text.mask_prob must be in (0, 1) (got ",
           t.mask_prob(), ")");
  MT_CHECK(t.eval_fraction() > 0 && t.eval_fraction() < 1,
           "data.text.eval_fraction must be in (0, 1) (got ", t.eval_fraction(), ")");
  check_min<int64_t>("data.text.synthetic_sequences", t.synthetic_sequences(), 1);
  check_min<int64_t>("data.text.synthetic_vocab", t.synthetic_vocab(), 16);
  if (is_token_data(d.type()) && m.name().rfind("bert", 0) == 0 && b.max_position() > 0) {
    MT_CHECK(t.seq_len() <= b.max_position(), "data.text.seq_len (", t.seq_len(),
             ") exceeds model.bert.max_position (", b.max_position(), "); lower seq_len");
  }

  const auto& s = c.lr_schedule();
  check_name("lr_schedule.type", s.type(), optim::lr_schedule_types());
  check_min("lr_schedule.gamma", s.gamma(), 0.0, ">");
  check_min("lr_schedule.step_epochs", s.step_epochs(), 0.0, ">");
  check_min("lr_schedule.min_lr", s.min_lr(), 0.0);
  check_min("lr_schedule.warmup_epochs", s.warmup_epochs(), 0.0);
  for (int i = 1; i < s.milestones_size(); ++i) {
    MT_CHECK(s.milestones(i) > s.milestones(i - 1),
             "lr_schedule.milestones must be increasing (got ", s.milestones(i - 1), " then ",
             s.milestones(i), ")");
  }

  check_min("eval.every_epochs", c.eval().every_epochs(), 0);
  check_min<int64_t>("eval.every_iters", c.eval().every_iters(), 0);
  check_min<int64_t>("logging.metrics_every_iters", c.logging().metrics_every_iters(), 0);
  check_min("checkpoint.every_epochs", c.checkpoint().every_epochs(), 0);
  check_min<int64_t>("checkpoint.every_iters", c.checkpoint().every_iters(), 0);
  check_min("checkpoint.keep_last", c.checkpoint().keep_last(), 0);
  check_min<int64_t>("logging.print_every_iters", c.logging().print_every_iters(), 0);
  dist::validate_dist_config(c.dist());
}

std::string check_warmup_fits(const RunConfig& config, const optim::LrScheduleOptions& schedule,
                              int64_t iterations_per_epoch) {
  const double warmup = schedule.warmup_epochs, run = schedule.total_epochs;
  if (warmup <= 0 || warmup < run || iterations_per_epoch <= 0) return "";
  const bool by_steps = config.max_steps() > 0;
  std::ostringstream what, fix;
  what << "the learning-rate warm-up (lr_schedule.warmup_epochs " << warmup << " = "
       << std::llround(warmup * iterations_per_epoch) << " steps) is not shorter than the run ("
       << (by_steps ? "max_steps " + std::to_string(config.max_steps()) + ")"
                    : "epochs " + std::to_string(config.epochs()) + " = " +
                          std::to_string(config.epochs() * iterations_per_epoch) + " steps)");
  fix << "shorten the warm-up (e.g. --set lr_schedule.warmup_epochs=" << std::setprecision(3) << run / 10
      << ", a tenth of the run) or lengthen the run (raise " << (by_steps ? "max_steps" : "epochs") << ")";
  if (schedule.type == "linear") {
    throw core::ConfigError("lr_schedule.type \"linear\" decays from the end of the warm-up to the end of the run, "
                            "but " + what.str() + "; " + fix.str());
  }
  // The highest rate the run reaches (warm-up and schedule together), over its steps.
  const optim::LrSchedule lr(schedule);
  const int64_t steps = std::max<int64_t>(1, std::llround(run * iterations_per_epoch));
  double peak = lr.lr_at(static_cast<double>(steps - 1) / iterations_per_epoch);
  for (int64_t i = 0, stride = std::max<int64_t>(1, steps / 1000); i < steps; i += stride) {
    peak = std::max(peak, lr.lr_at(static_cast<double>(i) / iterations_per_epoch));
  }
  std::ostringstream warning;
  warning << "warning: " << what.str() << ": the learning rate peaks at " << std::setprecision(3) << peak
          << ", not optimizer.lr " << schedule.base_lr << "; " << fix.str();
  return warning.str();
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig config = load_config(path);
  for (const auto& o : overrides) apply_override(config, o);
  normalize_names(config);
  validate_config(config);
  return config;
}

std::string config_identity_text(const RunConfig& config) {
  RunConfig c = config;
  if (c.device().rfind("cuda", 0) == 0) c.set_device("cuda");
  return config_to_text(c);
}

std::string config_differences(const std::string& old_text, const std::string& new_text, bool count_output_dir) {
  RunConfig before, after;
  if (!pb::TextFormat::ParseFromString(old_text, &before)) return "the stored config cannot be read by this build";
  if (!pb::TextFormat::ParseFromString(new_text, &after)) return "the new config cannot be read";
  if (!count_output_dir) {
    before.clear_output_dir();
    after.clear_output_dir();
  }
  std::string report;
  pb::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&report);
  if (differ.Compare(before, after)) return "";
  // The reporter writes "modified: a.b: x -> y", "added: a.b: y", "deleted: a.b: x" lines.
  std::vector<std::string> lines = core::split(report, '\n');
  std::erase(lines, "");
  return core::join(lines, "; ");
}

std::string config_to_text(const RunConfig& config) {
  std::string out;
  pb::TextFormat::PrintToString(config, &out);
  return out;
}

}  // namespace mt::apps
