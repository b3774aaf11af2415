// The rules of seeds/theano-memory-aliasing.txt, one test each.
#include <atomic>
#include <thread>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(MemoryRules, SharedCopiesUnlessBorrow) {
  Tensor np = Tensor::ones({2});
  Shared s_default = shared(np);
  Shared s_false = shared(np, "", {.borrow = false});
  Shared s_true = shared(np, "", {.borrow = true});
  np.data<float>()[0] += 1;
  np.data<float>()[1] += 1;
  expect_values(s_default.get_value(), {1, 1});
  expect_values(s_false.get_value(), {1, 1});
  expect_values(s_true.get_value(), {2, 2});
}

TEST(MemoryRules, GetValueCopiesUnlessBorrow) {
  Shared s = shared(Tensor::ones({2}));
  Tensor internal = s.get_value({.borrow = true, .return_internal_type = true});
  EXPECT_FALSE(s.get_value().shares_memory(internal));
  EXPECT_FALSE(s.get_value({.borrow = false}).shares_memory(internal));
  EXPECT_TRUE(s.get_value({.borrow = true}).shares_memory(internal));
  // return_internal_type without borrow is a deep copy of the internal object.
  EXPECT_FALSE(s.get_value({.borrow = false, .return_internal_type = true}).shares_memory(internal));
}

TEST(MemoryRules, SetValueCopiesUnlessBorrow) {
  Shared s = shared(Tensor::zeros({2}));
  Tensor v = Tensor::full({2}, 3.0);
  s.set_value(v);
  EXPECT_FALSE(s.get_value({.borrow = true}).shares_memory(v));
  s.set_value(v, {.borrow = true});
  EXPECT_TRUE(s.get_value({.borrow = true}).shares_memory(v));
  expect_error<TypeError>([&] { s.set_value(Tensor::zeros({2, 2})); }, {"set_value", "2 dimensions", "expected 1"});
  expect_error<TypeError>([&] { s.set_value(Tensor::zeros({2}, f64)); }, {"set_value", "lose information"});
}

TEST(MemoryRules, InPlaceUpdatePatternWorks) {
  Shared s = shared(Tensor::from({1.f, 2.f}, {2}));
  Tensor t = s.get_value({.borrow = true});
  for (int i = 0; i < 2; ++i) t.data<float>()[i] *= 10;
  s.set_value(t, {.borrow = true});
  expect_values(s.get_value(), {10, 20});
}

TEST(MemoryRules, DefaultOutputsNeverAliasInputsSharedOrEarlierOutputs) {
  Var x = vector("x");
  Shared w = shared(Tensor::from({1.f, 2.f}, {2}), "w");
  Function f = function({x}, {x, transpose(x), w, w * 1.0, x * 2.0});
  Tensor in = Tensor::from({5.f, 6.f}, {2});
  auto o1 = f(in);
  auto o2 = f(in);
  Tensor wv = w.get_value({.borrow = true, .return_internal_type = true});
  for (size_t i = 0; i < o1.size(); ++i) {
    EXPECT_FALSE(o1[i].shares_memory(in)) << i;
    EXPECT_FALSE(o1[i].shares_memory(wv)) << i;
    for (const Tensor& t : o2) EXPECT_FALSE(o1[i].shares_memory(t)) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(o1[i].shares_memory(o1[j])) << i << " " << j;
  }
}

TEST(MemoryRules, BorrowedOutputMayBeReturned) {
  Var x = vector("x");
  Function f = function({x}, {Out(x, {.borrow = true})});
  Tensor in = Tensor::from({5.f}, {1});
  EXPECT_TRUE(f(in)[0].shares_memory(in));  // with borrow, no copy is forced
}

TEST(MemoryRules, InputWithoutBorrowIsNeverModified) {
  Var x = vector("x", f64);
  Function f = function({x}, {set_subtensor(x[0], 100.0), exp(x), x * 0.0});
  Tensor in = Tensor::from({1.0, 2.0}, {2});
  f(in);
  expect_values(in, {1, 2});
}

