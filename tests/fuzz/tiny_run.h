// The model, optimizer and synchronizer that the checkpoint fuzzer loads into, and that
// make_fuzz_seeds saves from: a seed checkpoint must fit them, or every mutation would stop at
// "does not fit" and never reach the deeper checks.
#pragma once
#include <memory>

#include "core/random.h"
#include "dist/synchronizer.h"
#include "layers/models/registry.h"
#include "optim/registry.h"

namespace mt::fuzz {

struct TinyRun {
  core::Generator gen{1};
  std::shared_ptr<layers::Module> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  dist::LocalSynchronizer sync;

  TinyRun() {
    layers::ModelOptions mo;
    mo.num_classes = 3;
    mo.in_channels = 1;
    mo.image_size = 2;
    mo.hidden = {4};
    model = layers::build_model("mlp", mo, gen);
    optim::OptimizerOptions oo;
    oo.momentum = 0.9;
    optimizer = optim::build_optimizer("sgd", model->parameters(), oo);
  }
};

}  // namespace mt::fuzz
