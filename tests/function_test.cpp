#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Function, CallForms) {
  Var x = vector("x"), y = vector("y");
  Function f = function({x, y}, {x + y, x * y});
  auto a = f({Tensor::from({1.f, 2.f}, {2}), Tensor::from({3.f, 4.f}, {2})});
  auto b = f(Tensor::from({1.f, 2.f}, {2}), Tensor::from({3.f, 4.f}, {2}));
  expect_values(a[0], {4, 6});
  expect_values(b[1], {3, 8});
}

TEST(Function, UpdatesAreSimultaneous) {
  Shared a = shared(Tensor::from({1.0}, {1}), "a");
  Shared b = shared(Tensor::from({10.0}, {1}), "b");
  Function f = function({}, {a + b}, {.updates = {{a, b}, {b, a + b}}});
  auto out = f();
  expect_values(out[0], {11});
  expect_values(a.get_value(), {10});
  expect_values(b.get_value(), {11});
}

TEST(Function, Givens) {
  Var x = vector("x", f64), y = vector("y", f64);
  Function f = function({x}, {x + y}, {.givens = {{y, x * 10.0}}});
  expect_values(f(Tensor::from({1.0, 2.0}, {2}))[0], {11, 22});
  // A replacement reading the variable it replaces was replaced within itself: x + 10 gave x + 20.
  expect_error<TypeError>([&] { function({x}, {x * 3.0}, {.givens = {{x, x + 10.0}}}); }, {"givens", "'x'", "itself", "function_test.cpp"});
}

// Issue 9, item 2: a replacement of another type was accepted: an f64 value read as f32 bits gave
// sum(x * 2) = 3.75 instead of 6, and a vector standing for a matrix made transpose return (0, 3).
TEST(Function, GivensMustKeepTheReplacedVariablesType) {
  Var x = matrix("x"), y = matrix("y", f64), v = vector("v");
  expect_error<TypeError>([&] { function({y}, {sum(x * 2)}, {.givens = {{x, y}}}); },
                          {"givens", "'x' f32[?,?]", "f64[?,?]", "cast"});
  expect_error<TypeError>([&] { function({v}, {transpose(x)}, {.givens = {{x, v}}}); }, {"givens", "'x' f32[?,?]", "f32[?]"});
  Var row = tensor(f32, {true, false}, "row");
  expect_error<TypeError>([&] { function({x}, {row + 1.0}, {.givens = {{row, x}}}); }, {"broadcastable"});
  // A replacement with more broadcastable axes, or a bare number of the same kind, is fine.
  Function ok = function({row}, {sum(x * 2)}, {.givens = {{x, row}}});
  expect_values(ok(Tensor::ones({1, 3}))[0], {6});
  Var s = scalar("s");
  expect_values(function({x}, {x * s}, {.givens = {{s, 3.0}}})(Tensor::ones({1, 2}))[0], {3, 3});
}

