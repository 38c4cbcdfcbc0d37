#include "layers/models/registry.h"

#include "core/strings.h"
#include "layers/models/bert.h"
#include "layers/models/lenet5.h"
#include "layers/models/mlp.h"
#include "layers/models/resnet.h"
#include "layers/models/resnet_imagenet.h"

namespace mt::layers {

std::vector<std::string> model_names() {
  return {"mlp",      "lenet5",   "resnet20",  "resnet32",   "resnet56", "resnet18",
          "resnet50", "bert_tiny", "bert_mini", "bert_small", "bert_base"};
}

namespace {
std::shared_ptr<Module> build_bert(const std::string& name, const ModelOptions& opt, core::Generator& gen) {
  MT_CHECK(opt.vocab_size > 0, "model '", name, "' needs a vocabulary size (model options vocab_size, got ",
           opt.vocab_size, "): the data must supply a vocabulary, i.e. train it on token data (data.type \"text\" "
           "or synthetic tokens)");
  BertOptions preset;
  if (name == "bert_tiny") preset = BertOptions::tiny(opt.vocab_size);
  else if (name == "bert_mini") preset = BertOptions::mini(opt.vocab_size);
  else if (name == "bert_small") preset = BertOptions::small(opt.vocab_size);
  else preset = BertOptions::base(opt.vocab_size);
  return std::make_shared<BertForMaskedLM>(opt.bert.applied_to(preset), gen);
}
}  // namespace

std::shared_ptr<Module> build_model(const std::string& name, const ModelOptions& opt, core::Generator& gen) {
  if (name == "bert_tiny" || name == "bert_mini" || name == "bert_small" || name == "bert_base")
    return build_bert(name, opt, gen);
  MT_CHECK(opt.num_classes > 0, "model options: num_classes must be > 0, got ", opt.num_classes);
  MT_CHECK(opt.in_channels > 0, "model options: in_channels must be > 0, got ", opt.in_channels);
  MT_CHECK(opt.image_size > 0, "model options: image_size must be > 0, got ", opt.image_size);
  MT_CHECK(opt.dropout >= 0.0f && opt.dropout < 1.0f, "model options: dropout must be in [0, 1), got ", opt.dropout);
  if (name == "mlp")
    return std::make_shared<MLP>(opt.in_channels * opt.image_size * opt.image_size, opt.hidden, opt.num_classes,
                                 opt.dropout, gen);
  if (name == "lenet5") return std::make_shared<LeNet5>(opt.in_channels, opt.image_size, opt.num_classes, gen);
  if (name == "resnet20") return std::make_shared<ResNetCifar>(20, opt.in_channels, opt.num_classes, gen);
  if (name == "resnet32") return std::make_shared<ResNetCifar>(32, opt.in_channels, opt.num_classes, gen);
  if (name == "resnet56") return std::make_shared<ResNetCifar>(56, opt.in_channels, opt.num_classes, gen);
  // ImageNet-style (7x7/2 stem + max pool); for images of 224x224 or thereabouts.
  if (name == "resnet18") return std::make_shared<ResNetImageNet>(18, opt.in_channels, opt.num_classes, gen);
  if (name == "resnet50") return std::make_shared<ResNetImageNet>(50, opt.in_channels, opt.num_classes, gen);
  MT_FAIL("unknown model '", name, "'; valid models: ", core::join(model_names()));
}

}  // namespace mt::layers
