#include "data/registry.h"

#include "core/error.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/synthetic_dataset.h"

namespace mt::data {

std::vector<std::string> dataset_types() { return {"fashion_mnist", "mnist", "cifar10", "synthetic"}; }

std::shared_ptr<Dataset> build_dataset(const DatasetOptions& opt, bool train) {
  auto path_or = [&](const char* fallback) { return opt.path.empty() ? std::string(fallback) : opt.path; };
  if (opt.type == "fashion_mnist")
    return std::make_shared<IdxDataset>(path_or("/usr/share/datasets/fashion-mnist"), train,
                                        "fashion-mnist", 10);
  if (opt.type == "mnist")
    return std::make_shared<IdxDataset>(path_or("/usr/share/datasets/mnist"), train, "mnist", 10);
  if (opt.type == "cifar10")
    return std::make_shared<CifarDataset>(path_or("data/cifar-10-batches-bin"), train);
  if (opt.type == "synthetic")
    // Same seed, other split: the test set shares the class prototypes but not the examples.
    return std::make_shared<SyntheticDataset>(opt.synthetic_size, opt.synthetic_shape,
                                              opt.synthetic_classes, opt.seed, train ? 0 : 1);
  std::string valid;
  for (const std::string& t : dataset_types()) valid += (valid.empty() ? "" : ", ") + t;
  MT_FAIL("unknown dataset type \"", opt.type, "\"; valid types: ", valid, " (set data.type)");
}

}  // namespace mt::data
