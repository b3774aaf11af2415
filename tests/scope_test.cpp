// Disposal and dispose scopes: every rule of the TorchSharp memory model (seeds/
// torchsharp-memory-management.md) checked from the public API.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <thread>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

std::string line_of(int line) { return "scope_test.cpp:" + std::to_string(line); }

}  // namespace

TEST(Dispose, ALaterUseNamesTheTensorTheLineThatMadeItAndTheLineThatDisposedIt) {
  Tensor a = Tensor::ones({2, 3}); const int made = __LINE__;
  a.dispose(); const int disposed = __LINE__;
  expect_error<DisposedError>([&] { (void)a.numel(); }, {"f32(2,3)", line_of(made), line_of(disposed), "alias()"});
  a.dispose();  // twice is harmless
  EXPECT_TRUE(a.is_disposed());
}

TEST(Dispose, StorageIsFreedWhenNoHandleOrViewHoldsIt) {
  const int64_t before = allocator_stats().live_storages;
  Tensor a = Tensor::zeros({1000});
  Tensor view = a.reshape({10, 100});
  EXPECT_EQ(allocator_stats().live_storages, before + 1);
  a.dispose();
  EXPECT_EQ(allocator_stats().live_storages, before + 1) << "the view still holds the storage";
  EXPECT_EQ(view.numel(), 1000);
  view.dispose();
  EXPECT_EQ(allocator_stats().live_storages, before);
}

TEST(Dispose, AliasIsAFreshHandleOnTheSameStorage) {
  Tensor a = Tensor::ones({3});
  Tensor b = a.alias();
  EXPECT_TRUE(b.same_storage(a));
  b.dispose();
  EXPECT_FALSE(a.is_disposed());
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  Tensor copy = a;  // copying the C++ object copies the handle itself
  copy.dispose();
  EXPECT_TRUE(a.is_disposed());
}

TEST(DisposeScope, DisposesEveryTensorMadeWhileItLivesAndNothingMadeBefore) {
  Tensor before = Tensor::ones({2});
  Tensor made, cloned, viewed;
  {
    DisposeScope scope;
    made = Tensor::zeros({2});
    cloned = before.clone();
    viewed = before.reshape({2, 1});
    EXPECT_EQ(scope.statistics().created, 3);
  }
  EXPECT_TRUE(made.is_disposed());
  EXPECT_TRUE(cloned.is_disposed());
  EXPECT_TRUE(viewed.is_disposed());
  EXPECT_FALSE(before.is_disposed());
  expect_error<DisposedError>([&] { (void)made.numel(); }, {"dispose scope made at", "move_to_outer_scope"});
}