TEST(MemoryRules, BorrowedInputIsAccepted) {
  Var x = vector("x", f64);
  Function f = function({In(x, {.borrow = true})}, {x * 2.0});
  expect_values(f(Tensor::from({1.0, 2.0}, {2}))[0], {2, 4});
}

TEST(MemoryRules, NoTwoSharedVariablesShareABufferAfterASwap) {
  Shared a = shared(Tensor::from({1.f}, {1}), "a"), b = shared(Tensor::from({2.f}, {1}), "b");
  Function swap = function({}, {}, {.updates = {{a, b}, {b, a}}});
  swap();
  expect_values(a.get_value(), {2});
  expect_values(b.get_value(), {1});
  EXPECT_FALSE(a.get_value({.borrow = true}).shares_memory(b.get_value({.borrow = true})));
}

TEST(MemoryRules, NoTwoSharedVariablesShareABufferAfterOneValueUpdatesBoth) {
  Shared a = shared(Tensor::from({1.f}, {1}), "a"), b = shared(Tensor::from({2.f}, {1}), "b");
  Var d = a + b;
  Function f = function({}, {}, {.updates = {{a, d}, {b, d}}});
  f();
  expect_values(a.get_value(), {3});
  expect_values(b.get_value(), {3});
  EXPECT_FALSE(a.get_value({.borrow = true}).shares_memory(b.get_value({.borrow = true})));
}

TEST(MemoryRules, UpdateFromAnInputDoesNotAliasTheCallersBuffer) {
  Var x = vector("x");
  Shared s = shared(Tensor::zeros({2}), "s");
  Function f = function({x}, {}, {.updates = {{s, x}}});
  Tensor in = Tensor::from({1.f, 2.f}, {2});
  f(in);
  EXPECT_FALSE(s.get_value({.borrow = true}).shares_memory(in));
  in.data<float>()[0] = 99;
  expect_values(s.get_value(), {1, 2});
}

TEST(MemoryRules, BorrowedSharedConstructionNeverAliasesAnotherShared) {
  Tensor buf = Tensor::ones({3});
  Shared a = shared(buf, "a", {.borrow = true});
  Shared b = shared(buf, "b", {.borrow = true});
  EXPECT_FALSE(a.get_value({.borrow = true}).shares_memory(b.get_value({.borrow = true})));
  Shared c = shared(Tensor::zeros({3}), "c");
  c.set_value(a.get_value({.borrow = true}), {.borrow = true});
  EXPECT_FALSE(c.get_value({.borrow = true}).shares_memory(a.get_value({.borrow = true})));
}

TEST(MemoryRules, UpdatesAreComputedFromOldValuesIncludingOutputs) {
  Shared s = shared(Tensor::from({1.0}, {1}), "s");
  Function f = function({}, {s * 10.0}, {.updates = {{s, s + 1.0}}});
  expect_values(f()[0], {10});
  expect_values(f()[0], {20});
}

TEST(MemoryRules, BorrowedInputServesAsWorkspace) {
  Var x = vector("x", f64);
  Var y = sum(exp(x * 2.0));
  Tensor lent = Tensor::from({0.0, 1.0}, {2});
  Function f = function({In(x, {.borrow = true})}, {y}, {.mode = Mode("plain", {})});
  EXPECT_NEAR(f(lent)[0].item<double>(), 1.0 + std::exp(2.0), 1e-12);
  // The caller's buffer was used: x * 2 and then exp were written into it.
  expect_values(lent, {1.0, std::exp(2.0)}, 1e-12);
  // With the input lent, the plan needs no buffer of its own for those two values.
  Function g = function({x}, {y}, {.mode = Mode("plain", {})});
  EXPECT_LT(f.memory_report({{1000}}).planned_peak_bytes, g.memory_report({{1000}}).planned_peak_bytes);
}

namespace {
std::vector<double> doubled(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& e : v) e *= 2;
  return v;
}

std::vector<double> softmax_rows(const Tensor& m, double plus = 0) {
  const int64_t rows = m.shape()[0], cols = m.shape()[1];
  std::vector<double> v = m.to_vector<double>(), out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, total = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, v[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) total += std::exp(v[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = std::exp(v[r * cols + c] - mx) / total + plus;
  }
  return out;
}
}  // namespace

