#include "tensor/page_slab.hpp"

#include <gtest/gtest.h>
#include <kiln/kiln.hpp>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
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
        ASSERT_NE(p, nullptr);
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

// Chunks whose blocks have all come back are unmapped by release_free_chunks (the newest stays),
// and what the slab keeps free drops by them; blocks are handed out afterwards as before.
TEST(PageSlab, ReleasesChunksWithNoBlockInUse) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer builds take blocks from the heap";
#else
  constexpr size_t kChunk = size_t{2} << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < 1600; ++i) blocks.push_back(PageSlab::take(4096));  // over three chunks
  const uintptr_t first_chunk = address(blocks.front()) & ~(kChunk - 1);
  const uintptr_t last_chunk = address(blocks.back()) & ~(kChunk - 1);
  ASSERT_NE(first_chunk, last_chunk);
  for (void* p : blocks) PageSlab::give(p, 4096);
  const int64_t free_before = PageSlab::free_bytes();
  EXPECT_GE(free_before, 1600 * 4096);
  PageSlab::release_free_chunks();
  EXPECT_LE(PageSlab::free_bytes(), free_before - static_cast<int64_t>(2 * kChunk));
  unsigned char resident = 0;
  errno = 0;
  EXPECT_EQ(mincore(reinterpret_cast<void*>(first_chunk), 4096, &resident), -1) << "the first chunk is still mapped";
  EXPECT_EQ(errno, ENOMEM);
  void* again = PageSlab::take(4096);
  ASSERT_NE(again, nullptr);
  std::memset(again, 1, 4096);
  PageSlab::give(again, 4096);
#endif
}

// A chunk with one block still in use stays mapped, and the block stays usable.
TEST(PageSlab, KeepsAChunkWithABlockInUse) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer builds take blocks from the heap";
#else
  std::vector<void*> blocks;
  for (int i = 0; i < 1200; ++i) blocks.push_back(PageSlab::take(2048));
  void* kept = blocks[10];
  std::memset(kept, 7, 2048);
  for (void* p : blocks)
    if (p != kept) PageSlab::give(p, 2048);
  PageSlab::release_free_chunks();
  unsigned char resident = 0;
  EXPECT_EQ(mincore(reinterpret_cast<void*>(address(kept) & ~((size_t{2} << 20) - 1)), 4096, &resident), 0);
  EXPECT_EQ(static_cast<unsigned char*>(kept)[2047], 7);
  PageSlab::give(kept, 2048);
#endif
}

// Through the public API: a small tensor's blocks count in n_slab_blocks; dropped, they are kept
// (this thread's pools) until release_cached_memory() hands the thread's pools back to the slab
// and the slab's free chunks to the system (all but the newest and any chunk where a block is
// still in use).
TEST(PageSlab, AllocatorStatsCountTheSlab) {
  constexpr int64_t kTensors = 3000, kChunk = int64_t{2} << 20;
  const int64_t taken_before = allocator_stats().n_slab_blocks;
  {
    std::vector<Tensor> small;
    for (int i = 0; i < kTensors; ++i) small.push_back(Tensor::zeros({1024}));  // 4 KiB of data each
    EXPECT_GE(allocator_stats().n_slab_blocks - taken_before, kTensors);
  }
  const AllocatorStats kept = allocator_stats();
  EXPECT_GE(kept.bytes_cached, kTensors * 4096);
  release_cached_memory();
  const AllocatorStats released = allocator_stats();
  EXPECT_LE(released.bytes_cached, kept.bytes_cached - kTensors * 4096);
#if !defined(__SANITIZE_ADDRESS__)
  // What the thread kept went to the slab, and the slab's free chunks to the system.
  EXPECT_LE(released.slab_free_bytes, kept.slab_free_bytes + 3 * kChunk);
#endif
}

}  // namespace
}  // namespace kiln