// Issue 9, item 14: whether an input converts depended on its values (i64 accepted or refused by
// its numbers); it is decided by the dtypes alone, as Theano does.
TEST(Function, InputConversionRules) {
  Var x = vector("x", f64), s = vector("s", f32), n = vector("n", i64);
  Function f = function({x}, {x * 2.0});
  expect_values(f(Tensor::from(std::vector<int32_t>{1, 2}))[0], {2, 4});
  expect_values(f(Tensor::from({1.5f}, {1}))[0], {3});
  expect_values(f(Tensor::from(std::vector<bool>{true, false}))[0], {2, 0});
  expect_error<TypeError>([&] { f(Tensor::from(std::vector<int64_t>{3})); }, {"i64", "expected f64", "to(f64)"});
  Function g = function({s}, {s * 2.0});
  // i32 to f32 when every value is exact (API.md): up to 2^24, and beyond it what f32 holds.
  expect_values(g(Tensor::from(std::vector<int32_t>{3, -16777216, 1 << 30}))[0], {6, -33554432, 2147483648.0});
  expect_error<TypeError>([&] { g(Tensor::from(std::vector<int32_t>{3, 16777217})); }, {"i32", "expected f32"});
  expect_error<TypeError>([&] { g(Tensor::from(std::vector<int32_t>{2147483647})); }, {"i32", "expected f32"});
  Function h64 = function({n}, {n * 2});
  expect_values(h64(Tensor::from(std::vector<int32_t>{-3}))[0], {-6});
  expect_error<TypeError>([&] { function({vector("i", i32)}, {vector("i", i32) * 1})(Tensor::from(std::vector<int64_t>{1})); }, {});
  expect_error<TypeError>([&] { g(Tensor::from({1.0}, {1})); }, {"input 0", "'s'", "f64", "expected f32"});
  expect_error<TypeError>([&] { g(Tensor::zeros({1, 1})); }, {"input 0", "expects 1 dimensions"});
  expect_error<TypeError>([&] { g(); }, {"expects 1 inputs (s), got 0"});
  Var r = tensor(f32, {true, false}, "r");
  Function h = function({r}, {r + 1.0});
  expect_error<ShapeError>([&] { h(Tensor::zeros({2, 3})); }, {"broadcastable dimension 0", "must be 1"});
}

TEST(Function, TrustInputSkipsChecks) {
  Var x = vector("x");
  Function f = function({x}, {x + 1.0});
  f.trust_input(true);
  expect_values(f(Tensor::from({1.f}, {1}))[0], {2});
}

TEST(Function, RunN) {
  Shared c = shared(Tensor::from({0.0}, {1}), "c");
  Function f = function({}, {c * 1.0}, {.updates = {{c, c + 1.0}}});
  auto last = f.run_n(5);
  expect_values(last[0], {4});
  expect_values(c.get_value(), {5});
  Var x = vector("x");
  Function g = function({x}, {x});
  expect_error<TypeError>([&] { g.run_n(2); }, {"run_n", "1 explicit inputs"});
}

TEST(Function, CompileErrorsSayWhichInputOrUpdate) {
  Var x = vector("x"), y = vector("y");
  Shared s = shared(Tensor::zeros({2}), "s");
  expect_error<TypeError>([&] { function({x}, {x + y}); }, {"'y'", "not among the inputs"});
  expect_error<TypeError>([&] { function({x, y}, {x * 2.0}); }, {"input 1", "'y'", "not used"});
  EXPECT_NO_THROW(function({x, y}, {x * 2.0}, {.allow_unused_inputs = true}));
  expect_error<TypeError>([&] { function({s}, {s * 2.0}); }, {"'s'", "shared variable", "implicit"});
  expect_error<TypeError>([&] { function({x, x}, {x}); }, {"'x'", "twice"});
  expect_error<TypeError>([&] { function({}, {s}, {.updates = {{s, s + 1.0}, {s, s * 2.0}}}); }, {"'s'", "updated twice"});
  expect_error<TypeError>([&] { function({x}, {x}, {.updates = {{s, s + 1.0}, {Shared(x.ptr()), x * 2.0}}}); },
                          {"update 1 names 'x'", "not a shared variable"});  // it named neither the update nor the value
  expect_error<TypeError>([&] { function({}, {s}, {.updates = {{s, cast(s, f64)}}}); }, {"'s'", "f64", "keep the dtype"});
  expect_error<TypeError>([&] { function({exp(x)}, {x}); }, {"input 0", "computed by exp", "givens"});
}

TEST(Function, RuntimeErrorsNameOpShapesAndLine) {
  Var a = matrix("a"), b = matrix("b");
  Var c = dot(a, b);  const int line = __LINE__;
  Function f = function({a, b}, {c});
  expect_error<ShapeError>([&] { f(Tensor::zeros({2, 3}), Tensor::zeros({2, 3})); },
                           {"dot", "f32(2,3)", "function_test.cpp:" + std::to_string(line)});
}

