#include "ops/gemm_choice.hpp"

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kiln {

namespace {

struct ShapeHash {
  size_t operator()(const GemmShape& s) const {
    uint64_t h = static_cast<uint64_t>(s.dtype) | (uint64_t{s.ta} << 4) | (uint64_t{s.tb} << 5) |
                 (static_cast<uint64_t>(s.threads) << 8);
    for (int64_t v : {s.m, s.n, s.k}) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ULL;
    return static_cast<size_t>(h);
  }
};

// Enough for every shape of any real program; a program that makes new shapes without end (a
// batch size per call) stops being timed instead of growing this.
constexpr size_t kMostShapes = 4096;

struct Choices {
  std::shared_mutex mutex;
  std::unordered_map<GemmShape, GemmLibrary, ShapeHash> by_shape;
};
Choices& choices() {
  static Choices c;
  return c;
}

}  // namespace

const char* gemm_library_name(GemmLibrary kernel) {
  switch (kernel) {
    case GemmLibrary::own: return "own";
    case GemmLibrary::onednn: return "onednn";
    case GemmLibrary::openblas: return "openblas";
  }
  return "?";
}

std::optional<GemmLibrary> pinned_gemm() {
  static const std::optional<GemmLibrary> pinned = []() -> std::optional<GemmLibrary> {
    const char* v = std::getenv("KILN_GEMM");
    if (!v || !*v) return std::nullopt;
    for (GemmLibrary k : {GemmLibrary::own, GemmLibrary::onednn, GemmLibrary::openblas})
      if (std::strcmp(v, gemm_library_name(k)) == 0) return k;
    std::cerr << "kiln: KILN_GEMM=" << v << " names no library (own, onednn, openblas); the products are timed\n";
    return std::nullopt;
  }();
  return pinned;
}

std::optional<GemmLibrary> known_gemm(const GemmShape& shape) {
  // A choice never changes once made, so each thread keeps the ones it found, unlocked: a product
  // in a steady loop costs no lock and no hash table.
  struct Recent {
    GemmShape shape{};
    GemmLibrary library{};
    bool used = false;
  };
  constexpr size_t kRecent = 64;
  thread_local std::array<Recent, kRecent> recent;
  Recent& slot = recent[ShapeHash{}(shape) % kRecent];
  if (slot.used && slot.shape == shape) return slot.library;
  Choices& c = choices();
  std::shared_lock lock(c.mutex);
  const auto it = c.by_shape.find(shape);
  if (it == c.by_shape.end()) return std::nullopt;
  slot = {shape, it->second, true};
  return it->second;
}

bool gemm_choices_full() {
  Choices& c = choices();
  std::shared_lock lock(c.mutex);
  return c.by_shape.size() >= kMostShapes;
}

double gemm_seconds_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

GemmLibrary remember_gemm(const GemmShape& shape, std::span<const GemmLibrary> candidates, std::span<const double> seconds) {
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (seconds[i] < seconds[best]) best = i;
  GemmLibrary chosen = candidates[best];
  {
    // The first choice made stands (two threads may time one shape at once): a shape's products
    // always run on one library, and known_gemm's copies stay true.
    Choices& c = choices();
    std::unique_lock lock(c.mutex);
    chosen = c.by_shape.try_emplace(shape, chosen).first->second;
  }
  const char* debug = std::getenv("KILN_DEBUG");
  if (debug && std::atoi(debug) >= 1) {
    std::cerr << "kiln: matrix product " << dtype_name(shape.dtype) << " " << (shape.ta ? 'T' : 'N') << (shape.tb ? 'T' : 'N')
              << " m=" << shape.m << " n=" << shape.n << " k=" << shape.k << " on " << shape.threads << " thread(s):";
    for (size_t i = 0; i < candidates.size(); ++i)
      std::cerr << " " << gemm_library_name(candidates[i]) << " "
                << 2e-9 * static_cast<double>(shape.m) * static_cast<double>(shape.n) * static_cast<double>(shape.k) / seconds[i]
                << " GFLOP/s";
    std::cerr << " -> " << gemm_library_name(chosen) << "\n";
  }
  return chosen;
}

}  // namespace kiln