TEST(DisposeScope, FunctionOutputsAndValuesOfSharedVariablesAreRegistered) {
  Var x = vector("x");
  Shared w = shared(Tensor::ones({3}), "w");
  Function f = function({x}, {x * 2.0 + w});
  Tensor out, value;
  {
    DisposeScope scope;
    out = f({Tensor::ones({3})})[0];
    value = w.get_value();
  }
  EXPECT_TRUE(out.is_disposed());
  EXPECT_TRUE(value.is_disposed());
  EXPECT_EQ(w.get_value().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

// Graphs, compiled functions and shared variables made inside a scope are kiln's: the scope's end
// does not reach them.
TEST(DisposeScope, WhatKilnKeepsOutlivesTheScopeItWasMadeIn) {
  Function step;
  Shared w;
  {
    DisposeScope scope;
    Var x = vector("x");
    w = shared(Tensor::zeros({3}), "w");
    Var loss = sum(sqr(x * w - 1.0)) / 3.0;
    Var g = grad(loss, {w})[0];
    step = function({x}, {loss}, {.updates = {{w, w - 0.5 * g}}, .keep_buffers = true});
    step({Tensor::ones({3})});
  }
  for (int i = 0; i < 3; ++i) {
    DisposeScope scope;
    step({Tensor::ones({3})});
  }
  const std::vector<float> v = w.get_value().to_vector<float>();
  EXPECT_GT(v[0], 0.5f);
  EXPECT_EQ(scope_statistics().live, scope_statistics().created - scope_statistics().disposed);
}

TEST(DisposeScope, AScopeEndedByAnExceptionStillDisposes) {
  Tensor made;
  try {
    DisposeScope scope;
    made = Tensor::ones({4});
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(made.is_disposed());
}

TEST(DisposeScope, ScopesAreDynamic) {
  auto helper = [] { return Tensor::ones({2}); };  // no scope of its own
  Tensor t;
  {
    DisposeScope scope;
    t = helper();
  }
  EXPECT_TRUE(t.is_disposed());
}

TEST(DisposeScope, MoveToOuterScopeOutlivesTheInnerOneAndTheOuterOneDisposesIt) {
  Tensor kept, inner_temp;
  {
    DisposeScope outer;
    {
      DisposeScope inner;
      inner_temp = Tensor::ones({2});
      kept = Tensor::ones({2}).move_to_outer_scope();
      EXPECT_EQ(inner.statistics().created, 1);
      EXPECT_EQ(outer.statistics().created, 1);
    }
    EXPECT_TRUE(inner_temp.is_disposed());
    EXPECT_FALSE(kept.is_disposed());
  }
  EXPECT_TRUE(kept.is_disposed());
}

// Chosen as TorchSharp does: with no outer scope, moving out detaches.
TEST(DisposeScope, MoveToOuterScopeWithNoOuterScopeDetaches) {
  Tensor t;
  {
    DisposeScope only;
    t = Tensor::ones({2}).move_to_outer_scope();
  }
  EXPECT_FALSE(t.is_disposed());
  EXPECT_EQ(t.numel(), 2);
}

TEST(DisposeScope, DetachFromScopeLeavesEveryScope) {
  Tensor t;
  {
    DisposeScope outer;
    {
      DisposeScope inner;
      t = Tensor::ones({2}).detach_from_scope();
    }
  }
  EXPECT_FALSE(t.is_disposed());
}

// A tensor these disposed names the call and its line (a new-user trial found "when the dispose
// scope ... ended" for a scope still open).
TEST(DisposeScope, DisposeEverythingAndDisposeEverythingBut) {
  DisposeScope scope;
  Tensor a = Tensor::ones({1}), b = Tensor::ones({1}), c = Tensor::ones({1});
  scope.dispose_everything_but({b}); const int but_line = __LINE__;
  EXPECT_TRUE(a.is_disposed());
  EXPECT_FALSE(b.is_disposed());
  EXPECT_TRUE(c.is_disposed());
  expect_error<DisposedError>([&] { (void)a.numel(); }, {"DisposeScope::dispose_everything_but() at " + line_of(but_line)});
  Tensor d = Tensor::ones({1});
  scope.dispose_everything(); const int everything_line = __LINE__;
  EXPECT_TRUE(b.is_disposed());
  EXPECT_TRUE(d.is_disposed());
  expect_error<DisposedError>([&] { (void)d.numel(); }, {"DisposeScope::dispose_everything() at " + line_of(everything_line)});
  EXPECT_FALSE(scope.ended());
  Tensor e = Tensor::ones({1});  // the scope is still open
  scope.end();
  EXPECT_TRUE(e.is_disposed());
}

TEST(DisposeScope, WrappedDisposeScopeKeepsOnlyTheResult) {
  Tensor temp;
  Tensor r = wrapped_dispose_scope([&] {
    temp = Tensor::ones({3});
    return temp.reshape({3, 1});
  });
  EXPECT_TRUE(temp.is_disposed());
  EXPECT_EQ(r.shape(), (Shape{3, 1}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(DisposeScope, EndingTwiceOrOutOfOrderIsAnErrorThatChangesNothing) {
  std::unique_ptr<DisposeScope> outer(new DisposeScope); const int outer_line = __LINE__;
  std::unique_ptr<DisposeScope> inner(new DisposeScope); const int inner_line = __LINE__;
  Tensor t = Tensor::ones({1});
  expect_error<Error>([&] { outer->end(); }, {"still open", line_of(inner_line), line_of(outer_line)});
  EXPECT_FALSE(t.is_disposed());
  inner->end();
  EXPECT_TRUE(t.is_disposed());
  expect_error<Error>([&] { inner->end(); }, {"already ended", line_of(inner_line)});
  // Destroyed out of order, the outer scope ends the inner one first; the inner one's own end
  // is then a no-op.
  std::unique_ptr<DisposeScope> inner2(new DisposeScope);
  Tensor u = Tensor::ones({1});
  outer.reset();
  EXPECT_TRUE(u.is_disposed());
  EXPECT_TRUE(inner2->ended());
  inner2.reset();
  DisposeScope fresh;  // the stack is whole again
  Tensor v = Tensor::ones({1});
  fresh.end();
  EXPECT_TRUE(v.is_disposed());
}

// The rule for threads (docs/eager.md): scopes are per thread; a tensor is moved or detached on
// the thread whose scope holds it, and detached before another thread keeps it.
TEST(DisposeScope, ThreadsHaveTheirOwnScopes) {
  DisposeScope scope;
  Tensor from_other;
  std::thread([&] { from_other = Tensor::ones({2}); }).join();
  scope.end();
  EXPECT_FALSE(from_other.is_disposed()) << "made on a thread with no scope";

  Tensor handed;
  std::thread([&] {
    DisposeScope theirs;
    Tensor t = Tensor::ones({2});
    handed = t;
    Tensor kept = Tensor::ones({2});
    handed = kept.detach_from_scope();
  }).join();
  EXPECT_FALSE(handed.is_disposed());

}

TEST(DisposeScope, MovingATensorOfAnotherThreadsScopeIsAnError) {
  Tensor t;
  {
    DisposeScope mine;
    t = Tensor::ones({2});
    std::thread([&] { expect_error<Error>([&] { (void)t.move_to_outer_scope(); }, {"another thread", "detach"}); }).join();
    EXPECT_FALSE(t.is_disposed());
  }
  EXPECT_TRUE(t.is_disposed());
}

TEST(Statistics, CreatedDisposedAndLivePerThreadAndOverall) {
  const ScopeStatistics start = scope_statistics(), all_start = scope_statistics(Threads::all);
  Tensor a = Tensor::ones({2});
  {
    Tensor b = Tensor::ones({2});  // released with its last handle
  }
  a.dispose();
  Tensor c = Tensor::ones({2}); const int c_line = __LINE__;
  const ScopeStatistics now = scope_statistics(), all_now = scope_statistics(Threads::all);
  EXPECT_EQ(now.created - start.created, 3);
  EXPECT_EQ(now.disposed - start.disposed, 2);
  EXPECT_EQ(now.live - start.live, 1);
  EXPECT_EQ(all_now.created - all_start.created, 3);
  const std::string report = live_tensor_report();
  EXPECT_NE(report.find(line_of(c_line)), std::string::npos) << report;
  EXPECT_NE(report.find("f32(2,)"), std::string::npos) << report;
}

TEST(Statistics, ATestThatMakesTensorsInScopesEndsWithNoneLive) {
  const ScopeStatistics start = scope_statistics();
  Var x = vector("x");
  Function f = function({x}, {exp(x)});
  for (int i = 0; i < 1000; ++i) {
    DisposeScope scope;
    Tensor in = Tensor::ones({4});
    Tensor out = f({in})[0];
    ASSERT_EQ(out.numel(), 4);
  }
  const ScopeStatistics end = scope_statistics();
  EXPECT_EQ(end.live, start.live);
  EXPECT_EQ(end.created - start.created, 2000);
}

TEST(Statistics, ScopedEagerIterationsEndWithNoStorageOrTensorLeftLive) {
  const Tensor a = Tensor::ones({10}), b = Tensor::full({10}, 2.0);
  const int64_t storages = allocator_stats().live_storages;
  const ScopeStatistics start = scope_statistics();
  constexpr int kIterations = 100'000;  // bench/eager.sh runs 10^6
  double total = 0;
  for (int i = 0; i < kIterations; ++i) {
    DisposeScope scope;
    Tensor c = a + b;
    if (i % 1000 == 0) total += c.item_as_double(0);
  }
  EXPECT_EQ(total, 3.0 * kIterations / 1000);
  EXPECT_EQ(allocator_stats().live_storages, storages);
  const ScopeStatistics end = scope_statistics();
  EXPECT_EQ(end.live, start.live);
  EXPECT_EQ(end.created - start.created, kIterations);
  EXPECT_EQ(end.disposed - start.disposed, kIterations);
}

TEST(DisposeScope, AnAccumulatorUpdatedInPlaceInsideALoopsScopeSurvivesIt) {
  // The seed's "tensor += x.log()" inside a nested scope: += writes the accumulator's storage and
  // makes no tensor, so the inner scope has nothing of it to dispose.
  DisposeScope outer;
  Tensor total = Tensor::zeros({3});
  const Tensor x = Tensor::from(std::vector<float>{1, 2, 4});
  const ScopeStatistics before = scope_statistics();
  for (int i = 0; i < 4; ++i) {
    DisposeScope inner;
    total += log(x);
    total *= 1.0;
  }
  EXPECT_FALSE(total.is_disposed());
  expect_values(total, {0, 4 * std::log(2.0), 4 * std::log(4.0)}, 1e-5);
  EXPECT_EQ(scope_statistics().created - before.created, 4) << "only the four logs were made";
  EXPECT_EQ(scope_statistics().live, before.live);
}

TEST(DisposeScope, AScopeDestroyedOnAnotherThreadIsEndedByItsOwnThreadNextTimeItMakesATensor) {
  const ScopeStatistics start = scope_statistics();
  Tensor a;
  {
    auto scope = std::make_unique<DisposeScope>();
    a = Tensor::ones({2});
    std::thread([&] { scope.reset(); }).join();
  }
  EXPECT_FALSE(a.is_disposed()) << "the other thread does not touch this thread's scope";
  Tensor b = Tensor::ones({3});
  EXPECT_TRUE(a.is_disposed()) << "ended before b was made";
  EXPECT_FALSE(b.is_disposed()) << "b is in no scope";
  b.dispose();
  for (int i = 0; i < 100; ++i) Tensor temporary = Tensor::ones({256}) + 1.0;
  EXPECT_EQ(scope_statistics().live, start.live) << "nothing is registered in the abandoned scope";
  {
    auto outer = std::make_unique<DisposeScope>();
    DisposeScope inner;
    Tensor c = Tensor::ones({2});
    std::thread([&] { outer.reset(); }).join();
    inner.end();  // ends the abandoned outer scope too
    EXPECT_TRUE(c.is_disposed());
  }
  EXPECT_EQ(scope_statistics().live, start.live);
}

TEST(Statistics, AScopesCountsAreKeptWhenItEnds) {
  DisposeScope scope;
  Tensor a = Tensor::ones({2}), b = a + 1.0;
  b.dispose();
  scope.end();
  const ScopeStatistics counts = scope.statistics();
  EXPECT_EQ(counts.created, 2);
  EXPECT_EQ(counts.disposed, 2);
  EXPECT_EQ(counts.live, 0);
  DisposeScope next;  // reuses the ended scope's place: the counts stay those of the ended one
  Tensor c = Tensor::ones({1});
  EXPECT_EQ(scope.statistics().created, 2);
}

TEST(DisposeScope, AScopeThatOutlivesItsThreadCanStillBeDestroyed) {
  // A scope held in a unique_ptr handed out of a thread that then exits (checked for memory
  // errors by the sanitizer build): its frame lives as long as the scope object.
  std::unique_ptr<DisposeScope> handed;
  Tensor kept;
  std::thread([&] {
    handed = std::make_unique<DisposeScope>(Loc::current());
    kept = Tensor::ones({4});
  }).join();
  handed.reset();
  EXPECT_EQ(kept.numel(), 4);
  kept = Tensor();
}
