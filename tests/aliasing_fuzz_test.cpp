// The aliasing fuzzer: random calls whose arguments are borrowed or not and alias shared buffers
// (by handle or by raw pointer), each other (the same buffer, overlapping or transposed views) or
// an earlier borrowed output; outputs borrowed or not; kept buffers or not; 1 to 4 threads calling
// at once. Every output and every shared value must equal a call where everything is copied.
// KILN_FUZZ_SEEDS=n runs n seeds (bench/fuzz.sh), from KILN_FUZZ_FIRST.
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <thread>

#include "random_graphs.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

constexpr int64_t kSide = 4;  // square, so that a transposed view can stand for a matrix input

int seeds(int default_count) {
  const char* v = std::getenv("KILN_FUZZ_SEEDS");
  return v ? std::atoi(v) : default_count;
}

uint32_t first_seed() {
  const char* v = std::getenv("KILN_FUZZ_FIRST");
  return v ? static_cast<uint32_t>(std::atoi(v)) : 0;
}

bool equal(const Tensor& got, const Tensor& want, std::string& why) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  if (got.shape() != want.shape()) {
    why = "shape " + shape_str(got.shape()) + " instead of " + shape_str(want.shape());
    return false;
  }
  double scale = 1;
  for (double x : w) scale = std::max(scale, std::isfinite(x) ? std::fabs(x) : 0.0);
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i] || std::fabs(g[i] - w[i]) <= 1e-9 * scale || (std::isnan(g[i]) && std::isnan(w[i])))) {
      why = "element " + std::to_string(i) + " is " + std::to_string(g[i]) + " instead of " + std::to_string(w[i]);
      return false;
    }
  return true;
}

struct Subject {
  Var x, y;
  Shared w1, w2;
  Shared twin1, twin2;  // the reference reads and updates these instead
  Function tested, reference;
  std::vector<bool> borrowed_outputs;
  bool keep_buffers = false, updates = false, outputs_view_inputs = false;
  std::string text;
};

Subject random_subject(uint32_t seed, bool with_updates) {
  Subject s;
  std::mt19937 rng(seed);
  s.x = matrix("x", f64);
  s.y = matrix("y", f64);
  s.w1 = shared(random_tensor({kSide, kSide}, f64, -1, 1, seed + 1), "W1");
  s.w2 = shared(random_tensor({kSide, kSide}, f64, -1, 1, seed + 2), "W2");
  s.twin1 = shared(s.w1.get_value(), "W1'");
  s.twin2 = shared(s.w2.get_value(), "W2'");
  RandomGraph g(seed, {{s.x, {kSide, kSide}}, {s.y, {kSide, kSide}}, {s.w1, {kSide, kSide}}, {s.w2, {kSide, kSide}}});
  const int steps = 4 + static_cast<int>(g.below(10));
  for (int i = 0; i < steps; ++i) g.step();
  std::vector<Var> outputs{g.pick().var, g.pick().var};
  switch (g.below(4)) {  // outputs that are the arguments or views of them
    case 0: outputs.push_back(s.x), s.outputs_view_inputs = true; break;
    case 1: outputs.push_back(transpose(s.y)), s.outputs_view_inputs = true; break;
    case 2: outputs.push_back(s.w1); break;
    default: break;
  }
  for (Var& o : outputs) o = cast(o, f64);
  switch (g.below(3)) {  // the same value twice, or a view of another output (borrow is drawn apart)
    case 0: outputs.push_back(outputs[0]); break;
    case 1: {
      std::vector<int64_t> with_new_axis(static_cast<size_t>(outputs[1].ndim()));
      std::iota(with_new_axis.begin(), with_new_axis.end(), 0);
      with_new_axis.push_back(-1);
      outputs.push_back(outputs[1].ndim() == 2 ? transpose(outputs[1]) : dimshuffle(outputs[1], with_new_axis));
      break;
    }
    default: break;
  }
  Updates updates, twin_updates;
  if (with_updates) {
    switch (g.below(3)) {
      case 0:
        updates = {{s.w1, cast(g.of_shape({kSide, kSide}).var, f64)}};
        break;
      case 1:
        updates = {{s.w1, s.w2}, {s.w2, s.w1}};  // a swap
        break;
      default:
        updates = {{s.w1, cast(g.of_shape({kSide, kSide}).var * 0.5, f64)}, {s.w2, s.w1 + 1.0}};
        break;
    }
    for (const auto& [var, value] : updates) twin_updates.push_back({var.same(s.w1) ? s.twin1 : s.twin2, value});
  }
  s.updates = with_updates;
  s.keep_buffers = rng() % 2 == 0;
  std::vector<In> ins{In(s.x, {.borrow = rng() % 2 == 0}), In(s.y, {.borrow = rng() % 2 == 0})};
  std::vector<Out> outs;
  for (const Var& o : outputs) {
    s.borrowed_outputs.push_back(rng() % 2 == 0);
    outs.push_back(Out(o, {.borrow = s.borrowed_outputs.back()}));
  }
  const Mode modes[] = {Mode("plain", {}), Mode::fast_run()};
  const Mode& mode = modes[rng() % 2];
  s.tested = function(ins, outs, {.updates = updates, .mode = mode, .keep_buffers = s.keep_buffers,
                                  .allow_unused_inputs = true});
  s.reference = function({s.x, s.y}, std::vector<Out>(outputs.begin(), outputs.end()),
                         {.updates = twin_updates, .givens = {{s.w1, s.twin1}, {s.w2, s.twin2}}, .mode = Mode("plain", {}),
                          .allow_unused_inputs = true});
  std::vector<Var> update_values;
  for (const auto& u : updates) update_values.push_back(u.second);
  s.text = mode.name() + ", inputs borrowed " + std::to_string(ins[0].borrow) + std::to_string(ins[1].borrow) + ", outputs borrowed ";
  for (bool b : s.borrowed_outputs) s.text += std::to_string(b);
  s.text += "\n" + g.text(outputs) + "updates:\n";
  for (const auto& [var, value] : updates) s.text += (var.same(s.w1) ? "W1" : "W2") + std::string(" <-\n") + g.text({value});
  return s;
}

