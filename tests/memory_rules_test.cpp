// The rules of seeds/theano-memory-aliasing.txt, one test each.
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