TEST(Function, MemoryReport) {
  Var x = matrix("x", f32);
  Var h = tanh(x * 2.0);
  Function f = function({x}, {sum(h * h)}, {.mode = plain_mode()});  // the report, not the rewrites
  MemoryReport r = f.memory_report({{10, 10}});
  // Buffers are 64-byte aligned: 400 bytes take 448, the 4-byte sum 64.
  EXPECT_EQ(r.naive_bytes, 448 * 3 + 64 + 64);  // mul, tanh, mul, sum and the sum's scratch: one buffer each
  // tanh overwrites the product it alone reads, h * h overwrites h: one 448-byte buffer in the
  // arena, beside it while the sum runs the sum's f64 accumulator (64 bytes of scratch), plus the
  // result, which leaves the call and so lives outside it.
  EXPECT_EQ(r.planned_peak_bytes, 448 + 64 + 64);
  EXPECT_EQ(r.lower_bound_bytes, 448 + 64 + 64);
  EXPECT_TRUE(r.unplanned.empty());
  expect_error<Error>([&] { f.memory_report(); }, {"no call", "planned yet", "memory_report({{"});
  expect_error<TypeError>([&] { f(Tensor::zeros({10})); }, {"expects 2 dimensions"});
  expect_error<Error>([&] { f.memory_report(); }, {"no call", "failed before"});
  f(Tensor::zeros({10, 10}));
  EXPECT_EQ(f.memory_report().naive_bytes, r.naive_bytes);
  // Shapes a call would reject are rejected here too.
  Var v = vector("v");
  Function g = function({v}, {v * 2.0});
  expect_error<TypeError>([&] { g.memory_report({{1000, 2}}); }, {"memory_report", "input 0", "1 dimensions", "(1000,2)"});
  expect_error<TypeError>([&] { g.memory_report({{}}); }, {"memory_report", "1 dimensions"});
  EXPECT_THROW(g.memory_report({{-3}}), ShapeError);
}

TEST(Function, ConcurrentCalls) {
  Var x = vector("x", f64);
  Function f = function({x}, {sum(exp(x) * 2.0)});
  std::vector<double> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) results[t] = f(Tensor::full({100}, t, f64))[0].item<double>();
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(results[t], 200 * std::exp(t), 1e-9 * std::exp(t) * 200);
}

TEST(Function, GraphText) {
  Var x = vector("x");
  Function f = function({x}, {exp(x)});
  EXPECT_NE(f.graph_text().find("exp"), std::string::npos);
}

TEST(Function, EmptyFunctionSaysSo) {
  Function f;
  expect_error<Error>([&] { f(); }, {"empty", "kiln::function"});
  expect_error<Error>([&] { f.run_n(1); }, {"empty"});
}

