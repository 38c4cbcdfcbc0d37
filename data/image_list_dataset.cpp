#include "data/image_list_dataset.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/strings.h"

namespace mt::data {

namespace fs = std::filesystem;

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
}  // namespace

ImageListDataset::ImageListDataset(const std::string& list_file, const std::string& root,
                                   int64_t num_classes, const ImageDatasetOptions& opt)
    : ImageDataset(opt) {
  MT_CHECK(num_classes >= 0, "image list ", list_file, ": num_classes must be >= 0, got ", num_classes);
  std::ifstream in(list_file);
  MT_CHECK(in.good(), "image list ", list_file, ": cannot open (", std::strerror(errno),
           "); set data.train_list / data.eval_list to a file of \"<image path> <label>\" lines");
  const fs::path base = root.empty() ? fs::path(list_file).parent_path() : fs::path(root);

  std::vector<ImageSample> samples;
  int64_t max_label = -1;
  std::string raw;
  for (int64_t line_no = 1; std::getline(in, raw); ++line_no) {
    const std::string line = core::trim(raw);
    if (line.empty() || line[0] == '#') continue;
    auto where = [&] { return core::detail::concat(list_file, ":", line_no, ": "); };
    size_t split = line.size();
    while (split > 0 && !is_space(line[split - 1])) --split;
    MT_CHECK(split > 0, where(), "expected \"<image path> <label>\", got \"", line, "\"");
    const std::string path = core::trim(line.substr(0, split)), label_text = line.substr(split);
    int64_t label = 0;
    const auto [end, err] = std::from_chars(label_text.data(), label_text.data() + label_text.size(), label);
    MT_CHECK(err == std::errc() && end == label_text.data() + label_text.size(), where(), "label \"",
             label_text, "\" is not an integer (expected \"<image path> <label>\")");
    MT_CHECK(label >= 0, where(), "label ", label, " is negative; labels are class indices 0, 1, ...");
    MT_CHECK(num_classes == 0 || label < num_classes, where(), "label ", label, " is outside [0, ",
             num_classes, ") (data.num_classes is ", num_classes, ")");
    max_label = std::max(max_label, label);
    const fs::path p(path);
    samples.push_back({p.is_absolute() ? path : (base / p).string(), label});
  }
  MT_CHECK(!samples.empty(), "image list ", list_file, " lists no images (expected \"<image path> <label>\" lines)");
  const int64_t classes = num_classes > 0 ? num_classes : max_label + 1;
  const std::string description = core::detail::concat("image list ", list_file, " (", samples.size(),
                                                       " images, ", classes, " classes)");
  set_samples(std::move(samples), classes, description);
}

}  // namespace mt::data
