// Trains a 784-500-10 tanh MLP on Fashion-MNIST with softmax cross-entropy and minibatch SGD.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include <kiln/kiln.hpp>

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

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 5;
  const int64_t batch = 20;
  const double initial_rate = 0.1;
  try {
    FashionMnist train_set(Split::train, dir), test_set(Split::test, dir);
    std::printf("Fashion-MNIST: %lld training and %lld test images\n", static_cast<long long>(train_set.size()),
                static_cast<long long>(test_set.size()));

    std::mt19937 rng(1234);
    Shared W1 = shared(init_weights(784, 500, rng), "W1"), b1 = shared(Tensor::zeros({500}), "b1");
    Shared W2 = shared(Tensor::zeros({500, 10}), "W2"), b2 = shared(Tensor::zeros({10}), "b2");

    Var x = matrix("x"), y = vector("y", i64);
    Var hidden = tanh(dot(x, W1) + b1);
    Var probs = softmax(dot(hidden, W2) + b2);
    Var loss = mean(categorical_crossentropy(probs, y));
    // The learning rate is a shared scalar so that the schedule changes it without recompiling.
    Shared learning_rate = shared(Tensor::scalar(static_cast<float>(initial_rate)), "learning_rate");
    std::vector<Shared> params{W1, b1, W2, b2};
    std::vector<Var> grads = grad(loss, std::vector<Var>(params.begin(), params.end()));
    Updates updates;
    for (size_t i = 0; i < params.size(); ++i) updates.push_back({params[i], params[i] - learning_rate * grads[i]});

    Function train = function({In(x, {.borrow = true}), In(y, {.borrow = true})}, {loss, probs}, {.updates = updates});
    Function predict = function({x}, {probs});

    // Batches come shuffled by the loader and are disposed when the next one is fetched; every
    // tensor a step makes lives in the step's dispose scope, so nothing is left behind.
    DataLoader batches(train_set, {.batch_size = batch, .shuffle = true, .seed = 1234, .drop_last = true});
    const Tensor& test_images = test_set.field("image");
    const Tensor& test_labels = test_set.field("label");

    double test_accuracy = 0;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      learning_rate.set_value(Tensor::scalar(static_cast<float>(initial_rate / (1.0 + 0.5 * (epoch - 1)))));
      auto start = std::chrono::steady_clock::now();
      double total_loss = 0;
      int64_t total_correct = 0, seen = 0;
      for (const NamedTensors& b : batches) {
        DisposeScope step;
        const std::vector<Tensor> out = train(b["image"], b["label"]);
        total_loss += out[0].item<double>() * batch;
        total_correct += (argmax(out[1], 1) == b["label"]).sum().item<int64_t>();
        seen += batch;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      {
        DisposeScope evaluation;
        const Tensor p = predict(test_images)[0];
        test_accuracy = (argmax(p, 1) == test_labels).mean().item<double>();
      }
      std::printf("epoch %d  loss %.4f  train accuracy %.2f%%  test accuracy %.2f%%  %.0f examples/s\n", epoch,
                  total_loss / static_cast<double>(seen), 100.0 * static_cast<double>(total_correct) / static_cast<double>(seen),
                  100.0 * test_accuracy, static_cast<double>(seen) / seconds);
      std::fflush(stdout);
    }
    const ScopeStatistics tensors = scope_statistics(Threads::all);
    std::printf("tensors made for this program: %lld, disposed: %lld, live: %lld\n", static_cast<long long>(tensors.created),
                static_cast<long long>(tensors.disposed), static_cast<long long>(tensors.live));
    if (tensors.live != 0) std::printf("%s", live_tensor_report().c_str());
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
