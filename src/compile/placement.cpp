#include "compile/placement.hpp"

#include "kiln/errors.hpp"

#include <algorithm>
#include <map>
#include <memory_resource>
#include <span>
#include <set>
#include <string>
#include <vector>

namespace kiln {

namespace {

// Buffers that live at least 1/kLongLivedShare of the program are packed exactly (first fit over
// every other long-lived buffer); the rest go through the free list.
constexpr int kLongLivedShare = 64;
// How many free ranges a short-lived buffer tries before it goes to the end of the arena.
constexpr int kTries = 8;

// The free address ranges at one point of the program: finite ranges, and everything from `top`
// up. No finite range ends at top (it would be part of it).
class FreeRanges {
 public:
  int64_t top() const { return top_; }

  // Marks [offset, end) used; it must be free.
  void take(int64_t offset, int64_t end) {
    if (offset >= top_) {
      if (offset > top_) add(top_, offset);
      top_ = end;
      return;
    }
    auto it = by_offset_.upper_bound(offset);  // the range after the one that holds offset
    if (it == by_offset_.begin() || std::prev(it)->second < end)
      throw Error("placement: bytes " + std::to_string(offset) + ".." + std::to_string(end) +
                  " of the arena are taken twice (please report it)");
    it = std::prev(it);
    const int64_t start = it->first, stop = it->second;
    remove(it);
    if (start < offset) add(start, offset);
    if (end < stop) add(end, stop);
  }

  // Marks [offset, end) free, joining free neighbours.
  void release(int64_t offset, int64_t end) {
    if (auto next = by_offset_.find(end); next != by_offset_.end()) {
      end = next->second;
      remove(next);
    }
    if (auto it = by_offset_.lower_bound(offset); it != by_offset_.begin()) {
      if (auto prev = std::prev(it); prev->second == offset) {
        offset = prev->first;
        remove(prev);
      }
    }
    if (end == top_) top_ = offset;
    else add(offset, end);
  }

  // The free finite ranges of at least `bytes`, smallest first, each as (start, end), to visit.
  template <class Visit> void smallest_holding(int64_t bytes, int most, Visit visit) const {
    for (auto it = by_size_.lower_bound({bytes, INT64_MIN}); it != by_size_.end() && most-- > 0; ++it) {
      if (visit(it->second, it->second + it->first)) return;
    }
  }

 private:
  void add(int64_t start, int64_t end) {
    by_offset_.emplace(start, end);
    by_size_.insert({end - start, start});
  }
  void remove(std::pmr::map<int64_t, int64_t>::iterator it) {
    by_size_.erase({it->second - it->first, it->first});
    by_offset_.erase(it);
  }
  // Their nodes come from a pool of their own: a program's placement adds and removes ranges
  // a few times per buffer.
  std::pmr::unsynchronized_pool_resource nodes_;
  std::pmr::map<int64_t, int64_t> by_offset_{&nodes_};            // start -> end
  std::pmr::set<std::pair<int64_t, int64_t>> by_size_{&nodes_};  // (bytes, start)
  int64_t top_ = 0;
};

struct Placed {
  int64_t offset, end;
  int first, last;
};

bool by_address(const Placed& x, const Placed& y) { return std::pair(x.offset, x.end) < std::pair(y.offset, y.end); }

// The long-lived buffers placed so far, in address order, in blocks that summarize their entries.
// First fit steps over a block at once when none of its buffers lives while the new one does, or
// when all do and together they cover one unbroken address range; it visits the entries of the
// other blocks one by one. A deep network's activations all live at once (each layer's inside
// the last one's life), which made a search that visits every placed buffer quadratic.
class PlacedBlocks {
 public:
  // The lowest offset where `bytes` fit clear of every placed buffer living during [first, last].
  int64_t first_fit(int64_t bytes, int first, int last) const {
    if (bytes == 0) return 0;
    int64_t offset = 0;
    for (const Block& block : blocks_) {
      if (block.max_last < first || block.min_first > last) continue;
      if (block.contiguous && block.max_first <= last && first <= block.min_last) {
        if (offset + bytes <= block.lo) return offset;
        offset = std::max(offset, block.hi);
        continue;
      }
      for (const Placed& q : block.entries) {
        if (q.first > last || first > q.last) continue;
        if (offset + bytes <= q.offset) return offset;
        offset = std::max(offset, q.end);
      }
    }
    return offset;
  }

  void insert(const Placed& entry) {
    if (blocks_.empty()) {
      blocks_.emplace_back();
      blocks_.back().entries.push_back(entry);
      blocks_.back().summarize();
      return;
    }
    auto block = std::find_if(blocks_.begin(), blocks_.end(), [&](const Block& b) { return by_address(entry, b.entries.back()); });
    if (block == blocks_.end()) block = std::prev(blocks_.end());
    std::vector<Placed>& entries = block->entries;
    entries.insert(std::upper_bound(entries.begin(), entries.end(), entry, by_address), entry);
    if (entries.size() > 2 * kBlockEntries) {
      Block upper;
      upper.entries.assign(entries.begin() + kBlockEntries, entries.end());
      entries.resize(kBlockEntries);
      upper.summarize();
      block->summarize();
      blocks_.insert(std::next(block), std::move(upper));
      return;
    }
    block->summarize();
  }

