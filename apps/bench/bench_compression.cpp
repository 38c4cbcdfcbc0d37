// The CPU cost of one compressed exchange's local work, piece by piece, without any network:
// what CD-SGD's encoder and decoder threads (dist/cdsgd/exchange_pipeline.h) and compressed S-SGD's
// hook spend per bucket besides the collective itself.
//
//   encode  error feedback (v = g + r), compression, the self-decode and r <- v - decode(Q(v)),
//           as GradientExchange::launch does it
//   decode  the N allgathered payloads decoded, summed in rank order, times 1/N, as
//           GradientExchange::wait does it
//
// The pieces are timed as separate steps (the order GradientExchange used to run them in) and
// fused (Compressor::compress_with_feedback and decompress_sum, what it runs now). Each piece is
// timed in CPU time of this thread (CLOCK_THREAD_CPUTIME_ID), so another process
// taking the core does not count; the median over the repetitions is printed.
//
//   bench_compression [--numel 272474] [--ranks 4] [--compressor two_bit] [--tau 0.03125] [--reps 60]
//
// The default size is ResNet-20's 272,474 parameters, tau 0.5 / 16 its per-sample-sum threshold
// at a batch of 16 (cdsgd_synchronizer.h), 4 ranks the emulated cluster's.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "apps/flags.h"
#include "core/random.h"
#include "core/tensor.h"
#include "dist/compress/compressor.h"
#include "dist/compress/error_feedback.h"

using namespace mt;
using core::Tensor;

namespace {

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double median_ms(int reps, const std::function<void()>& piece) {
  piece();  // first touch of every buffer outside the timing
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const double start = thread_cpu_ms();
    piece();
    ms.push_back(thread_cpu_ms() - start);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Gradients of the size of a small network's: normal with a spread that puts a few percent of
// the values past tau, as the residual does once it has built up.
Tensor gradient(int64_t n, uint64_t seed, float spread) {
  core::Generator gen(seed);
  return core::randn({n}, 0.0f, spread, gen);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t numel = 272474;
  int ranks = 4, reps = 60;
  std::string type = "two_bit";
  double tau = 0.5 / 16;
  try {
    apps::Flags f("", {argv + 1, argv + argc}, "valid: --numel --ranks --compressor --tau --reps");
    while (f.next()) {
      if (f.is("--numel")) numel = f.integer(1);
      else if (f.is("--ranks")) ranks = f.integer(1);
      else if (f.is("--reps")) reps = f.integer(1);
      else if (f.is("--compressor")) type = f.value();
      else if (f.is("--tau")) tau = f.number();
      else f.unknown();
    }
  } catch (const apps::FlagError& e) {
    std::fprintf(stderr, "bench_compression: %s\n", e.what());
    return 2;
  }
  dist::CompressionOptions options;
  options.type = type;
  options.tau = tau;
  const auto compressor = dist::make_compressor(options);
  const float spread = static_cast<float>(tau);
  const Tensor grad = gradient(numel, 1, spread);

  // Encode, piece by piece: the sequence of GradientExchange::launch for a lossy exchange.
  dist::ErrorFeedback feedback(numel);
  feedback.residual().copy_(gradient(numel, 2, spread));
  Tensor v = feedback.corrected(grad);
  Tensor payload = compressor->compress(v);
  Tensor own = compressor->decompress(payload, numel);
  const double corrected = median_ms(reps, [&] { v = feedback.corrected(grad); });
  const double compress = median_ms(reps, [&] { payload = compressor->compress(v); });
  const double self_decode = median_ms(reps, [&] { own = compressor->decompress(payload, numel); });
  const double update = median_ms(reps, [&] { feedback.update(v, own); });

  // Decode: N payloads side by side, as the allgather leaves them; GradientExchange::wait's
  // sequence.
  const int64_t len = payload.numel();
  Tensor gathered = Tensor::empty({len * ranks}, payload.dtype());
  for (int r = 0; r < ranks; ++r)
    gathered.narrow(0, r * len, len).copy_(compressor->compress(gradient(numel, 10 + r, spread)));
  const float scale = 1.0f / static_cast<float>(ranks);
  Tensor sum;
  const double decode_sum = median_ms(reps, [&] {
    sum = Tensor::zeros({numel});
    for (int r = 0; r < ranks; ++r) sum.add_(compressor->decompress(gathered.narrow(0, r * len, len).contiguous(), numel));
  });
  const double average = median_ms(reps, [&] {
    Tensor avg = sum.contiguous().clone();
    avg.mul_(scale);
  });

  // The same work fused (Compressor::compress_with_feedback, decompress_sum): what
  // GradientExchange runs.
  const double fused_encode = median_ms(reps, [&] { payload = feedback.compress(*compressor, grad, &own); });
  const double fused_encode_only = median_ms(reps, [&] { payload = feedback.compress(*compressor, grad); });
  const double fused_decode = median_ms(reps, [&] { sum = compressor->decompress_sum(gathered, ranks, numel); });
  const double fused_average = median_ms(reps, [&] { sum.mul_(scale); });

  std::printf("%s, %lld values, %d ranks, median of %d: CPU ms per exchange\n", compressor->name().c_str(),
              static_cast<long long>(numel), ranks, reps);
  std::printf("  error feedback: v = g + r          %8.3f\n", corrected);
  std::printf("  compress v                         %8.3f\n", compress);
  std::printf("  self-decode                        %8.3f\n", self_decode);
  std::printf("  residual r = v - decoded           %8.3f\n", update);
  std::printf("  decode %d payloads and sum them     %8.3f\n", ranks, decode_sum);
  std::printf("  average (copy, times 1/N)          %8.3f\n", average);
  std::printf("  in all                             %8.3f\n", corrected + compress + self_decode + update + decode_sum + average);
  std::printf("fused, as GradientExchange runs it:\n");
  std::printf("  error feedback and compression     %8.3f\n", fused_encode);
  std::printf("  (the same without the decoded copy %8.3f)\n", fused_encode_only);
  std::printf("  decode %d payloads and sum them     %8.3f\n", ranks, fused_decode);
  std::printf("  average (times 1/N, in place)      %8.3f\n", fused_average);
  std::printf("  in all                             %8.3f\n", fused_encode + fused_decode + fused_average);
  return 0;
}