// Issue 9, item 3: an In(borrow) input that was a shared variable's own buffer was used as
// workspace, and both updated variables ended up holding the softmax; the same buffer passed as
// two borrowed inputs gave 16.78 instead of 9.39, even in the plain mode.
TEST(MemoryRules, ABorrowedInputOverlappingASharedVariableIsNeverWorkspace) {
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Shared w = shared(random_tensor({4, 5}, f64), "W");
    Shared v = shared(Tensor::zeros({4, 5}, f64), "V");
    Var x = matrix("x", f64);
    Function f = function({In(x, {.borrow = true})}, {softmax(x)},
                          {.updates = {{w, w * 2.0}, {v, softmax(x) + 1.0}}, .mode = mode});
    const Tensor w0 = w.get_value();
    const Tensor out = f(w.get_value({.borrow = true}))[0];
    expect_values(out, softmax_rows(w0), 1e-12);
    expect_values(w.get_value(), doubled(w0), 1e-12);
    expect_values(v.get_value(), softmax_rows(w0, 1.0), 1e-12);
  }
}

TEST(MemoryRules, OneBufferPassedAsTwoBorrowedInputsIsNeverWorkspace) {
  Var a = vector("a", f64), b = vector("b", f64);
  for (Mode mode : {Mode::fast_run(), plain_mode()}) {
    Function f = function({In(a, {.borrow = true}), In(b, {.borrow = true})}, {sum(exp(a) * 2.0 + b)}, {.mode = mode});
    Tensor t = Tensor::from({0.5, 1.0, 1.5}, {3});
    const double expected = 2 * (std::exp(0.5) + std::exp(1.0) + std::exp(1.5)) + 3.0;
    EXPECT_NEAR(f(t, t)[0].item<double>(), expected, 1e-12) << mode.name();
    expect_values(t, {0.5, 1.0, 1.5});  // neither borrowed input was overwritten: each was the other
    Tensor halves = Tensor::from({0.5, 1.0, 1.5, 2.0}, {4});
    Tensor front = halves.view({3}, {1}, 0), back = halves.view({3}, {1}, 1);  // overlapping views
    EXPECT_NEAR(f(front, back)[0].item<double>(), 2 * (std::exp(0.5) + std::exp(1.0) + std::exp(1.5)) + 4.5, 1e-12);
  }
}

// Issue 9, item 4: an input wrapping a shared variable's memory (Tensor::wrap) was not seen as an
// alias, and W <- W + transpose(x) was computed in W's buffer while x was still being read.
TEST(MemoryRules, AnInputWrappingASharedBufferIsSeenByItsBytes) {
  Shared w = shared(random_tensor({64, 64}, f64), "W");
  Var x = matrix("x", f64);
  Function f = function({x}, {}, {.updates = {{w, w + transpose(x)}}});
  const Tensor w0 = w.get_value();
  double* raw = w.get_value({.borrow = true}).data<double>();  // no handle is kept: only the bytes
  f(Tensor::wrap(raw, {64, 64}));
  std::vector<double> v = w0.to_vector<double>(), expected(v.size());
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < 64; ++c) expected[r * 64 + c] = v[r * 64 + c] + v[c * 64 + r];
  expect_values(w.get_value(), expected, 1e-12);
}

// Issue 9, item 6: mutating a borrowed output that was a constant changed the constant for another
// function; mutating a borrowed shape_of(x) changed the shape a later reshape used.
TEST(MemoryRules, ABorrowedOutputIsNeverAConstantOrAValueComputedOnce) {
  Var x = vector("x");
  Var k = constant(Tensor::from({11.f, 21.f}, {2}));
  Function hands_out_k = function({x}, {Out(k, {.borrow = true}), Out(k * 1.0, {.borrow = true})}, {.allow_unused_inputs = true});
  Function reads_k = function({x}, {x + k});
  for (Tensor o : hands_out_k(Tensor::zeros({2}))) o.data<float>()[0] = 0;
  expect_values(reads_k(Tensor::zeros({2}))[0], {11, 21});
  expect_values(hands_out_k(Tensor::zeros({2}))[0], {11, 21});

  Var m = matrix("m");
  Function f = function({m}, {Out(shape_of(m), {.borrow = true}), reshape(m * 2.0, shape_of(m))});
  Tensor shape = f(Tensor::ones({2, 3}))[0];
  shape.data<int64_t>()[0] = 3;
  shape.data<int64_t>()[1] = 2;
  auto again = f(Tensor::ones({2, 3}));
  expect_values(again[0], {2, 3});
  EXPECT_EQ(again[1].shape(), (Shape{2, 3}));
}