TEST(Function, ConcurrentUpdatesRunOneAtATime) {
  // Calls that update a shared variable hold it for their whole run (they may overwrite its buffer
  // in place), so concurrent steps follow one another: none is lost.
  Shared c = shared(Tensor::from({0.0}, {1}), "c");
  Function step = function({}, {}, {.updates = {{c, c + 1.0}}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) step();
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(c.get_value().item<double>(), 800);
}

TEST(Function, ReadersNeverSeeAnUpdateHalfDone) {
  // Two threads add 1 to every element of a large w, in place; a third reads w meanwhile. A reader
  // that saw a half-written w would find elements that differ.
  Shared w = shared(Tensor::zeros({1 << 20}, f32), "w");
  Function step = function({}, {}, {.updates = {{w, w + 1.0}}});
  Function spread = function({}, {max(w) - min(w)});
  std::atomic<int> steps{0}, reads{0};
  std::atomic<bool> done{false};
  std::vector<std::thread> trainers;
  for (int t = 0; t < 2; ++t)
    trainers.emplace_back([&] {
      while (reads < 40 && steps < 4000) {
        step();
        ++steps;
      }
    });
  std::thread reader([&] {
    for (; !done; ++reads) EXPECT_EQ(spread()[0].item<float>(), 0.0f);
  });
  for (auto& th : trainers) th.join();
  done = true;
  reader.join();
  const std::vector<float> final_w = w.get_value().to_vector<float>();
  EXPECT_EQ(*std::min_element(final_w.begin(), final_w.end()), static_cast<float>(steps));
  EXPECT_EQ(*std::max_element(final_w.begin(), final_w.end()), static_cast<float>(steps));
}

TEST(Function, ACallReadingSeveralSharedVariablesSeesThemAtOneMoment) {
  // Each step adds 1 to a and to b together; a call reading both must never see one step's a with
  // another's b (it loaded them one at a time, and a step could complete in between).
  Shared a = shared(Tensor::zeros({1}, f64), "a"), b = shared(Tensor::zeros({1}, f64), "b");
  Function step = function({}, {}, {.updates = {{a, a + 1.0}, {b, b + 1.0}}});
  Function difference = function({}, {a - b});
  std::atomic<bool> done{false};
  std::vector<std::thread> trainers;
  for (int t = 0; t < 2; ++t)
    trainers.emplace_back([&] {
      while (!done) step();
    });
  int torn = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200000 && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400); ++i)
    torn += difference()[0].item<double>() != 0.0;
  done = true;
  for (auto& th : trainers) th.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(a.get_value().item<double>(), b.get_value().item<double>());
}

TEST(Function, AnUpdateOfAVariableTheGraphDoesNotReadTakesItsLockInOrder) {
  // a_step holds x for its whole call and also sets y, which its graph does not read; its lock on
  // y was taken at the end, out of order, while a reader of y and x held y: neither moved again.
  Shared y = shared(Tensor::zeros({100}, f64), "y"), x = shared(Tensor::zeros({100}, f64), "x");
  Var c = vector("c", f64);
  Function a_step = function({c}, {sum(x)}, {.updates = {{x, x + 1.0}, {y, c * 2.0}}});
  Function read_both = function({}, {sum(x) + sum(y)}), read_both_reversed = function({}, {sum(y) + sum(x)});
  const Tensor cv = Tensor::ones({100}, f64);
  std::atomic<int> a_calls{0}, reads{0};
  std::thread a([&] {
    for (; a_calls < 3000; ++a_calls) a_step(cv);
  });
  std::thread reader([&] {
    for (; reads < 3000; ++reads) {
      read_both();
      read_both_reversed();
    }
  });
  a.join();
  reader.join();
  EXPECT_EQ(x.get_value().to_vector<double>()[0], 3000.0);
  EXPECT_EQ(y.get_value().to_vector<double>()[0], 2.0);
}

TEST(Function, CallsHoldingSeveralSharedVariablesNeverDeadlock) {
  // f updates a and reads b, g updates b and reads a: each call takes its variables in one global
  // order, so neither can wait for the other while holding what the other needs.
  Shared a = shared(Tensor::from({0.0}, {1}), "a"), b = shared(Tensor::from({0.0}, {1}), "b");
  Function f = function({}, {}, {.updates = {{a, a + b * 1e-300 + 1.0}}});
  Function g = function({}, {}, {.updates = {{b, b + a * 1e-300 + 1.0}}});
  std::thread t1([&] {
    for (int i = 0; i < 500; ++i) f();
  });
  std::thread t2([&] {
    for (int i = 0; i < 500; ++i) g();
  });
  t1.join();
  t2.join();
  EXPECT_EQ(a.get_value().item<double>(), 500);
  EXPECT_EQ(b.get_value().item<double>(), 500);
}