 private:
  static constexpr size_t kBlockEntries = 32;
  struct Block {
    std::vector<Placed> entries;  // by address
    int min_first = 0, max_first = 0, min_last = 0, max_last = 0;
    int64_t lo = 0, hi = 0;   // the addresses the entries span
    bool contiguous = true;   // their ranges leave no gap in [lo, hi)
    void summarize() {
      min_first = max_first = entries[0].first;
      min_last = max_last = entries[0].last;
      lo = entries[0].offset;
      hi = entries[0].end;
      contiguous = true;
      for (const Placed& q : entries) {
        min_first = std::min(min_first, q.first);
        max_first = std::max(max_first, q.first);
        min_last = std::min(min_last, q.last);
        max_last = std::max(max_last, q.last);
        contiguous = contiguous && q.offset <= hi;
        hi = std::max(hi, q.end);
      }
    }
  };
  std::vector<Block> blocks_;
};

// The buffers grouped by the instruction where their lives start (or end), each group in buffer
// order: two flat arrays, however long the program.
class GroupedByInstruction {
 public:
  GroupedByInstruction(int horizon, std::span<const Lifetime> buffers, int Lifetime::*instruction)
      : begin_(static_cast<size_t>(horizon) + 1, 0), items_(buffers.size()) {
    for (const Lifetime& b : buffers) ++begin_[static_cast<size_t>(b.*instruction) + 1];
    for (size_t k = 1; k < begin_.size(); ++k) begin_[k] += begin_[k - 1];
    std::vector<int> next(begin_.begin(), begin_.end() - 1);
    for (size_t b = 0; b < buffers.size(); ++b) items_[static_cast<size_t>(next[static_cast<size_t>(buffers[b].*instruction)]++)] = static_cast<int>(b);
  }
  std::span<int> at(int k) {
    return {items_.data() + begin_[static_cast<size_t>(k)], static_cast<size_t>(begin_[static_cast<size_t>(k) + 1] - begin_[static_cast<size_t>(k)])};
  }

 private:
  std::vector<int> begin_;
  std::vector<int> items_;
};

}  // namespace

int64_t place_buffers(std::span<const Lifetime> buffers, std::span<int64_t> offsets) {
  const int n = static_cast<int>(buffers.size());
  int horizon = 0;
  for (const Lifetime& b : buffers) horizon = std::max(horizon, b.last + 1);
  const int threshold = std::max(1, horizon / kLongLivedShare);
  auto lives_long = [&](int b) { return buffers[b].last - buffers[b].first >= threshold; };
  int64_t arena = 0;

  // 1. The long-lived ones, largest first, each at the lowest address free during its whole life.
  // Placed buffers are kept in address order, so the first gap that fits ends each search.
  std::vector<int> long_lived;
  for (int b = 0; b < n; ++b)
    if (lives_long(b)) long_lived.push_back(b);
  std::stable_sort(long_lived.begin(), long_lived.end(), [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
  PlacedBlocks placed;
  for (int b : long_lived) {
    const Lifetime& me = buffers[b];
    const int64_t offset = placed.first_fit(me.bytes, me.first, me.last);
    offsets[b] = offset;
    arena = std::max(arena, offset + me.bytes);
    placed.insert({offset, offset + me.bytes, me.first, me.last});
  }

  // 2. Along the program: the long-lived buffers starting at an instruction take their places,
  // then the short-lived ones starting there, largest first, take the smallest free range that
  // stays clear of every long-lived buffer starting while they live; then those whose life ends
  // there are freed.
  GroupedByInstruction starting(horizon, buffers, &Lifetime::first), ending(horizon, buffers, &Lifetime::last);
  FreeRanges free;
  std::vector<std::pair<int64_t, int64_t>> upcoming;  // ranges of long-lived buffers starting later in a life
  // The lowest start in [start, stop - bytes] of a range clear of `upcoming`, or -1.
  auto clear_start = [&](int64_t start, int64_t stop, int64_t bytes) -> int64_t {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto [o, e] : upcoming)
        if (start < e && o < start + bytes) {
          start = e;
          moved = true;
        }
    }
    return start + bytes <= stop ? start : -1;
  };
  for (int k = 0; k < horizon; ++k) {
    const std::span<int> now = starting.at(k);
    std::stable_sort(now.begin(), now.end(), [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
    for (int b : now)
      if (lives_long(b) && buffers[b].bytes > 0) free.take(offsets[b], offsets[b] + buffers[b].bytes);
    for (int b : now) {
      const Lifetime& me = buffers[b];
      if (lives_long(b) || me.bytes == 0) {
        if (me.bytes == 0) offsets[b] = 0;
        continue;
      }
      upcoming.clear();
      for (int t = k + 1; t <= me.last; ++t)
        for (int u : starting.at(t))
          if (lives_long(u)) upcoming.push_back({offsets[u], offsets[u] + buffers[u].bytes});
      int64_t offset = -1;
      free.smallest_holding(me.bytes, kTries, [&](int64_t start, int64_t stop) {
        offset = clear_start(start, stop, me.bytes);
        return offset >= 0;
      });
      if (offset < 0) offset = clear_start(free.top(), INT64_MAX, me.bytes);
      // A start above the top leaves the range below it free, which take() records.
      free.take(offset, offset + me.bytes);
      offsets[b] = offset;
      arena = std::max(arena, offset + me.bytes);
    }
    for (int b : ending.at(k))
      if (buffers[b].bytes > 0) free.release(offsets[b], offsets[b] + buffers[b].bytes);
  }
  return arena;
}

}  // namespace kiln
