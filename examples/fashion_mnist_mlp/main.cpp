// Trains a 784-500-10 tanh MLP on Fashion-MNIST with softmax cross-entropy and minibatch SGD.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include <kiln/kiln.hpp>

#include "idx.hpp"

using namespace kiln;

namespace {

Tensor init_weights(int64_t rows, int64_t cols, std::mt19937& rng) {
  // Glorot uniform, as in the Theano deep-learning tutorials.
  const double bound = std::sqrt(6.0 / static_cast<double>(rows + cols));
  std::uniform_real_distribution<float> uni(static_cast<float>(-bound), static_cast<float>(bound));
  std::vector<float> v(rows * cols);
  for (float& x : v) x = uni(rng);
  return Tensor::from(v, {rows, cols});
}

// Copies the rows named by order[begin, end) into a contiguous batch.
void gather(const Tensor& src, const std::vector<int64_t>& order, int64_t begin, int64_t end, Tensor& dst) {
  const int64_t width = src.ndim() == 2 ? src.shape()[1] : 1;
  const size_t row_bytes = static_cast<size_t>(width) * dtype_size(src.dtype());
  for (int64_t i = begin; i < end; ++i)
    std::memcpy(dst.raw_data() + (i - begin) * row_bytes, src.raw_data() + order[i] * row_bytes, row_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 5;
  const int64_t batch = 20;
  const double initial_rate = 0.1;
  try {
    Tensor train_x = read_idx_images(dir + "/train-images-idx3-ubyte.gz");
    Tensor train_y = read_idx_labels(dir + "/train-labels-idx1-ubyte.gz");
    Tensor test_x = read_idx_images(dir + "/t10k-images-idx3-ubyte.gz");
    Tensor test_y = read_idx_labels(dir + "/t10k-labels-idx1-ubyte.gz");
    std::printf("Fashion-MNIST: %lld training and %lld test images\n", static_cast<long long>(train_x.shape()[0]),
                static_cast<long long>(test_x.shape()[0]));

    std::mt19937 rng(1234);
    Shared W1 = shared(init_weights(784, 500, rng), "W1"), b1 = shared(Tensor::zeros({500}), "b1");
    Shared W2 = shared(Tensor::zeros({500, 10}), "W2"), b2 = shared(Tensor::zeros({10}), "b2");

    Var x = matrix("x"), y = vector("y", i64);
    Var hidden = tanh(dot(x, W1) + b1);
    Var probs = softmax(dot(hidden, W2) + b2);
    Var loss = mean(categorical_crossentropy(probs, y));
    Var correct = sum(cast(argmax(probs, {1}) == y, i64));
    // The learning rate is a shared scalar so that the schedule changes it without recompiling.
    Shared learning_rate = shared(Tensor::scalar(static_cast<float>(initial_rate)), "learning_rate");
    std::vector<Shared> params{W1, b1, W2, b2};
    std::vector<Var> grads = grad(loss, std::vector<Var>(params.begin(), params.end()));
    Updates updates;
    for (size_t i = 0; i < params.size(); ++i) updates.push_back({params[i], params[i] - learning_rate * grads[i]});

    Function train = function({In(x, {.borrow = true}), In(y, {.borrow = true})}, {loss, correct}, {.updates = updates});
    Function evaluate = function({x, y}, {correct});

    const int64_t n = train_x.shape()[0];
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    Tensor bx = Tensor::empty({batch, 784}), by = Tensor::empty({batch}, i64);
    double test_accuracy = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      learning_rate.set_value(Tensor::scalar(static_cast<float>(initial_rate / (1.0 + 0.5 * (epoch - 1)))));
      std::shuffle(order.begin(), order.end(), rng);
      auto start = std::chrono::steady_clock::now();
      double total_loss = 0;
      int64_t total_correct = 0, seen = 0;
      for (int64_t i = 0; i + batch <= n; i += batch) {
        gather(train_x, order, i, i + batch, bx);
        gather(train_y, order, i, i + batch, by);
        auto out = train(bx, by);
        total_loss += out[0].item<double>() * batch;
        total_correct += out[1].item<int64_t>();
        seen += batch;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int64_t test_correct = evaluate(test_x, test_y)[0].item<int64_t>();
      test_accuracy = static_cast<double>(test_correct) / static_cast<double>(test_x.shape()[0]);
      std::printf("epoch %d  loss %.4f  train accuracy %.2f%%  test accuracy %.2f%%  %.0f examples/s\n", epoch,
                  total_loss / static_cast<double>(seen), 100.0 * static_cast<double>(total_correct) / static_cast<double>(seen),
                  100.0 * test_accuracy, static_cast<double>(seen) / seconds);
      std::fflush(stdout);
    }
    if (test_accuracy < 0.85) {
      std::printf("test accuracy %.2f%% is below the 85%% this example promises\n", 100.0 * test_accuracy);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "fashion_mnist_mlp: %s\n", e.what());
    return 2;
  }
}
