// Hessian-free optimization (Martens 2010) of a 784-100-10 tanh MLP on Fashion-MNIST, against
// plain minibatch SGD on the same network from the same start. Each HF update solves
// (G + lambda I) d = -g by truncated conjugate gradient, where G v is the Gauss-Newton product
// Lop(f, theta, H_L Rop(f, theta, v)) (two passes through the network, compiled once), g the
// gradient on a minibatch; lambda follows the Levenberg-Marquardt rule. Prints the training loss
// (on a fixed subset) and the test accuracy after each epoch, for both optimizers.
//   hessian_free [DIR] [EPOCHS] [GRADIENT_BATCH] [CURVATURE_BATCH] [MAX_CG_ITERATIONS]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>


using namespace kiln;

namespace {

constexpr int64_t kInputs = 784, kHidden = 100, kClasses = 10;
constexpr int64_t kParameters = kInputs * kHidden + kHidden + kHidden * kClasses + kClasses;
// A floor for the damping: on a minibatch the quadratic model predicts well steps that are too long
// for the whole training set (without it lambda fell below 0.01 and the training loss rose again
// in the third epoch; 0.1 still let it rise, 1 learned more slowly).
constexpr double kMinDamping = 0.3;

using Vector = std::vector<float>;

double dot_product(const Vector& a, const Vector& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
void add_scaled(Vector& y, double a, const Vector& x) {  // y += a x
  for (size_t i = 0; i < y.size(); ++i) y[i] += static_cast<float>(a * x[i]);
}

// The network's logits for flat parameters theta (W1, b1, W2, b2 one after another).
Var logits_of(const Var& theta, const Var& x) {
  int64_t at = 0;
  auto take_part = [&](Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const Var part = reshape(slice(theta, 0, at, at + n), shape);
    at += n;
    return part;
  };
  const Var W1 = take_part({kInputs, kHidden}), b1 = take_part({kHidden}), W2 = take_part({kHidden, kClasses}), b2 = take_part({kClasses});
  return dot(tanh(dot(x, W1) + b1), W2) + b2;
}

Tensor initial_parameters() {
  std::mt19937 rng(1234);
  Vector theta(kParameters, 0.0f);
  const float bound = static_cast<float>(std::sqrt(6.0 / (kInputs + kHidden)));  // Glorot, as the tutorials
  std::uniform_real_distribution<float> uni(-bound, bound);
  for (int64_t i = 0; i < kInputs * kHidden; ++i) theta[static_cast<size_t>(i)] = uni(rng);
  return Tensor::from(theta, {kParameters});
}

// Rows [begin, end) of a tensor, copied.
Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  Shape shape = t.shape();
  shape[0] = end - begin;
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.shape()[0]);
  Tensor out = Tensor::empty(shape, t.dtype());
  std::memcpy(out.raw_data(), t.raw_data() + static_cast<size_t>(begin) * row_bytes, static_cast<size_t>(end - begin) * row_bytes);
  return out;
}

// What both optimizers are judged by: the mean loss on a fixed training subset, the test accuracy.
struct Judge {
  Function loss, correct;
  Tensor train_x, train_y, test_x, test_y;
  double report(const char* who, int epoch, double seconds) const {
    const double l = loss(train_x, train_y)[0].item_as_double(0);
    const double acc = correct(test_x, test_y)[0].item_as_double(0) / static_cast<double>(test_y.shape()[0]);
    std::printf("%-4s epoch %d: training loss %.4f, test accuracy %.2f%% (%.1f s)\n", who, epoch, l, 100 * acc, seconds);
    std::fflush(stdout);
    return l;
  }
};

