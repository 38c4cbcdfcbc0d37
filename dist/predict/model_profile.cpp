#include "dist/predict/model_profile.h"

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "core/json_escape.h"
#include "dist/predict/json_file.h"

namespace mt::dist {
namespace {
std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}
double sum(const std::vector<LayerProfile>& layers, double LayerProfile::*field) {
  double s = 0;
  for (const auto& l : layers) s += l.*field;
  return s;
}
}  // namespace

double ModelProfile::forward_total() const { return sum(layers, &LayerProfile::forward); }
double ModelProfile::backward_total() const { return sum(layers, &LayerProfile::backward); }
double ModelProfile::gradient_bytes() const { return sum(layers, &LayerProfile::bytes); }
std::vector<LayerCost> ModelProfile::layer_costs() const {
  std::vector<LayerCost> out;
  for (const auto& l : layers) out.push_back({l.forward, l.backward, l.bytes});
  return out;
}

std::vector<LayerCost> ModelProfile::layer_costs_split() const {
  std::vector<LayerCost> out = layer_costs();
  for (const EarlyPart& e : early_parts) {
    MT_CHECK(e.layer < out.size() && e.from < out.size() && e.bytes >= 0 && e.bytes <= out[e.from].bytes,
             "the profile's early part (layer ", e.layer, " from layer ", e.from, ", ", e.bytes,
             " bytes) names a layer outside the ", out.size(), " or more bytes than its layer has");
    out[e.from].bytes -= e.bytes;
    out[e.layer].bytes += e.bytes;
  }
  return out;
}

void write_profile(const ModelProfile& p, const std::string& path) {
  std::ofstream out(path);
  MT_CHECK(out.good(), "cannot write the profile to \"", path, "\"");
  out << "{\n  \"model\": \"" << core::json_escape(p.model) << "\", \"device\": \"" << core::json_escape(p.device)
      << "\", \"batch_size\": " << p.batch_size << ", \"iterations\": " << p.iterations << ",\n"
      << "  \"update_seconds\": " << fmt("%.9g", p.update_seconds)
      << ", \"buffer_bytes\": " << fmt("%.0f", p.buffer_bytes);
  if (p.compress_seconds >= 0) out << ", \"compress_seconds\": " << fmt("%.9g", p.compress_seconds);
  if (p.decode_seconds >= 0) out << ", \"decode_seconds\": " << fmt("%.9g", p.decode_seconds);
  out << ",\n  \"layers\": [\n";
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    out << "    {\"name\": \"" << core::json_escape(l.name) << "\", \"forward\": " << fmt("%.9g", l.forward)
        << ", \"backward\": " << fmt("%.9g", l.backward) << ", \"bytes\": " << fmt("%.0f", l.bytes)
        << "}" << (i + 1 < p.layers.size() ? "," : "") << "\n";
  }
  out << "  ]";
  if (!p.early_parts.empty()) {
    out << ",\n  \"early_parts\": [";
    for (size_t i = 0; i < p.early_parts.size(); ++i)
      out << (i ? ", " : "") << "{\"layer\": " << p.early_parts[i].layer << ", \"from\": " << p.early_parts[i].from
          << ", \"bytes\": " << fmt("%.0f", p.early_parts[i].bytes) << "}";
    out << "]";
  }
  out << "\n}\n";
  MT_CHECK(out.good(), "writing the profile to \"", path, "\" failed");
}

ModelProfile read_profile(const std::string& path) {
  using nlohmann::json;
  const json root = read_json_file(path, "the layer times", "--layer-times");
  MT_CHECK(root.is_object(), path, ": expected a JSON object with \"layers\"");
  const auto layers = root.find("layers");
  MT_CHECK(layers != root.end() && layers->is_array() && !layers->empty(), path,
           ": \"layers\" must be a non-empty array of {\"forward\", \"backward\", \"bytes\"}");
  ModelProfile p;
  p.model = string_field(root, "model");
  if (const std::string d = string_field(root, "device"); !d.empty()) p.device = d;
  p.batch_size = static_cast<int64_t>(number_field(root, "batch_size", path, false));
  p.iterations = static_cast<int>(number_field(root, "iterations", path, false));
  p.update_seconds = number_field(root, "update_seconds", path, false);
  p.buffer_bytes = number_field(root, "buffer_bytes", path, false);
  p.compress_seconds = number_field(root, "compress_seconds", path, false, -1.0);
  p.decode_seconds = number_field(root, "decode_seconds", path, false, -1.0);
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string where = path + ": layers[" + std::to_string(i) + "]";
    MT_CHECK(l.is_object(), where, " must be an object");
    LayerProfile lp;
    lp.name = string_field(l, "name");
    if (lp.name.empty()) lp.name = "layer" + std::to_string(i);
    lp.forward = number_field(l, "forward", where, true);
    lp.backward = number_field(l, "backward", where, true);
    lp.bytes = number_field(l, "bytes", where, true);
    p.layers.push_back(lp);
  }
  if (const auto parts = root.find("early_parts"); parts != root.end()) {
    MT_CHECK(parts->is_array(), path, ": \"early_parts\" must be an array of {\"layer\", \"from\", \"bytes\"}");
    for (size_t i = 0; i < parts->size(); ++i) {
      const std::string where = path + ": early_parts[" + std::to_string(i) + "]";
      MT_CHECK((*parts)[i].is_object(), where, " must be an object");
      EarlyPart e;
      e.layer = static_cast<size_t>(number_field((*parts)[i], "layer", where, true));
      e.from = static_cast<size_t>(number_field((*parts)[i], "from", where, true));
      e.bytes = number_field((*parts)[i], "bytes", where, true);
      p.early_parts.push_back(e);
    }
    p.layer_costs_split();  // checks the parts against the layers
  }
  return p;
}

}  // namespace mt::dist
