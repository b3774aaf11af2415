#pragma once
#include <cstdint>
#include <span>

namespace kiln {

// A buffer of the arena: its bytes and the first and last instruction during which it must stay.
struct Lifetime {
  int64_t bytes = 0;
  int first = 0, last = 0;
};

// Offsets in one arena for buffers, such that no two that live at the same instruction overlap;
// returns the arena's size. Long-lived buffers (activations kept for the backward pass) are few
// and decide the peak: they are packed first, largest first, each at the lowest address free
// during its whole life. The many short-lived ones then follow in program order, each in the
// smallest free range that holds it for its life (a free list swept along the program), which
// costs O(n log n) where packing every buffer the first way costs O(n^2).
int64_t place_buffers(std::span<const Lifetime> buffers, std::span<int64_t> offsets);

}  // namespace kiln