// Arguments for one call, each drawn from the ways a caller can alias kiln's buffers or its own.
std::vector<Tensor> random_arguments(std::mt19937& rng, Subject& s, const std::vector<Tensor>& last_outputs,
                                     std::vector<Tensor>& keep_alive, std::string& how) {
  std::vector<Tensor> args;
  for (int i = 0; i < 2; ++i) {
    Tensor a;
    switch (rng() % 8) {
      case 0: a = s.w1.get_value({.borrow = true}); how += " W1's buffer;"; break;
      case 1: {  // the bytes only: no handle refers to the variable's buffer, so it may be updated in place
        const bool first = rng() % 2 == 0;
        Tensor internal = (first ? s.w1 : s.w2).get_value({.borrow = true});
        // An output may be this argument itself: then its bytes must outlive the call (at the cost
        // of the in-place update, which a handle prevents).
        if (s.outputs_view_inputs) keep_alive.push_back(internal.alias());
        a = Tensor::wrap(internal.data<double>(), {kSide, kSide});
        how += first ? " W1's bytes (wrapped);" : " W2's bytes (wrapped);";
        break;
      }
      case 2:
        if (i == 1) {
          a = args[0];
          how += " the same buffer as x;";
          break;
        }
        [[fallthrough]];
      case 3:
        if (i == 1) {
          a = args[0].view({kSide, kSide}, {args[0].strides()[1], args[0].strides()[0]}, args[0].offset());
          how += " x's buffer transposed;";
          break;
        }
        [[fallthrough]];
      case 4: {
        Tensor tall = random_tensor({kSide + 1, kSide}, f64, -1, 1, rng());
        keep_alive.push_back(tall);
        a = tall.view({kSide, kSide}, {kSide, 1}, i * kSide);  // x and y overlap by three rows
        how += " rows of a shared tall buffer;";
        break;
      }
      case 5:
        if (!last_outputs.empty() && last_outputs[0].shape() == Shape{kSide, kSide}) {
          a = last_outputs[0];
          how += " the last call's first output;";
          break;
        }
        [[fallthrough]];
      default:
        a = random_tensor({kSide, kSide}, f64, -1, 1, rng());
        how += " fresh;";
        break;
    }
    args.push_back(a);
  }
  return args;
}

}  // namespace

