// Packing buffers into one arena (compile/placement): no two buffers that live at the same
// instruction overlap, the arena is exactly as large as its highest buffer, and the typical
// training-step pattern (activations kept for the backward pass, short temporaries) packs at its
// lower bound, also at sizes where packing every buffer exactly would be quadratic.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "compile/placement.hpp"

using namespace kiln;

namespace {

// The most bytes live at one instruction: no arena can be smaller.
int64_t lower_bound(const std::vector<Lifetime>& buffers) {
  std::map<int, int64_t> delta;
  for (const Lifetime& b : buffers) {
    delta[b.first] += b.bytes;
    delta[b.last + 1] -= b.bytes;
  }
  int64_t live = 0, most = 0;
  for (auto [t, d] : delta) most = std::max(most, live += d);
  return most;
}

// Checks that no two buffers alive at the same instruction overlap, with a sweep along the
// program keeping the live buffers ordered by address.
void expect_valid(const std::vector<Lifetime>& buffers, const std::vector<int64_t>& offsets, int64_t arena) {
  int64_t top = 0;
  std::vector<std::vector<int>> starting, ending;
  for (size_t i = 0; i < buffers.size(); ++i) {
    ASSERT_GE(offsets[i], 0);
    top = std::max(top, offsets[i] + buffers[i].bytes);
    const size_t need = static_cast<size_t>(buffers[i].last) + 1;
    if (starting.size() < need) starting.resize(need), ending.resize(need);
    starting[static_cast<size_t>(buffers[i].first)].push_back(static_cast<int>(i));
    ending[static_cast<size_t>(buffers[i].last)].push_back(static_cast<int>(i));
  }
  EXPECT_EQ(arena, top);
  std::set<std::pair<int64_t, int>> live;  // (offset, buffer) of non-empty live buffers
  for (size_t t = 0; t < starting.size(); ++t) {
    for (int b : starting[t]) {
      if (buffers[b].bytes == 0) continue;
      auto [it, fresh] = live.insert({offsets[b], b});
      ASSERT_TRUE(fresh);
      if (it != live.begin())
        EXPECT_LE(std::prev(it)->first + buffers[std::prev(it)->second].bytes, offsets[b]) << "buffers overlap at " << t;
      if (auto next = std::next(it); next != live.end())
        EXPECT_LE(offsets[b] + buffers[b].bytes, next->first) << "buffers overlap at " << t;
    }
    for (int b : ending[t])
      if (buffers[b].bytes > 0) live.erase({offsets[b], b});
  }
}

int64_t place(const std::vector<Lifetime>& buffers, std::vector<int64_t>& offsets) {
  offsets.assign(buffers.size(), -1);
  return place_buffers(buffers, offsets);
}

// A training step of `layers` layers: each forward step makes an activation kept until its
// backward step, and a temporary or two; each backward step makes temporaries and a gradient.
std::vector<Lifetime> training_step(int layers, int64_t activation, int64_t gradient) {
  std::vector<Lifetime> buffers;
  const int end = 4 * layers;
  for (int l = 0; l < layers; ++l) {
    buffers.push_back({activation, 2 * l, end - 2 * l});       // the activation
    buffers.push_back({activation, 2 * l, 2 * l + 1});         // a temporary of the forward step
    buffers.push_back({gradient, end - 2 * l, end - 2 * l + 1});  // the backward step's gradient
    buffers.push_back({activation, end - 2 * l, end - 2 * l});    // its scratch
  }
  return buffers;
}

}  // namespace

TEST(Placement, RandomBuffersNeverOverlapWhileTheyLive) {
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + static_cast<int>(rng() % 400), span = 1 + static_cast<int>(rng() % 300);
    std::vector<Lifetime> buffers;
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % span);
      const int length = rng() % 4 == 0 ? static_cast<int>(rng() % span) : static_cast<int>(rng() % 5);
      const int64_t bytes = rng() % 10 == 0 ? 0 : 64 * (1 + static_cast<int64_t>(rng() % 32));
      buffers.push_back({bytes, first, std::min(span - 1, first + length)});
    }
    std::vector<int64_t> offsets;
    const int64_t arena = place(buffers, offsets);
    SCOPED_TRACE("round " + std::to_string(round));
    expect_valid(buffers, offsets, arena);
    EXPECT_GE(arena, lower_bound(buffers));
  }
}

TEST(Placement, ATrainingStepPacksAtItsLowerBoundAtEverySize) {
  for (int layers : {3, 30, 300, 3000, 20000}) {
    for (auto [activation, gradient] : {std::pair<int64_t, int64_t>{256, 1024}, {4096, 64}}) {
      SCOPED_TRACE(std::to_string(layers) + " layers");
      const std::vector<Lifetime> buffers = training_step(layers, activation, gradient);
      std::vector<int64_t> offsets;
      const int64_t arena = place(buffers, offsets);
      expect_valid(buffers, offsets, arena);
      EXPECT_EQ(arena, lower_bound(buffers));
    }
  }
}

TEST(Placement, LongLivedBuffersTakeTheLowestAddressFreeForTheirWholeLife) {
  // Over a program of 64 instructions every buffer living two or more is long-lived: each must be
  // at the lowest offset clear of the larger ones placed before it (largest first, ties in order),
  // checked by trying every candidate offset. Hundreds of buffers, nested lives among them, so that
  // the placed ones span many blocks.
  std::mt19937 rng(11);
  for (int round = 0; round < 100; ++round) {
    const int n = 1 + static_cast<int>(rng() % 500), span = 64;
    std::vector<Lifetime> buffers;
    for (int i = 0; i < n; ++i) {
      const bool nested = rng() % 2 == 0;
      const int first = nested ? i % (span / 2) : static_cast<int>(rng() % (span - 1));
      const int last = nested ? span - 1 - i % (span / 2) : first + 1 + static_cast<int>(rng() % (span - 1 - first));
      const int64_t bytes = rng() % 20 == 0 ? 0 : 64 * (1 + static_cast<int64_t>(rng() % (rng() % 3 == 0 ? 32 : 2)));
      buffers.push_back({bytes, first, last});
    }
    std::vector<int64_t> offsets;
    const int64_t arena = place(buffers, offsets);
    SCOPED_TRACE("round " + std::to_string(round));
    expect_valid(buffers, offsets, arena);
    std::vector<int> order(buffers.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
    std::vector<int> placed;
    for (int b : order) {
      const Lifetime& me = buffers[b];
      auto clear = [&](int64_t offset) {
        for (int q : placed)
          if (buffers[q].first <= me.last && me.first <= buffers[q].last && buffers[q].bytes > 0 && me.bytes > 0 &&
              offsets[q] < offset + me.bytes && offset < offsets[q] + buffers[q].bytes)
            return false;
        return true;
      };
      std::vector<int64_t> candidates{0};
      for (int q : placed) candidates.push_back(offsets[q] + buffers[q].bytes);
      std::sort(candidates.begin(), candidates.end());
      const int64_t lowest = *std::find_if(candidates.begin(), candidates.end(), clear);
      ASSERT_EQ(offsets[b], me.bytes == 0 ? 0 : lowest) << "buffer " << b << " of " << me.bytes << " bytes, life " << me.first << ".." << me.last;
      placed.push_back(b);
    }
  }
}

TEST(Placement, EmptyBuffersTakeNoRoom) {
  const std::vector<Lifetime> buffers{{0, 0, 5}, {128, 0, 2}, {0, 1, 1}, {128, 3, 4}};
  std::vector<int64_t> offsets;
  EXPECT_EQ(place(buffers, offsets), 128);
  expect_valid(buffers, offsets, 128);
}
