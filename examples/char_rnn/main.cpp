// A character-level Elman RNN trained with scan on the GNU GPL version 3, a text every Debian
// system has: each step reads one character (a row of W_x) and the state before, and predicts the
// next character. Truncated back-propagation through 25 characters, Adagrad with gradients
// clipped to [-5, 5] (as in Karpathy's min-char-rnn), the state carried from one piece to the
// next, for `seconds` (default 30). Prints the falling loss and a greedy sample.
//   char_rnn [text file] [seconds]
#include <kiln/kiln.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

using namespace kiln;

namespace {

constexpr int64_t kHidden = 100, kPiece = 25;
constexpr double kLearningRate = 0.1;

Shared weights(int64_t rows, int64_t cols, std::mt19937& rng, const std::string& name) {
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = normal(rng);
  return shared(Tensor::from(v, {rows, cols}), name);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/usr/share/common-licenses/GPL-3";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 30.0;
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "char_rnn: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  std::map<char, int64_t> index;
  std::string alphabet;
  for (char c : text)
    if (index.emplace(c, static_cast<int64_t>(alphabet.size())).second) alphabet.push_back(c);
  const auto vocabulary = static_cast<int64_t>(alphabet.size());
  std::vector<int64_t> codes;
  for (char c : text) codes.push_back(index[c]);
  std::printf("%s: %zu characters, %lld distinct; hidden %lld, pieces of %lld characters\n", path.c_str(), text.size(),
              static_cast<long long>(vocabulary), static_cast<long long>(kHidden), static_cast<long long>(kPiece));

  // The model: h_t = tanh(W_x[x_t] + h_{t-1} W_h + b_h), p_t = softmax(h_t W_y + b_y).
  std::mt19937 rng(7);
  Shared W_x = weights(vocabulary, kHidden, rng, "W_x"), W_h = weights(kHidden, kHidden, rng, "W_h");
  Shared W_y = weights(kHidden, vocabulary, rng, "W_y");
  Shared b_h = shared(Tensor::zeros({kHidden}), "b_h"), b_y = shared(Tensor::zeros({vocabulary}), "b_y");
  auto step = [&](const Var& symbol, const Var& h) { return tanh(W_x[VarIndex(symbol)] + dot(h, W_h) + b_h); };

  // One training step over a piece: the loss summed over its characters, Adagrad on every weight.
  Var inputs = vector("inputs", i64), targets = vector("targets", i64), h0 = vector("h0");
  ScanResult states = scan([&](const std::vector<Var>& a) { return std::vector<Var>{step(a[0], a[1])}; },
                           {.sequences = {inputs}, .outputs_info = {h0}});
  const Var loss = sum(categorical_crossentropy(softmax(dot(states.outputs[0], W_y) + b_y), targets));
  const std::vector<Shared> params{W_x, W_h, b_h, W_y, b_y};
  const std::vector<Var> grads = grad(loss, std::vector<Var>(params.begin(), params.end()));
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) {
    Shared memory = shared(Tensor::zeros(params[i].get_value().shape()));
    const Var g = minimum(maximum(grads[i], -5.0), 5.0);
    const Var seen = memory + g * g;
    updates.push_back({memory, seen});
    updates.push_back({params[i], params[i] - kLearningRate * g / sqrt(seen + 1e-8)});
  }
  Function train = function({inputs, targets, h0}, {loss, states.outputs[0][VarIndex(-1)]}, {.updates = updates});

  // Greedy generation: the most likely next character, one step at a time.
  Var symbol = scalar("symbol", i64), h = vector("h");
  const Var next_state = step(symbol, h);
  Function generate = function({symbol, h}, {argmax(dot(next_state, W_y) + b_y), next_state});

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  Tensor state = Tensor::zeros({kHidden});
  double smooth = std::log(static_cast<double>(vocabulary)) * kPiece;
  int64_t pieces = 0;
  for (int epoch = 1; elapsed() < seconds; ++epoch) {
    for (size_t at = 0; at + kPiece + 1 < codes.size(); at += kPiece, ++pieces) {
      const Tensor in = Tensor::from(std::vector<int64_t>(codes.begin() + at, codes.begin() + at + kPiece), {kPiece});
      const Tensor out = Tensor::from(std::vector<int64_t>(codes.begin() + at + 1, codes.begin() + at + kPiece + 1), {kPiece});
      std::vector<Tensor> result = train(in, out, state);
      state = result[1];
      smooth = 0.99 * smooth + 0.01 * result[0].item<double>();
    }
    if (epoch <= 3 || epoch % 10 == 0)
      std::printf("epoch %3d  %6lld pieces  loss per character %.3f  (%.1f s)\n", epoch, static_cast<long long>(pieces), smooth / kPiece, elapsed());
    state = Tensor::zeros({kHidden});
  }

  std::string sample = "The ";
  Tensor h_now = Tensor::zeros({kHidden});
  Tensor next = Tensor::scalar(index['T']);
  for (size_t i = 0; i < sample.size(); ++i) {
    std::vector<Tensor> r = generate(Tensor::scalar(index[sample[i]]), h_now);
    h_now = r[1];
    next = r[0];
  }
  for (int i = 0; i < 200; ++i) {
    const char c = alphabet[static_cast<size_t>(next.item<double>())];
    sample.push_back(c);
    std::vector<Tensor> r = generate(Tensor::scalar(index[c]), h_now);
    h_now = r[1];
    next = r[0];
  }
  std::printf("greedy sample:\n%s\n", sample.c_str());
  return 0;
}
