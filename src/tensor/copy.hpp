#pragma once
#include <span>

#include "kiln/tensor.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

// The strides that read t as a value of out_shape by NumPy's broadcasting: t's axes aligned to the
// right, its size-1 and missing axes read with stride 0.
Dims broadcast_strides(const Tensor& t, std::span<const int64_t> out_shape);
Dims broadcast_strides(std::span<const int64_t> shape, std::span<const int64_t> strides, std::span<const int64_t> out_shape);

// ShapeError when t is a broadcast view (stride 0 along an axis longer than 1): a write would
// land on the same elements several times.
void check_writable_view(const Tensor& t, const char* what);

// Writes src, broadcast to dst's shape, into dst, converting the dtype. Allocates nothing.
void copy_broadcast(const Tensor& dst, const Tensor& src);
// Elements described by their geometry: a part of a tensor, without a handle made for it.
struct Region {
  std::byte* data;
  DType dtype;
  std::span<const int64_t> shape, strides;  // in elements
};
Region region_of(const Tensor& t);
void copy_broadcast(const Region& dst, const Region& src);

// The row-major strides of a contiguous value of this shape.
Dims contiguous_dims(std::span<const int64_t> shape);

// Writes src's elements in row-major order to dst, in src's dtype. Allocates nothing.
void copy_to_contiguous(std::byte* dst, const Tensor& src);

}  // namespace kiln
