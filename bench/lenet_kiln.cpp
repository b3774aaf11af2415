// kiln's side of the LeNet benchmark (lenet_common.hpp): the training step compiled as one
// function with the parameters in shared variables and sgd's updates, kept buffers and a borrowed
// loss, the steady loop a user writes for speed (tests/steady_call_test.cpp); conv2d alone
// compiled likewise.
//   lenet_kiln step|conv BATCH THREADS | check-step|check-conv BATCH
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lenet_common.hpp"

using namespace kiln;

namespace {

Function lenet_step() {
  std::vector<Shared> params;
  for (const bench::LenetParam& p : bench::lenet_params()) {
    // Dense weights as dot(h, W) takes them: in x out.
    const bool dense = p.shape.size() == 2;
    const Shape shape = dense ? Shape{p.shape[1], p.shape[0]} : Shape(p.shape.begin(), p.shape.end());
    params.push_back(shared(Tensor::from(dense ? bench::transposed(p.values, p.shape[0], p.shape[1]) : p.values, shape), p.name));
  }
  const Var x = tensor4("x"), y = vector("y", i64);
  const auto channel_bias = [](const Var& b) { return dimshuffle(b, {-1, 0, -1, -1}); };
  Var h = max_pool2d(relu(conv2d(x, params[0]) + channel_bias(params[1])));
  h = max_pool2d(relu(conv2d(h, params[2]) + channel_bias(params[3])));
  h = relu(dot(flatten(h, 2), params[4]) + params[5]);
  const Var loss = mean(categorical_crossentropy(softmax(dot(h, params[6]) + params[7]), y));
  return function({In(x, {.borrow = true}), In(y, {.borrow = true})}, {Out(loss, {.borrow = true})},
                  {.updates = sgd(loss, params, bench::kLenetLearningRate), .keep_buffers = true});
}

// sum(conv2d(x, w)) and its gradients in x and w (the sum is an output, so the forward
// convolution is computed, as LibTorch computes it).
Function conv_forward_backward() {
  const Var x = tensor4("x"), w = tensor4("w");
  const Var s = sum(conv2d(x, w));
  const std::vector<Var> g = grad(s, {x, w});
  return function({x, w}, {Out(s, {.borrow = true}), Out(g[0], {.borrow = true}), Out(g[1], {.borrow = true})},
                  {.keep_buffers = true});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool timed = (mode == "step" || mode == "conv") && argc == 4;
  const bool check = (mode == "check-step" || mode == "check-conv") && argc == 3;
  if (!timed && !check) {
    std::fprintf(stderr, "usage: %s step|conv BATCH THREADS | check-step|check-conv BATCH\n", argv[0]);
    return 2;
  }
  const int64_t batch = std::atoll(argv[2]);
  set_num_threads(timed ? std::atoi(argv[3]) : 1);
  try {
    std::vector<Tensor> out;
    if (mode == "step" || mode == "check-step") {
      const Function step = lenet_step();
      const std::vector<Tensor> args{Tensor::from(bench::lenet_images(batch), {batch, 1, bench::kImage, bench::kImage}),
                                     Tensor::from(bench::lenet_labels(batch), {batch})};
      if (check) {
        step.call(args, out);
        const double first = out[0].item<double>();
        step.call(args, out);
        std::printf("%.6f %.6f\n", first, out[0].item<double>());
      } else {
        std::printf("%.4f\n", bench::milliseconds_per_call([&] { step.call(args, out); }));
      }
      return 0;
    }
    const Function f = conv_forward_backward();
    const std::vector<Tensor> args{
        Tensor::from(bench::conv_input(batch), {batch, bench::kConvChannels, bench::kConvSize, bench::kConvSize}),
        Tensor::from(bench::conv_filters(), {bench::kConvFilters, bench::kConvChannels, bench::kConvKernel, bench::kConvKernel})};
    if (check) {
      f.call(args, out);
      std::printf("%.6e %.6e %.6e\n", out[0].item<double>(), (out[1] * out[1]).sum().item<double>(),
                  (out[2] * out[2]).sum().item<double>());
    } else {
      std::printf("%.4f\n", bench::milliseconds_per_call([&] { f.call(args, out); }));
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "lenet_kiln: %s\n", e.what());
    return 1;
  }
}
