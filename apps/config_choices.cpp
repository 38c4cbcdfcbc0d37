#include "apps/config_choices.h"

#include <google/protobuf/descriptor.h>

#include "apps/config.h"
#include "core/error.h"

namespace mt::apps {
namespace {

namespace pb = google::protobuf;

// What a refusal of `field` says after "valid ...: ", or "" when it lists no choices.
std::string listed_choices(const std::string& field, const std::string& refusal) {
  if (refusal.find(field) == std::string::npos) return "";  // another field's complaint
  for (const char* lead : {"valid names are: ", "valid types: ", "valid: "}) {
    const auto at = refusal.find(lead);
    if (at != std::string::npos) return refusal.substr(at + std::string(lead).size());
  }
  return "";
}

void probe(const pb::Descriptor* message, const std::string& prefix, int depth, std::vector<FieldChoices>& out) {
  for (int i = 0; i < message->field_count() && depth < 4; ++i) {
    const pb::FieldDescriptor* f = message->field(i);
    const std::string path = prefix + f->name();
    if (f->is_repeated()) continue;
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      probe(f->message_type(), path + ".", depth + 1, out);
      continue;
    }
    if (f->cpp_type() != pb::FieldDescriptor::CPPTYPE_STRING) continue;
    RunConfig config;
    apply_override(config, path + "=?");
    try {
      validate_config(config);
    } catch (const core::Error& e) {
      // An older field's refusal says what it is now called: that one is listed instead.
      const std::string choices = listed_choices(path, e.what());
      if (!choices.empty() && choices.find(" is now ") == std::string::npos) out.push_back({path, choices});
    }
  }
}

}  // namespace

std::vector<FieldChoices> enumerated_fields() {
  std::vector<FieldChoices> out;
  probe(RunConfig::descriptor(), "", 0, out);
  return out;
}

}  // namespace mt::apps