// Issue 9, item 11: a huge allocation threw a bare std::bad_alloc. Inside a call it is a
// MemoryError naming the bytes, the shape, the op and the user's line, for an output and for the
// arena of temporaries (named by its largest value) alike.
TEST(Function, AnAllocationTheSystemRefusesNamesTheOpShapeBytesAndLine) {
  Var x = matrix("x");
  const Tensor tall = Tensor::ones({int64_t{1} << 20, 1});
  Var outer = dot(x, transpose(x));  const std::string line = "function_test.cpp:" + std::to_string(__LINE__);
  Function to_output = function({x}, {outer});
  expect_error<MemoryError>([&] { to_output(tall); }, {"4398046511104 bytes", "f32(1048576,1048576)", "dot", line});
  Function to_arena = function({x}, {sum(outer)}, {.mode = plain_mode()});
  expect_error<MemoryError>([&] { to_arena(tall); }, {"bytes", "arena", "dot's output f32(1048576,1048576)", line});
}

TEST(Function, MemoryReportIsTheLastCallsAfterASharedVariableChangesShape) {
  // The trial: memory_report() planned the last call's inputs with the shared variables' shapes of
  // now, so after set_value it gave another size, or failed where they do not broadcast.
  Var x = vector("x", f64);
  Shared s = shared(Tensor::zeros({3}, f64), "s");
  Function f = function({x}, {x * s + 1.0});
  f(Tensor::zeros({3}, f64));
  const MemoryReport before = f.memory_report();
  s.set_value(Tensor::zeros({100000}, f64));
  const MemoryReport after = f.memory_report();
  EXPECT_EQ(after.planned_peak_bytes, before.planned_peak_bytes);
  EXPECT_EQ(after.persistent_bytes, 24);
}

TEST(Function, ManySignaturesKeepTheValuesRightAsOldPlansAreDropped) {
  // A plan per signature is kept up to a bound, then the others are dropped and made again: a
  // kept arena's next call must not take a new plan for the dropped one (it is told apart by id).
  Var x = matrix("x", f64);
  Shared w = shared(Tensor::full({3, 3}, 0.5, f64), "w");
  Function kept = function({x}, {Out(transpose(dot(x, w)) * 2.0, {.borrow = true}), sum(x, {1})}, {.keep_buffers = true});
  Function fresh = function({x}, {transpose(dot(x, w)) * 2.0, sum(x, {1})});
  for (int64_t rows : {1, 2, 3}) {
    for (int64_t b = 1; b <= 70; ++b) kept(random_tensor({b, 3}, f64, -1, 1, static_cast<uint32_t>(b)));
    const Tensor v = random_tensor({rows, 3}, f64, -1, 1, 99);
    const std::vector<Tensor> got = kept(v), want = fresh(v);
    expect_values(got[0], want[0].to_vector<double>(), 1e-12);
    expect_values(got[1], want[1].to_vector<double>(), 1e-12);
  }
}

// A call's plan outlives the call even when other threads' calls drop it from the plan cache
// meanwhile (70 new shapes while one long call runs): the call's end read a freed plan before
// (AddressSanitizer reports it; plain builds crashed with a poisoning allocator).
TEST(Function, ACallKeepsItsPlanWhileOtherCallsReplaceTheCache) {
  Var x = matrix("x", f64);
  Function f = function({x}, {exp(x) * 2.0 + 1.0});
  const Tensor big = Tensor::zeros({2000, 2000}, f64);
  std::atomic<bool> started{false};
  std::vector<Tensor> long_result;
  std::thread long_call([&] {
    started = true;
    long_result = f({big});
  });
  std::thread new_shapes([&] {
    while (!started) std::this_thread::yield();
    for (int64_t k = 1; k <= 70; ++k) EXPECT_DOUBLE_EQ(f({Tensor::zeros({k, 1}, f64)})[0].to_vector<double>().back(), 3.0);
  });
  long_call.join();
  new_shapes.join();
  ASSERT_EQ(long_result.size(), 1u);
  EXPECT_DOUBLE_EQ(long_result[0].to_vector<double>().back(), 3.0);
}