// Issue 9, item 7: with keep_buffers, one thread's call overwrote the borrowed output another
// thread was still reading (2198 of 4000 wrong). Each thread now has its own kept workspace.
TEST(MemoryRules, BorrowedOutputsOfAKeptArenaStayValidUntilTheSameThreadCallsAgain) {
  Var x = vector("x");
  Function f = function({x}, {Out(x * 2.0 + 1.0, {.borrow = true})}, {.keep_buffers = true});
  std::atomic<int> wrong{0};
  auto caller = [&](float value) {
    for (int i = 0; i < 1000; ++i) {
      const Tensor o = f(Tensor::full({64}, value))[0];
      std::this_thread::yield();
      for (float e : o.to_vector<float>())
        if (e != 2 * value + 1) {
          ++wrong;
          break;
        }
    }
  };
  std::thread a(caller, 1.f), b(caller, 2.f), c(caller, 3.f), d(caller, 4.f);
  a.join(), b.join(), c.join(), d.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Found by the aliasing fuzzer: a shared variable that the graph only updates (never reads) had its
// old buffer freed when the new value was stored, before an argument viewing those bytes
// (Tensor::wrap) was copied into an output: the output read freed memory.
TEST(MemoryRules, AnUpdateKeepsTheOldBufferUntilTheOutputsExist) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  Shared w1 = shared(Tensor::full({2, 2}, 1.0, f64), "W1"), w2 = shared(Tensor::full({2, 2}, 0.065, f64), "W2");
  Function f = function({x, y}, {y, x * 1.0}, {.updates = {{w2, w1 + 1.0}}, .allow_unused_inputs = true});
  double* old_bytes = w2.get_value({.borrow = true}).data<double>();  // no handle is kept
  const auto out = f(Tensor::ones({2, 2}, f64), Tensor::wrap(old_bytes, {2, 2}));
  expect_values(out[0], {0.065, 0.065, 0.065, 0.065});
  expect_values(w2.get_value(), {2, 2, 2, 2});
}

// Found by the aliasing fuzzer: a borrowed output may be the caller's argument itself, but when
// that argument views the old buffer of a variable the call replaces (and frees), it is copied:
// a borrowed output never aliases kiln's memory.
TEST(MemoryRules, ABorrowedOutputNeverViewsABufferTheCallReleases) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  Shared w1 = shared(Tensor::full({2, 2}, 1.0, f64), "W1"), w2 = shared(Tensor::full({2, 2}, 0.065, f64), "W2");
  Function f = function({x, y}, {Out(y, {.borrow = true})}, {.updates = {{w2, w1 + 1.0}}, .allow_unused_inputs = true});
  double* old_bytes = w2.get_value({.borrow = true}).data<double>();
  const auto out = f(Tensor::ones({2, 2}, f64), Tensor::wrap(old_bytes, {2, 2}));
  expect_values(out[0], {0.065, 0.065, 0.065, 0.065});
  EXPECT_FALSE(out[0].shares_memory(w2.get_value({.borrow = true})));
}


