#include "dist/ps/row_sparse_exchange.h"

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/grad_mode.h"

namespace mt::dist {

GradientRows nonzero_rows(const Tensor& grad) {
  MT_CHECK(grad.defined() && grad.dtype() == core::DType::Float32 && grad.dim() >= 1 && grad.numel() > 0,
           "row-sparse exchange: expected a float32 gradient with rows, got ",
           grad.defined() ? grad.str() : std::string("an undefined tensor"));
  const Tensor host = grad.to(core::Device::cpu()).contiguous();
  GradientRows out;
  out.rows = host.size(0);
  out.width = host.numel() / out.rows;
  const float* g = host.data<float>();
  for (int64_t r = 0; r < out.rows; ++r) {
    const float* row = g + r * out.width;
    for (int64_t j = 0; j < out.width; ++j)
      if (row[j] != 0.0f) {
        out.ids.push_back(r);
        break;
      }
  }
  out.values = Tensor::empty({static_cast<int64_t>(out.ids.size()), out.width});
  float* v = out.values.data<float>();
  for (size_t i = 0; i < out.ids.size(); ++i)
    std::memcpy(v + static_cast<int64_t>(i) * out.width, g + out.ids[i] * out.width, sizeof(float) * out.width);
  return out;
}

RowsOfAllRanks gather_rows(ProcessGroup& group, const GradientRows& mine) {
  // Staged on the group's device (NCCL's GPU; Gloo's host) and brought back to the host.
  const core::Device on = group.device();
  const core::Device host = core::Device::cpu();
  const int n = group.size();
  Tensor count = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(mine.ids.size())}, {1}).to(on);
  Tensor counts = Tensor::zeros({n}, core::DType::Int64, on);
  group.allgather(count, counts)->wait();
  counts = counts.to(host);
  std::vector<int64_t> per_rank(counts.data<int64_t>(), counts.data<int64_t>() + n);
  const int64_t total = std::accumulate(per_rank.begin(), per_rank.end(), int64_t{0});

  RowsOfAllRanks all;
  all.rows = mine.rows;
  all.width = mine.width;
  const int64_t row_bytes = mine.width * 4 + 8;
  // The choice from what every rank knows alike (a rank's own count would split the ranks):
  // the rows a rank receives on average against a ring allreduce's 2(N-1)/N tables.
  const int64_t mean_sparse_bytes = total * (n - 1) / n * row_bytes;
  const int64_t dense_bytes = 2 * (n - 1) * mine.rows * mine.width * 4 / n;
  if (mean_sparse_bytes > dense_bytes) {
    all.dense = true;
    Tensor table = Tensor::zeros({mine.rows, mine.width});
    float* t = table.data<float>();
    const float* v = mine.values.data<float>();
    for (size_t i = 0; i < mine.ids.size(); ++i)
      std::memcpy(t + mine.ids[i] * mine.width, v + static_cast<int64_t>(i) * mine.width, sizeof(float) * mine.width);
    table = table.to(on);
    group.allreduce(table)->wait();
    all.values = table.to(host);
    all.bytes_received = dense_bytes;
    return all;
  }
  Tensor ids = Tensor::from_vector(mine.ids, {static_cast<int64_t>(mine.ids.size())}).to(on);
  Tensor values = mine.values.view({static_cast<int64_t>(mine.ids.size()) * mine.width}).to(on);
  Tensor all_ids = Tensor::zeros({total}, core::DType::Int64, on);
  Tensor all_values = Tensor::zeros({total * mine.width}, core::DType::Float32, on);
  std::vector<int64_t> value_counts;
  for (int64_t c : per_rank) value_counts.push_back(c * mine.width);
  auto ids_work = group.allgatherv(ids, all_ids, per_rank);
  auto values_work = group.allgatherv(values, all_values, value_counts);
  ids_work->wait();
  values_work->wait();
  all_ids = all_ids.to(host);
  all.values = all_values.to(host).view({total, mine.width});
  all.ids.assign(all_ids.data<int64_t>(), all_ids.data<int64_t>() + total);
  for (int64_t id : all.ids)
    MT_CHECK(id >= 0 && id < all.rows, "row-sparse exchange: a rank sent row ", id, " of a table of ", all.rows,
             " rows; the ranks' tables differ (are they running the same model?)");
  all.bytes_received = (total - per_rank[static_cast<size_t>(group.rank())]) * row_bytes;
  return all;
}

void add_rows(const RowsOfAllRanks& all, float scale, Tensor& dense) {
  MT_CHECK(dense.numel() == all.rows * all.width && dense.dtype() == core::DType::Float32 && dense.is_contiguous(),
           "row-sparse exchange: the gradient ", dense.str(), " is not the gathered table's [", all.rows, ", ",
           all.width, "]");
  core::NoGradGuard no_grad;
  Tensor host = dense.is_cuda() ? dense.to(core::Device::cpu()) : dense;
  float* d = host.data<float>();
  const float* v = all.values.data<float>();
  if (all.dense) {
    for (int64_t i = 0; i < all.rows * all.width; ++i) d[i] += scale * v[i];
  } else {
    // In rank order, the same on every rank: the replicas stay bitwise equal.
    for (size_t i = 0; i < all.ids.size(); ++i) {
      float* row = d + all.ids[i] * all.width;
      const float* add = v + static_cast<int64_t>(i) * all.width;
      for (int64_t j = 0; j < all.width; ++j) row[j] += scale * add[j];
    }
  }
  if (dense.is_cuda()) dense.copy_(host);
}

}  // namespace mt::dist
