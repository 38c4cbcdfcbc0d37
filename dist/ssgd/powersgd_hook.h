// PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) as a communication hook, with the
// semantics of PyTorch DDP's powerSGD_hook: each gradient of 2+ dimensions, viewed as an n x m
// matrix M (the first dimension x the rest), travels as a rank-r approximation found by one step
// of power iteration, with error feedback and the previous iteration's Q as the starting point:
//   M += residual;  P = M Q, allreduced;  P = orthogonalize(P) (Gram-Schmidt);
//   Q = M^T P, allreduced and averaged;  residual = M - P Q^T;  M <- P Q^T.
// (n + m) r values travel instead of n m. Vectors (biases) and matrices too small to gain by
// min_compression_rate travel uncompressed in one allreduce per bucket; the first start_iter
// iterations are plain allreduce. Q is the same on every rank; the residuals differ: every rank's
// is checkpointed after prepare_checkpoint ("powersgd.rank<r>.residual"), both in parameter order.
#pragma once
#include <memory>

#include "dist/ssgd/comm_hook.h"

namespace mt::dist {

struct PowerSgdOptions {
  int rank = 2;                       // r: columns of P and Q (at most min(n, m) for each matrix)
  int64_t start_iter = 100;           // iterations of plain allreduce before the first compression
  double min_compression_rate = 2.0;  // a matrix is compressed when n m > rate (n + m) r
};

std::unique_ptr<CommHook> make_powersgd_hook(std::shared_ptr<ProcessGroup> group, PowerSgdOptions options);

// Gram-Schmidt on the columns of the row-major n x r matrix p, in place: each column normalized,
// then its projection removed from the columns after it. A zero column stays zero.
void orthogonalize_columns(float* p, int64_t n, int64_t r);

}  // namespace mt::dist
