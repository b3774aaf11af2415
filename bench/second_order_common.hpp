#pragma once
// The second-order benchmark (issue 12): on the 784-500-10 MLP (tanh, softmax + NLL averaged over
// the batch, f32), the time of one gradient, one Gauss-Newton vector product G v = J^T H_L J v
// (J: the Jacobian of the logits in the parameters, H_L: the Hessian of the loss in the logits)
// and one Hessian-vector product H v, all with respect to every parameter. Both peers take the
// same command line ("grad|gn|hv BATCH THREADS") and print milliseconds per product.
#include <cstdint>
#include <vector>

#include "mlp_common.hpp"
#include "timing.hpp"

namespace bench {

inline std::vector<int64_t> second_order_layers() { return {784, 500, 10}; }

// The direction v: one value per parameter element, the same in both peers.
inline std::vector<float> direction(int64_t rows, int64_t cols, uint32_t seed) { return uniform_weights(rows, cols, seed, 0.1f); }

}  // namespace bench
