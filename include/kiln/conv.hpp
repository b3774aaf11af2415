#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "kiln/graph.hpp"

namespace kiln {

// The padding of a 2-D convolution: a rule (valid, full, same) or explicit zeros on each side.
//   valid: none (out = (in - extent) / stride + 1, extent = (kernel - 1) * dilation + 1)
//   full: extent - 1 on every side
//   same: out = ceil(in / stride), the padding split evenly, the odd one at the bottom / right
// `conv2d(x, w, {.padding = Padding::same})`, `{.padding = 2}`, `{.padding = Padding(1, 2)}`.
struct Padding {
  enum Rule : uint8_t { valid, full, same, explicit_sides };
  Padding(Rule rule = valid) : rule(rule) {}  // NOLINT
  Padding(int64_t all) : Padding(all, all) {}  // NOLINT: the same on every side
  Padding(int64_t rows, int64_t cols) : rule(explicit_sides), top(rows), bottom(rows), left(cols), right(cols) {}
  static Padding sides(int64_t top, int64_t bottom, int64_t left, int64_t right) {
    Padding p(explicit_sides);
    p.top = top, p.bottom = bottom, p.left = left, p.right = right;
    return p;
  }
  Rule rule = valid;
  int64_t top = 0, bottom = 0, left = 0, right = 0;  // explicit_sides only
};

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  Padding padding;
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;  // input and output channels split into this many independent groups
};

// The 2-D cross-correlation of deep-learning libraries: input N x C x H x W, filters
// O x (C / groups) x KH x KW, output N x O x OH x OW. f32 or f64. Differentiable in both.
Var conv2d(const Var& input, const Var& filters, const Conv2dOptions& options = {}, Loc loc = Loc::current());

struct Pool2dOptions {
  std::array<int64_t, 2> window{2, 2};
  std::optional<std::array<int64_t, 2>> stride;  // default: the window
  std::array<int64_t, 2> padding{0, 0};           // added on both sides of each axis
  // The border rule (Theano's ignore_border): true drops a last window that would extend past the
  // padded input (out = (in + 2 pad - window) / stride + 1, rounded down); false keeps it
  // (rounded up), as long as it starts inside the input or its left padding.
  bool ignore_border = true;
  // avg_pool2d only: whether padding zeros count in the divisor (a window's part beyond the border
  // that ignore_border = false keeps never counts).
  bool count_include_pad = true;
};

// Max and average pooling over windows of an N x C x H x W input, each channel apart.
// Differentiable; the gradient of a max goes to the first maximum of its window.
Var max_pool2d(const Var& input, const Pool2dOptions& options = {}, Loc loc = Loc::current());
Var avg_pool2d(const Var& input, const Pool2dOptions& options = {}, Loc loc = Loc::current());

}  // namespace kiln
