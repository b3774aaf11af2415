#include "tensor/isa.hpp"

#include <atomic>

namespace kiln {

namespace {

Isa detected() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512cd");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  return avx512 && avx2 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::baseline;
}

std::atomic<int>& limit() {
  static std::atomic<int> most{static_cast<int>(Isa::avx512)};
  return most;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::baseline: return "x86-64";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

Isa active_isa() {
  static const Isa cpu = detected();
  const int most = limit().load(std::memory_order_relaxed);
  return static_cast<int>(cpu) < most ? cpu : static_cast<Isa>(most);
}

void limit_isa(Isa most) { limit().store(static_cast<int>(most), std::memory_order_relaxed); }

}  // namespace kiln
