#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>

namespace kiln {

// A vector of trivially copyable values that holds up to N of them inline and goes to the heap
// only beyond: the shapes and strides a kernel computes on every run (every tensor kiln has seen
// has far fewer than 8 dimensions) cost no allocation.
template <class T, size_t N> class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SmallVector() = default;
  SmallVector(size_t n, T value) { assign(n, value); }
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  explicit SmallVector(std::span<const T> values) { assign(values.begin(), values.end()); }
  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }

  template <class It>
    requires(!std::is_integral_v<It>)
  void assign(It first, It last) {
    size_ = 0;
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data()[size_++] = *first;
  }
  void assign(size_t n, T value) {
    size_ = 0;
    reserve(n);
    std::fill_n(data(), n, value);
    size_ = n;
  }
  void push_back(T value) {
    reserve(size_ + 1);
    data()[size_++] = value;
  }
  void resize(size_t n, T value = T()) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = n;
  }
  void clear() { size_ = 0; }

  T* data() { return heap_ ? heap_.get() : inline_; }
  const T* data() const { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  operator std::span<const T>() const { return {data(), size_}; }  // NOLINT: used where a Shape would be
  bool operator==(std::span<const T> other) const { return std::equal(begin(), end(), other.begin(), other.end()); }

 private:
  void reserve(size_t n) {
    if (n <= capacity_) return;
    const size_t capacity = std::max(n, 2 * capacity_);
    auto grown = std::make_unique<T[]>(capacity);
    std::copy_n(data(), size_, grown.get());
    heap_ = std::move(grown);
    capacity_ = capacity;
  }
  T inline_[N];
  std::unique_ptr<T[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

// The dimensions of one operand of a kernel: a shape or strides, in elements.
using Dims = SmallVector<int64_t, 8>;

}  // namespace kiln
