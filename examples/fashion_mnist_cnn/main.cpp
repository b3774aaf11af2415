// Trains a LeNet-style convolutional network on Fashion-MNIST with Adam, then saves the model,
// reloads it into fresh shared variables and checks that the reloaded model scores the same.
//   conv 5x5, 20 filters -> relu -> max pool 2 -> conv 5x5, 50 filters -> relu -> max pool 2
//   -> dense 500 -> relu -> dropout 0.5 (training only) -> dense 10 -> softmax cross-entropy
// Usage: fashion_mnist_cnn [DATA_DIRECTORY] [EPOCHS]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

using namespace kiln;

namespace {

// Glorot uniform over fan_in + fan_out (a filter's receptive field counts in both), as in the
// Theano deep-learning tutorial's LeNet.
Tensor glorot(const Shape& shape, int64_t fan_in, int64_t fan_out, std::mt19937& rng) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  std::uniform_real_distribution<float> uni(static_cast<float>(-bound), static_cast<float>(bound));
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uni(rng);
  return Tensor::from(v, shape);
}

// The model's eight parameters, named for save_shared.
struct LeNet {
  Shared conv1_w, conv1_b, conv2_w, conv2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  std::vector<Shared> params() const { return {conv1_w, conv1_b, conv2_w, conv2_b, fc1_w, fc1_b, fc2_w, fc2_b}; }

  // Fresh initial weights (rng given) or zeros (none: to load a saved model into).
  static LeNet make(std::mt19937* rng) {
    const auto weight = [&](const Shape& shape, int64_t fan_in, int64_t fan_out, const char* name) {
      return shared(rng ? glorot(shape, fan_in, fan_out, *rng) : Tensor::zeros(shape), name);
    };
    const auto bias = [](int64_t n, const char* name) { return shared(Tensor::zeros({n}), name); };
    return {weight({20, 1, 5, 5}, 1 * 25, 20 * 25, "conv1_w"),   bias(20, "conv1_b"),
            weight({50, 20, 5, 5}, 20 * 25, 50 * 25, "conv2_w"), bias(50, "conv2_b"),
            weight({800, 500}, 800, 500, "fc1_w"),               bias(500, "fc1_b"),
            weight({500, 10}, 500, 10, "fc2_w"),                 bias(10, "fc2_b")};
  }

  // Class probabilities of x (batch x 784, the pixels row by row); with dropout, the hidden layer
  // is masked (inverted dropout: the kept units scaled by 1 / 0.5, so evaluation needs no change).
  Var probabilities(const Var& x, RandomStreams* dropout) const {
    const auto channel_bias = [](const Var& b) { return dimshuffle(b, {-1, 0, -1, -1}); };
    Var h = reshape(x, {-1, 1, 28, 28});
    h = max_pool2d(relu(conv2d(h, conv1_w) + channel_bias(conv1_b)));  // 20 x 12 x 12
    h = max_pool2d(relu(conv2d(h, conv2_w) + channel_bias(conv2_b)));  // 50 x 4 x 4
    h = relu(dot(flatten(h, 2), fc1_w) + fc1_b);
    if (dropout) h = h * dropout->binomial(shape_of(h), int64_t{1}, 0.5, f32) / 0.5;
    return softmax(dot(h, fc2_w) + fc2_b);
  }
};

// The predicted classes of the whole test set, in order, and the test accuracy.
struct Evaluation {
  std::vector<int64_t> predictions;
  double accuracy = 0;
};
Evaluation evaluate(const Function& predict, DataLoader& test_batches) {
  Evaluation e;
  int64_t correct = 0;
  for (const NamedTensors& b : test_batches) {
    DisposeScope scope;
    const Tensor predicted = argmax(predict(b["image"])[0], 1);
    correct += (predicted == b["label"]).sum().item<int64_t>();
    const std::vector<int64_t> classes = predicted.to_vector<int64_t>();
    e.predictions.insert(e.predictions.end(), classes.begin(), classes.end());
  }
  e.accuracy = static_cast<double>(correct) / static_cast<double>(e.predictions.size());
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : FashionMnist::kDefaultDirectory;
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 8;
  const int64_t batch = 50;
  const auto start = std::chrono::steady_clock::now();
  try {
    FashionMnist train_set(Split::train, dir), test_set(Split::test, dir);
    std::printf("Fashion-MNIST: %lld training and %lld test images\n", static_cast<long long>(train_set.size()),
                static_cast<long long>(test_set.size()));

    std::mt19937 rng(1234);
    const LeNet net = LeNet::make(&rng);
    RandomStreams dropout(1234);
    const Var x = matrix("x"), y = vector("y", i64);
    const Var loss = mean(categorical_crossentropy(net.probabilities(x, &dropout), y));
    // Adam's learning rate is a shared scalar, so the schedule changes it without recompiling; the
    // dropout mask's stream advances by itself after each step.
    Shared learning_rate = shared(Tensor::scalar(0.001f), "learning_rate");
    Function train = function({In(x, {.borrow = true}), In(y, {.borrow = true})}, {loss},
                              {.updates = adam(loss, net.params(), {.learning_rate = learning_rate})});
    Function predict = function({x}, {net.probabilities(x, nullptr)});

    DataLoader batches(train_set, {.batch_size = batch, .shuffle = true, .seed = 1234, .drop_last = true});
    DataLoader test_batches(test_set, {.batch_size = 1000});
    Evaluation trained;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      learning_rate.set_value(Tensor::scalar(static_cast<float>(0.001 * std::pow(0.8, epoch - 1))));
      const auto epoch_start = std::chrono::steady_clock::now();
      double total_loss = 0;
      int64_t seen = 0;
      for (const NamedTensors& b : batches) {
        DisposeScope step;
        total_loss += train(b["image"], b["label"])[0].item<double>() * batch;
        seen += batch;
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      trained = evaluate(predict, test_batches);
      std::printf("epoch %d  train loss %.4f  test accuracy %.2f%%  %.0f examples/s\n", epoch, total_loss / static_cast<double>(seen),
                  100.0 * trained.accuracy, static_cast<double>(seen) / seconds);
      std::fflush(stdout);
    }

    // A checkpoint: the parameters saved, then loaded into a second model's fresh variables.
    const std::string path = (std::filesystem::temp_directory_path() / "fashion_mnist_cnn.npz").string();
    save_shared(path, net.params());
    const LeNet reloaded = LeNet::make(nullptr);
    load_shared(path, reloaded.params());
    Function predict_reloaded = function({x}, {reloaded.probabilities(x, nullptr)});
    const Evaluation again = evaluate(predict_reloaded, test_batches);
    const bool identical = again.predictions == trained.predictions;
    std::printf("saved to %s and reloaded: test accuracy %.2f%%, %s\n", path.c_str(), 100.0 * again.accuracy,
                identical ? "identical (every prediction the same)" : "DIFFERENT predictions");
    std::printf("total time %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!identical) return 1;
    if (trained.accuracy < 0.90) {
      std::printf("test accuracy %.2f%% is below the 90%% this example aims at\n", 100.0 * trained.accuracy);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "fashion_mnist_cnn: %s\n", e.what());
    return 2;
  }
}