// Found by the aliasing fuzzer: an output without borrow came back as the same buffer as a later
// borrowed output of the same value or a view of it; a function given that borrowed output as a
// workspace then changed the first.
TEST(MemoryRules, AnOutputWithoutBorrowSharesNoMemoryWithALaterBorrowedOne) {
  for (const Mode& mode : {plain_mode(), Mode::fast_compile(), Mode::fast_run(), Mode::debug()})
    for (const bool keep : {false, true}) {
      Var x = vector("x", f64);
      Var y = x * 2.0;
      Function f = function({x}, {Out(y), Out(dimshuffle(y, {0, -1}), {.borrow = true}), Out(y, {.borrow = true})},
                            {.mode = mode, .keep_buffers = keep});
      const std::vector<Tensor> o = f(Tensor::from({1.0, 2.0, 3.0}, {3}));
      EXPECT_FALSE(o[0].shares_memory(o[1])) << mode.name() << (keep ? " keep" : "");
      EXPECT_FALSE(o[0].shares_memory(o[2])) << mode.name() << (keep ? " keep" : "");
      Var z = matrix("z", f64);
      function({In(z, {.borrow = true})}, {exp(z) + 1.0}, {.mode = mode})(o[1]);
      expect_values(o[0], {2, 4, 6});
    }
}

// Found by the aliasing fuzzer: with keep_buffers, a shared variable made a borrowed output's
// value (set_value with borrow) lay in the arena the next call wrote before reading it: the
// output and the update came out of overwritten values (plain, fast_compile), or the update did
// (fast_run), and debug mode reported its own plan as wrong.
TEST(MemoryRules, ASharedValueInTheKeptArenaIsReadBeforeTheArenaIsWritten) {
  for (const Mode& mode : {plain_mode(), Mode::fast_compile(), Mode::fast_run(), Mode::debug()}) {
    Var x = vector("x", f64);
    Shared s = shared(Tensor::from({10.0, 20.0, 30.0, 40.0}, {4}), "s");
    Function f = function({x}, {Out(x * 2.0 + s, {.borrow = true}), Out(cumsum(s) + x, {.borrow = true})},
                          {.updates = {{s, s + 1.0}}, .mode = mode, .keep_buffers = true});
    std::vector<Tensor> o = f(Tensor::from({0.0, 0.0, 0.0, 0.0}, {4}));
    s.set_value(o[0], {.borrow = true});
    o = f(Tensor::from({0.5, 0.25, -0.5, 1.0}, {4}));
    expect_values(o[0], {11, 20.5, 29, 42});
    expect_values(o[1], {10.5, 30.25, 59.5, 101});
    expect_values(s.get_value(), {11, 21, 31, 41});
  }
}

// Found by the aliasing fuzzer: a variable the function does not read, given a borrowed output of
// a function with kept buffers (set_value with borrow), changed when that function ran again. It
// takes a copy: a kept arena is never a variable's buffer.
TEST(MemoryRules, AVariableNeverBorrowsAKeptArena) {
  Var x = vector("x", f64);
  Function f = function({x}, {Out(x * 2.0, {.borrow = true})}, {.keep_buffers = true});
  const Tensor first = f(Tensor::from({1.0, 2.0}, {2}))[0];
  Shared kept = shared(first, "kept", {.borrow = true});
  Shared set = shared(Tensor::zeros({2}, f64), "set");
  set.set_value(first, {.borrow = true});
  f(Tensor::from({5.0, 7.0}, {2}));
  expect_values(kept.get_value(), {2, 4});
  expect_values(set.get_value(), {2, 4});
  // Memory of the caller's own is still borrowed.
  Tensor own = Tensor::from({3.0, 4.0}, {2});
  set.set_value(own, {.borrow = true});
  EXPECT_TRUE(set.get_value({.borrow = true}).same_storage(own));
}

// Found by the concurrency trial: kept arenas were found by std::thread::id, which the system gives
// again to a thread started after one exits: the second thread's call overwrote the borrowed
// output the first one had handed out.
TEST(MemoryRules, ANewThreadNeverWritesTheArenaOfOneThatExited) {
  Var x = vector("x", f64);
  Function f = function({x}, {Out(x * 2.0, {.borrow = true})}, {.keep_buffers = true});
  Tensor from_first;
  std::thread([&] { from_first = f(Tensor::full({4}, 1.0, f64))[0]; }).join();
  for (int t = 0; t < 4; ++t) std::thread([&] { f(Tensor::full({4}, 50.0, f64)); }).join();
  expect_values(from_first, {2, 2, 2, 2});
}