TEST(AliasingFuzz, AliasedCallsEqualCallsWhereEverythingIsCopied) {
  const int n = seeds(200);
  int calls = 0;
  for (uint32_t seed = first_seed(); seed < first_seed() + static_cast<uint32_t>(n); ++seed) {
    Subject s = random_subject(seed, true);
    std::mt19937 rng(seed + 17);
    ThreadsForScope threads(1 + static_cast<int>(rng() % 2));
    std::vector<Tensor> last_outputs;
    for (int call = 0; call < 4; ++call) {
      std::vector<Tensor> keep_alive;
      std::string how;
      // A shared variable may take a borrowed output of the last call as its value, which may lie
      // in the function's kept arena (before the arguments, which may view its buffer). Not an
      // output wrapping a variable's bytes: those die with the buffer the variable lets go.
      if (rng() % 4 == 0)
        for (size_t i = 0; i < last_outputs.size(); ++i)
          if (s.borrowed_outputs[i] && last_outputs[i].shape() == Shape{kSide, kSide} && last_outputs[i].storage()->owned()) {
            s.w2.set_value(last_outputs[i], {.borrow = true});
            how += " (W2 set to the last call's borrowed output " + std::to_string(i) + ")";
            break;
          }
      std::vector<Tensor> args = random_arguments(rng, s, last_outputs, keep_alive, how);
      SCOPED_TRACE("seed " + std::to_string(seed) + ", call " + std::to_string(call) + ": x, y =" + how +
                   (s.keep_buffers ? " keep_buffers" : "") + "\n" + s.text);
      // The reference: copies of the arguments' values and of the shared values, nothing aliased.
      s.twin1.set_value(s.w1.get_value());
      s.twin2.set_value(s.w2.get_value());
      std::vector<Tensor> want = s.reference({args[0].clone(), args[1].clone()});
      const Tensor want1 = s.twin1.get_value(), want2 = s.twin2.get_value();
      std::vector<Tensor> got;
      try {
        got = s.tested(args);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "the call failed: " << e.what();
        break;
      }
      ++calls;
      std::string why;
      for (size_t i = 0; i < want.size(); ++i)
        if (!equal(got[i], want[i], why)) ADD_FAILURE() << "output " << i << ": " << why;
      // An output without borrow shares memory with no other output, argument or shared value.
      for (size_t i = 0; i < got.size(); ++i) {
        if (s.borrowed_outputs[i]) continue;
        for (size_t j = 0; j < got.size(); ++j)
          EXPECT_TRUE(i == j || !got[i].shares_memory(got[j])) << "output " << i << " shares memory with output " << j;
        for (const Tensor& a : args) EXPECT_FALSE(got[i].shares_memory(a)) << "output " << i << " shares an argument's memory";
        EXPECT_FALSE(got[i].shares_memory(s.w1.get_value({.borrow = true}))) << "output " << i << " shares W1's memory";
        EXPECT_FALSE(got[i].shares_memory(s.w2.get_value({.borrow = true}))) << "output " << i << " shares W2's memory";
      }
      if (!equal(s.w1.get_value(), want1, why)) ADD_FAILURE() << "W1: " << why;
      if (!equal(s.w2.get_value(), want2, why)) ADD_FAILURE() << "W2: " << why;
      EXPECT_FALSE(s.w1.get_value({.borrow = true}).shares_memory(s.w2.get_value({.borrow = true})))
          << "W1 and W2 share a buffer";
      last_outputs = got;
    }
  }
  std::cout << "aliasing fuzz: " << calls << " calls of " << n << " functions\n";
  EXPECT_GE(calls, n * 3);
}

// Several threads call one function at once (kept buffers, borrowed outputs or not), each with its
// own arguments: every thread's outputs stay right until that thread calls again.
TEST(AliasingFuzz, ConcurrentCallersEachGetTheirOwnResults) {
  const int n = seeds(200) / 4;
  int checked = 0;
  for (uint32_t seed = 0; seed < static_cast<uint32_t>(n); ++seed) {
    Subject s = random_subject(seed + 100000, false);
    const int callers = 1 + static_cast<int>(seed % 4);
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t)
      threads.emplace_back([&, t] {
        for (int call = 0; call < 20; ++call) {
          std::vector<Tensor> args{random_tensor({kSide, kSide}, f64, -1, 1, t * 1000 + call),
                                   random_tensor({kSide, kSide}, f64, -1, 1, t * 1000 + call + 500)};
          const std::vector<Tensor> want = s.reference({args[0].clone(), args[1].clone()});
          const std::vector<Tensor> got = s.tested(args);
          std::this_thread::yield();  // other threads call meanwhile
          std::string why;
          for (size_t i = 0; i < want.size(); ++i)
            if (!equal(got[i], want[i], why)) ++wrong;
        }
      });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(wrong.load(), 0) << "seed " << seed << ", " << callers << " threads\n" << s.text;
    checked += callers * 20;
  }
  std::cout << "concurrent callers: " << checked << " calls checked\n";
}
