#include "tensor/flat_map.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

namespace kiln {
namespace {

TEST(FlatMap, FindsWhatWasInsertedAndNothingElse) {
  FlatMap<int64_t, std::string> m;
  EXPECT_EQ(m.find(3), nullptr);
  EXPECT_FALSE(m.erase(3));
  auto [value, fresh] = m.try_emplace(3, "three");
  EXPECT_TRUE(fresh);
  EXPECT_EQ(*value, "three");
  auto [again, second] = m.try_emplace(3, "other");
  EXPECT_FALSE(second);
  EXPECT_EQ(*again, "three");
  m[4] = "four";
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(*m.find(4), "four");
  EXPECT_FALSE(m.contains(5));
}

// Random insertions and erasures against std::unordered_map over 300 keys. In a table reserved for
// 300 (1024 slots) the colliding keys all hash to the 8 slots around its end: long runs that wrap
// around, which erasures shift back across.
TEST(FlatMap, AgreesWithUnorderedMapThroughInsertionsAndErasures) {
  std::mt19937_64 rng(7);
  auto keys_of = [&](bool colliding) {
    std::vector<uint64_t> keys;
    while (keys.size() < 300) {
      const uint64_t k = rng(), home = (k * 0x9E3779B97F4A7C15ULL) >> 54;
      if (!colliding || home >= 1020 || home < 4) keys.push_back(k);
    }
    return keys;
  };
  for (const bool colliding : {false, true}) {
    const std::vector<uint64_t> keys = keys_of(colliding);
    FlatMap<uint64_t, int> m;
    m.reserve(keys.size());
    std::unordered_map<uint64_t, int> reference;
    for (int step = 0; step < 20000; ++step) {
      const uint64_t key = keys[rng() % keys.size()];
      switch (rng() % 3) {
        case 0: {
          const int value = static_cast<int>(rng() % 1000);
          const bool fresh = m.try_emplace(key, value).second;
          EXPECT_EQ(fresh, reference.try_emplace(key, value).second);
          break;
        }
        case 1:
          EXPECT_EQ(m.erase(key), reference.erase(key) == 1);
          break;
        default: {
          const int* found = m.find(key);
          const auto it = reference.find(key);
          ASSERT_EQ(found != nullptr, it != reference.end()) << "key " << key << " at step " << step;
          if (found) EXPECT_EQ(*found, it->second);
        }
      }
      ASSERT_EQ(m.size(), reference.size());
    }
    size_t visited = 0;
    m.for_each([&](uint64_t key, int value) {
      ++visited;
      EXPECT_EQ(reference.at(key), value);
    });
    EXPECT_EQ(visited, reference.size());
  }
}

// Found in review: finding a key that is there through try_emplace could grow the table and move
// every value.
TEST(FlatMap, FindingAKeyThatIsThereMovesNothing) {
  FlatMap<int64_t, int> m;
  for (int64_t k = 0; k < 8; ++k) m[k] = static_cast<int>(k);  // 8 of 16 slots: the next insertion grows
  const int* before = m.find(3);
  EXPECT_FALSE(m.try_emplace(3, 99).second);
  EXPECT_EQ(m.find(3), before);
  EXPECT_EQ(*before, 3);
}

TEST(FlatMap, PointerKeys) {
  int cells[100];
  FlatMap<const int*, int> m;
  m.reserve(100);
  for (int i = 0; i < 100; ++i) m[&cells[i]] = i;
  for (int i = 0; i < 100; i += 2) EXPECT_TRUE(m.erase(&cells[i]));
  for (int i = 0; i < 100; ++i) {
    const int* found = m.find(&cells[i]);
    if (i % 2) {
      ASSERT_NE(found, nullptr);
      EXPECT_EQ(*found, i);
    } else {
      EXPECT_EQ(found, nullptr);
    }
  }
}

}  // namespace
}  // namespace kiln
