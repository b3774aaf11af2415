#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

// A hash map from pointers or integers to values, stored in one array (open addressing, linear
// probing): a lookup reads one cache line where std::unordered_map reads a bucket and then a node
// allocated on its own, and an insertion allocates nothing until the array grows. Compiling a
// graph of 100k nodes looks up and inserts millions of times, its nodes scattered in memory.
// Unlike std::unordered_map, inserting a new key or erasing one may move the values: hold no
// reference or pointer to a value across either (finding a key that is there moves nothing).
template <class Key, class Value>
class FlatMap {
  static_assert(std::is_pointer_v<Key> || std::is_integral_v<Key>, "FlatMap keys are pointers or integers");

 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    slots_.clear();
    size_ = 0;
  }
  // Room for n entries without growing.
  void reserve(size_t n) {
    if (2 * n > slots_.size()) rehash(std::bit_ceil(std::max<size_t>(2 * n, 16)));
  }

  Value* find(Key key) {
    if (slots_.empty()) return nullptr;
    for (size_t i = home(key);; i = next(i)) {
      if (!slots_[i]) return nullptr;
      if (slots_[i]->first == key) return &slots_[i]->second;
    }
  }
  const Value* find(Key key) const { return const_cast<FlatMap*>(this)->find(key); }
  bool contains(Key key) const { return find(key) != nullptr; }

  // The value of key, made from args when key is new; true when it is.
  template <class... Args>
  std::pair<Value*, bool> try_emplace(Key key, Args&&... args) {
    if (Value* known = find(key)) return {known, false};  // nothing moves
    if (2 * (size_ + 1) > slots_.size()) rehash(std::max<size_t>(2 * slots_.size(), 16));
    size_t i = home(key);
    while (slots_[i]) i = next(i);
    slots_[i].emplace(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple(std::forward<Args>(args)...));
    ++size_;
    return {&slots_[i]->second, true};
  }
  Value& operator[](Key key) { return *try_emplace(key).first; }

  // Removes key; false when it was not there. The entries after it in its run shift back, so no
  // marker of a removed entry slows later lookups.
  bool erase(Key key) {
    if (slots_.empty()) return false;
    size_t hole = home(key);
    for (;; hole = next(hole)) {
      if (!slots_[hole]) return false;
      if (slots_[hole]->first == key) break;
    }
    slots_[hole].reset();
    --size_;
    for (size_t j = next(hole); slots_[j]; j = next(j)) {
      const size_t want = home(slots_[j]->first);
      // j's entry may move back into the hole unless its home lies after the hole, up to j.
      const bool home_between = hole < j ? (want > hole && want <= j) : (want > hole || want <= j);
      if (home_between) continue;
      slots_[hole] = std::move(slots_[j]);
      slots_[j].reset();
      hole = j;
    }
    return true;
  }

  // Every entry as (key, value), in no particular order.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& s : slots_)
      if (s) f(s->first, s->second);
  }

 private:
  size_t home(Key key) const {
    uint64_t k;
    if constexpr (std::is_pointer_v<Key>)
      k = reinterpret_cast<uintptr_t>(key);
    else
      k = static_cast<uint64_t>(key);
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }
  void rehash(size_t capacity) {
    std::vector<std::optional<std::pair<Key, Value>>> old(capacity);
    old.swap(slots_);
    shift_ = 64 - std::countr_zero(capacity);
    for (auto& s : old)
      if (s) {
        size_t i = home(s->first);
        while (slots_[i]) i = next(i);
        slots_[i] = std::move(s);
      }
  }

  std::vector<std::optional<std::pair<Key, Value>>> slots_;  // a power of two, at most half full
  size_t size_ = 0;
  int shift_ = 64;
};

}  // namespace kiln
