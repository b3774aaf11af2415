#include "tensor/page_slab.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace kiln {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Blocks of every size the slab holds, many of each: aligned as promised, writable to their last
// byte, and no two overlap.
TEST(PageSlab, BlocksAreAlignedWritableAndDisjoint) {
  std::vector<std::pair<std::byte*, size_t>> blocks;
  for (int round = 0; round < 8; ++round)
    for (size_t bytes = 16; bytes <= PageSlab::kMaxBytes; bytes += 16) {
      auto* p = static_cast<std::byte*>(PageSlab::take(bytes));
      ASSERT_NE(p, nullptr) << bytes;
      EXPECT_EQ(address(p) % (bytes % 64 == 0 ? 64 : 16), 0u) << bytes << " bytes at " << p;
      std::memset(p, round, bytes);
      blocks.emplace_back(p, bytes);
    }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 0; i + 1 < blocks.size(); ++i)
    EXPECT_LE(address(blocks[i].first + blocks[i].second), address(blocks[i + 1].first)) << "blocks overlap";
  for (auto [p, bytes] : blocks) PageSlab::give(p, bytes);
}

// A block given back is handed out again for its size (sanitizer builds take every block from the
// heap, which decides by itself).
TEST(PageSlab, ReusesABlockGivenBack) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer builds take blocks from the heap";
#else
  void* a = PageSlab::take(192);
  PageSlab::give(a, 192);
  void* b = PageSlab::take(192);
  EXPECT_EQ(a, b);
  PageSlab::give(b, 192);
#endif
}

// Consecutive blocks lie next to each other, so that what one program makes in a row shares pages.
TEST(PageSlab, ConsecutiveBlocksAreAdjacent) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer builds take blocks from the heap";
#else
  // The first few may be blocks other tests gave back (8 in this file); the rest are carved anew,
  // at most two chunk boundaries in 504 KiB.
  std::vector<void*> blocks;
  for (int i = 0; i < 128; ++i) blocks.push_back(PageSlab::take(4032));
  int adjacent = 0;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) adjacent += address(blocks[i + 1]) == address(blocks[i]) + 4032;
  EXPECT_GE(adjacent, 110);
  for (void* p : blocks) PageSlab::give(p, 4032);
#endif
}

// Threads taking and giving blocks at once each get blocks nobody else holds.
TEST(PageSlab, ThreadsGetBlocksOfTheirOwn) {
  constexpr int kThreads = 4, kBlocks = 2000;
  std::vector<std::vector<void*>> taken(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kBlocks; ++i) {
        void* p = PageSlab::take(64);
        std::memset(p, t, 64);
        taken[t].push_back(p);
        if (i % 3 == 2) {
          PageSlab::give(taken[t].back(), 64);
          taken[t].pop_back();
        }
      }
    });
  for (auto& th : threads) th.join();
  std::vector<void*> all;
  for (int t = 0; t < kThreads; ++t)
    for (void* p : taken[t]) {
      EXPECT_EQ(*static_cast<unsigned char*>(p), t);
      all.push_back(p);
    }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a block was handed to two takers";
  for (void* p : all) PageSlab::give(p, 64);
}

}  // namespace
}  // namespace kiln
