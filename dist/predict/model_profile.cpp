#include "dist/predict/model_profile.h"

#include "core/atomic_write.h"
#include "core/error.h"
#include "dist/predict/json_file.h"

namespace mt::dist {
namespace {
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
  nlohmann::ordered_json j = {{"model", p.model}, {"device", p.device}, {"batch_size", p.batch_size},
                              {"iterations", p.iterations}, {"update_seconds", p.update_seconds},
                              {"buffer_bytes", p.buffer_bytes}};
  if (p.compress_seconds >= 0) j["compress_seconds"] = p.compress_seconds;
  if (p.decode_seconds >= 0) j["decode_seconds"] = p.decode_seconds;
  j["layers"] = nlohmann::ordered_json::array();
  for (const LayerProfile& l : p.layers)
    j["layers"].push_back({{"name", l.name}, {"forward", l.forward}, {"backward", l.backward}, {"bytes", l.bytes}});
  for (const EarlyPart& e : p.early_parts)
    j["early_parts"].push_back({{"layer", e.layer}, {"from", e.from}, {"bytes", e.bytes}});
  core::write_file_atomically(path, j.dump(2) + "\n");
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
