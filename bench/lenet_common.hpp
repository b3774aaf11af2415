#pragma once
// The LeNet benchmark (bench/lenet.sh): the training step of the LeNet-5 of the Theano tutorial
// (Caffe's "LeNet" variant) on N x 1 x 28 x 28 images, f32:
//   conv 5x5, 20 filters, + bias -> relu -> max pool 2x2
//   conv 5x5, 50 filters, + bias -> relu -> max pool 2x2 -> flatten (800)
//   dense 500 -> relu -> dense 10 -> softmax cross-entropy averaged over the batch
// and plain SGD (learning rate 0.01) on all eight parameters; and conv2d alone, forward and
// backward, at the second layer's shape (N x 20 x 12 x 12 with 50 x 20 x 5 x 5 filters): sum(conv)
// and its gradient in the input and in the filters.
// Both peers take the same command lines and start from the same weights and data:
//   step BATCH THREADS   milliseconds per training step
//   conv BATCH THREADS   milliseconds per conv2d forward + backward
//   check-step BATCH     the loss of the first two steps ("%.6f %.6f"): the second checks the update
//   check-conv BATCH     sum(conv), sum of squares of the input's and of the filters' gradient
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "timing.hpp"
#include "uniform_weights.hpp"

namespace bench {

constexpr double kLenetLearningRate = 0.01;
constexpr int64_t kImage = 28;
constexpr int64_t kLenetClasses = 10;

// One parameter: its shape as LibTorch holds it (a dense layer's weight is out x in) and its
// values, drawn as LibTorch's default initialisation draws them (uniform in +-1/sqrt(fan_in), the
// bias too), from a fixed seed.
struct LenetParam {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

inline std::vector<LenetParam> lenet_params() {
  struct Spec {
    const char* name;
    std::vector<int64_t> weight;
  };
  const std::vector<Spec> layers{{"conv1", {20, 1, 5, 5}}, {"conv2", {50, 20, 5, 5}}, {"fc1", {500, 800}}, {"fc2", {10, 500}}};
  std::vector<LenetParam> params;
  uint32_t seed = 100;
  for (const Spec& l : layers) {
    int64_t fan_in = 1;
    for (size_t d = 1; d < l.weight.size(); ++d) fan_in *= l.weight[d];
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    params.push_back({std::string(l.name) + ".weight", l.weight, uniform_weights(l.weight[0], fan_in, seed++, bound)});
    params.push_back({std::string(l.name) + ".bias", {l.weight[0]}, uniform_weights(1, l.weight[0], seed++, bound)});
  }
  return params;
}

// rows x cols values transposed (a dense layer's weight as kiln's dot(h, W) wants it: in x out).
inline std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
  return t;
}

// batch images, pixels uniform in [-0.5, 0.5] (batch x 1 x 28 x 28, row-major), and their labels.
inline std::vector<float> lenet_images(int64_t batch) { return uniform_weights(batch, kImage * kImage, 1, 0.5f); }
inline std::vector<int64_t> lenet_labels(int64_t batch) {
  std::mt19937 rng(2);
  std::vector<int64_t> y(static_cast<size_t>(batch));
  for (int64_t& v : y) v = static_cast<int64_t>(rng() % kLenetClasses);
  return y;
}

// The conv2d-alone row: the second layer's input (batch x 20 x 12 x 12) and filters (50 x 20 x 5 x 5).
constexpr int64_t kConvChannels = 20, kConvSize = 12, kConvFilters = 50, kConvKernel = 5;
inline std::vector<float> conv_input(int64_t batch) { return uniform_weights(batch, kConvChannels * kConvSize * kConvSize, 3, 1.0f); }
inline std::vector<float> conv_filters() {
  return uniform_weights(kConvFilters, kConvChannels * kConvKernel * kConvKernel, 4, 0.05f);
}

}  // namespace bench