Judge make_judge(const Shared& theta, const Tensor& train_x, const Tensor& train_y, const Tensor& test_x, const Tensor& test_y) {
  Var x = matrix("x"), y = vector("y", i64);
  const Var logits = logits_of(theta, x);
  return {function({x, y}, {mean(categorical_crossentropy(softmax(logits), y))}),
          function({x, y}, {sum(cast(argmax(logits, {1}) == y, i64))}),
          rows(train_x, 0, 10000), rows(train_y, 0, 10000), test_x, test_y};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 5;
  try {
    const FashionMnist train_set(Split::train, dir), test_set(Split::test, dir);
    const Tensor &train_x = train_set.field("image"), &train_y = train_set.field("label");
    const Tensor &test_x = test_set.field("image"), &test_y = test_set.field("label");
    const int64_t n = train_x.shape()[0];
    std::printf("Fashion-MNIST: %lld training and %lld test images; a 784-%lld-10 tanh MLP, %lld parameters\n", static_cast<long long>(n),
                static_cast<long long>(test_x.shape()[0]), static_cast<long long>(kHidden), static_cast<long long>(kParameters));

    // ---- Hessian-free ----
    const int64_t gradient_batch = argc > 3 ? std::stoll(argv[3]) : 1000, curvature_batch = argc > 4 ? std::stoll(argv[4]) : 500,
                  max_cg = argc > 5 ? std::stoll(argv[5]) : 40;
    std::vector<double> hf_losses, sgd_losses;
    Shared theta = shared(initial_parameters(), "theta");
    Shared damping = shared(Tensor::scalar(1.0f), "lambda");
    Var x = matrix("x"), y = vector("y", i64), v = vector("v");
    const Var logits = logits_of(theta, x);
    const Var loss = mean(categorical_crossentropy(softmax(logits), y));
    Function loss_and_gradient = function({x, y}, {loss, grad(loss, theta)});
    // G v + lambda v on a curvature batch: J v forward, H_L (J v) in the logits (softmax with
    // cross-entropy: (diag(p) - p p^T) / batch), J^T back.
    const Var jv = Rop({logits}, {theta}, {v})[0];
    const Var p = softmax(logits);
    const Var batch = cast(shape_of(x)[0], f32);
    const Var gv = Lop({logits}, {theta}, {(p * jv - p * sum(p * jv, {1}, true)) / batch})[0];
    Function curvature = function({x, v}, {gv + damping * v});
    Function gauss_newton = function({x, v}, {gv});
    const Judge hf_judge = make_judge(theta, train_x, train_y, test_x, test_y);

    std::printf("\nHessian-free: gradient on %lld examples, Gauss-Newton products on %lld, at most %lld CG iterations per update\n",
                static_cast<long long>(gradient_batch), static_cast<long long>(curvature_batch), static_cast<long long>(max_cg));
    hf_judge.report("HF", 0, 0);
    Vector d(kParameters, 0.0f);
    double lambda = 1.0;
    int rejected = 0;
    const auto hf_start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      for (int64_t begin = 0; begin + gradient_batch <= n; begin += gradient_batch) {
        const Tensor bx = rows(train_x, begin, begin + gradient_batch), by = rows(train_y, begin, begin + gradient_batch);
        const int64_t parts = std::max<int64_t>(1, gradient_batch / curvature_batch);
        const int64_t c0 = begin + (begin / gradient_batch % parts) * curvature_batch;
        const Tensor cx = rows(train_x, c0, c0 + curvature_batch);
        const std::vector<Tensor> lg = loss_and_gradient(bx, by);
        const double f0 = lg[0].item_as_double(0);
        const Vector g = lg[1].to_vector<float>();
        auto A = [&](const Vector& u) { return curvature(cx, Tensor::from(u, {kParameters}))[0].to_vector<float>(); };
        // CG on (G + lambda I) d = -g from the last solution, decayed (Martens' warm start).
        for (float& e : d) e *= 0.95f;
        Vector r = A(d);
        for (size_t i = 0; i < r.size(); ++i) r[i] = -g[i] - r[i];
        Vector s = r;
        double rr = dot_product(r, r);
        for (int64_t it = 0; it < max_cg && rr > 1e-12; ++it) {
          const Vector As = A(s);
          const double alpha = rr / dot_product(s, As);
          add_scaled(d, alpha, s);
          add_scaled(r, -alpha, As);
          const double rr_next = dot_product(r, r);
          for (size_t i = 0; i < s.size(); ++i) s[i] = r[i] + static_cast<float>(rr_next / rr) * s[i];
          rr = rr_next;
        }
        // The step, if the loss falls; lambda by how well the quadratic model predicted the fall.
        const Vector old = theta.get_value().to_vector<float>();
        Vector next = old;
        add_scaled(next, 1.0, d);
        theta.set_value(Tensor::from(next, {kParameters}));
        const double f1 = loss_and_gradient(bx, by)[0].item_as_double(0);
        const Vector Gd = gauss_newton(cx, Tensor::from(d, {kParameters}))[0].to_vector<float>();
        const double predicted = dot_product(g, d) + 0.5 * dot_product(d, Gd);
        const double rho = predicted < 0 ? (f1 - f0) / predicted : -1;
        if (rho < 0.25) lambda *= 1.5;
        else if (rho > 0.75) lambda = std::max(kMinDamping, lambda * 2.0 / 3.0);
        damping.set_value(Tensor::scalar(static_cast<float>(lambda)));
        if (f1 > f0) {  // rejected: back to the old point, and a shorter step next time
          theta.set_value(Tensor::from(old, {kParameters}));
          std::fill(d.begin(), d.end(), 0.0f);
          ++rejected;
        }
      }
      hf_losses.push_back(hf_judge.report("HF", epoch, std::chrono::duration<double>(std::chrono::steady_clock::now() - hf_start).count()));
      std::printf("     (lambda %.3g, %d steps rejected so far)\n", lambda, rejected);
    }

    // ---- plain SGD on the same network, from the same start ----
    const int64_t sgd_batch = 20;
    const double rate = 0.1;
    Shared theta_sgd = shared(initial_parameters(), "theta");
    const Var sgd_loss = mean(categorical_crossentropy(softmax(logits_of(theta_sgd, x)), y));
    Function sgd_step = function({x, y}, {sgd_loss}, {.updates = {{theta_sgd, theta_sgd - rate * grad(sgd_loss, theta_sgd)}}});
    const Judge sgd_judge = make_judge(theta_sgd, train_x, train_y, test_x, test_y);
    std::printf("\nPlain SGD: minibatches of %lld, learning rate %.2f\n", static_cast<long long>(sgd_batch), rate);
    sgd_judge.report("SGD", 0, 0);
    const auto sgd_start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      for (int64_t begin = 0; begin + sgd_batch <= n; begin += sgd_batch) sgd_step(rows(train_x, begin, begin + sgd_batch), rows(train_y, begin, begin + sgd_batch));
      sgd_losses.push_back(sgd_judge.report("SGD", epoch, std::chrono::duration<double>(std::chrono::steady_clock::now() - sgd_start).count()));
    }
    int ahead = 0;
    for (int e = 0; e < epochs; ++e) ahead += hf_losses[static_cast<size_t>(e)] < sgd_losses[static_cast<size_t>(e)];
    std::printf("\nHessian-free ended %d of %d epochs with a lower training loss than SGD\n", ahead, epochs);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "hessian_free: %s\n", e.what());
    return 1;
  }
  return 0;
}
