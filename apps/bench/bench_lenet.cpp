// LeNet-5 training throughput on Fashion-MNIST: mintrain against PyTorch on the same machine,
// in the same run. A benchmark, not a test: it prints a table and asserts nothing.
//
//   build/release/apps/bench/bench_lenet [--threads 2] [--batch 64] [--iters 400] [--repeats 3]
//
// Both sides time the whole training step (batch from the loader, forward, loss, backward,
// SGD with momentum) after a warm-up. PyTorch runs through Debian's python3-torch
// (/usr/bin/python3); when it is missing, its row says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops/nn.h"
#include "core/random.h"
#include "core/runtime.h"
#include "data/loader.h"
#include "data/registry.h"
#include "data/transforms.h"
#include "layers/models/registry.h"
#include "optim/registry.h"

using namespace mt;

namespace {

struct Args {
  int threads = 2;
  int64_t batch = 64;
  int iters = 400;
  int warmup = 30;
  int repeats = 3;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string python = "/usr/bin/python3";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--repeats") a.repeats = std::stoi(v);
    else if (k == "--data") a.data = v;
    else if (k == "--python") a.python = v;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); std::exit(2); }
  }
  return a;
}

double run_mintrain(const Args& a) {
  core::set_num_threads(a.threads);
  data::DatasetOptions dopt;
  dopt.type = "fashion_mnist";
  dopt.path = a.data;
  auto ds = data::build_dataset(dopt, /*train=*/true);
  data::TransformOptions topt;
  topt.mean = {0.2860f};
  topt.std = {0.3530f};
  data::LoaderOptions lopt;
  lopt.batch_size = a.batch;
  lopt.drop_last = true;
  data::DataLoader loader(ds, data::Transform(topt, ds->image_shape()), lopt);

  core::Generator gen(0);
  layers::ModelOptions mopt;
  auto model = layers::build_model("lenet5", mopt, gen);
  optim::OptimizerOptions oopt;
  oopt.lr = 0.05;
  oopt.momentum = 0.9;
  auto opt = optim::build_optimizer("sgd", model->parameters(), oopt);

  int64_t epoch = 0;
  loader.start_epoch(epoch);
  auto step = [&]() {
    data::Batch b;
    if (!loader.next(b)) {
      loader.start_epoch(++epoch);
      loader.next(b);
    }
    core::Tensor loss = core::cross_entropy(model->forward(b.inputs), b.targets);
    loss.backward();
    opt->step();
    opt->zero_grad();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.iters; ++i) step();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a.iters * a.batch / dt;
}

// Returns images/s from the PyTorch script, or a negative value with `why` set.
double run_pytorch(const Args& a, std::string& why) {
  std::string script = std::string(MT_SOURCE_DIR) + "/apps/bench/pytorch_lenet.py";
  std::string cmd = a.python + " " + script + " --threads " + std::to_string(a.threads) + " --batch " +
                    std::to_string(a.batch) + " --iters " + std::to_string(a.iters) + " --warmup " +
                    std::to_string(a.warmup) + " --data " + a.data + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) { why = "could not start " + a.python; return -1; }
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int rc = pclose(p);
  const char* key = "img_s=";
  auto pos = out.find(key);
  if (rc != 0 || pos == std::string::npos) {
    why = out.find("No module named 'torch'") != std::string::npos
              ? "python3-torch not installed (apt-get install python3-torch)"
              : "PyTorch run failed: " + out.substr(0, 200);
    return -1;
  }
  return std::stod(out.substr(pos + std::strlen(key)));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    std::vector<double> ours, theirs;
    std::string why;
    for (int r = 0; r < a.repeats; ++r) {
      // Alternate the two so that machine noise hits both alike.
      ours.push_back(run_mintrain(a));
      double t = run_pytorch(a, why);
      if (t > 0) theirs.push_back(t);
    }
    std::printf("\nLeNet-5 / Fashion-MNIST training step, batch %lld, %d threads, %d iterations, "
                "median of %d runs\n\n", static_cast<long long>(a.batch), a.threads, a.iters, a.repeats);
    std::printf("| framework | images/s | runs |\n|---|---:|---|\n");
    auto runs = [](const std::vector<double>& v) {
      std::string s;
      for (double x : v) s += (s.empty() ? "" : " ") + std::to_string(static_cast<int>(x));
      return s;
    };
    std::printf("| mintrain | %.0f | %s |\n", median(ours), runs(ours).c_str());
    if (!theirs.empty()) {
      std::printf("| PyTorch (CPU) | %.0f | %s |\n", median(theirs), runs(theirs).c_str());
      std::printf("\nmintrain / PyTorch = %.2fx\n", median(ours) / median(theirs));
    } else {
      std::printf("| PyTorch (CPU) | n/a | %s |\n", why.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lenet: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
