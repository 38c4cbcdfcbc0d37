// Differentiable elementwise arithmetic with NumPy broadcasting, and the reductions that undo
// broadcasting in backward (sum_to).
#pragma once
#include "core/tensor.h"

namespace mt::core {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, float s);
Tensor mul(const Tensor& a, float s);
Tensor pow(const Tensor& a, float p);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);

// A broadcast view of x with `shape` (stride 0 along the broadcast dimensions).
Tensor expand(const Tensor& x, const Shape& shape);
// Sums g down to `shape` (the inverse of broadcasting; identity when shapes agree).
Tensor sum_to(const Tensor& g, const Shape& shape);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, float s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, float s) { return mul(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return mul(a, 1.0f / s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace mt::core
