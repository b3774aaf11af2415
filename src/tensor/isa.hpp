#pragma once

namespace kiln {

// The instruction sets kiln's kernels are compiled for. The library itself is built for baseline
// x86-64 so that an installed copy runs on any x86-64 CPU; each hot loop is compiled three times
// and the copy for the CPU at hand runs.
enum class Isa : int { baseline = 0, avx2 = 1, avx512 = 2 };
const char* isa_name(Isa isa);
// The best set this CPU and its OS support (detected once), or less after limit_isa.
Isa active_isa();
// Runs no copy above `most` from now on (the tests run every copy; a user need never call it).
void limit_isa(Isa most);

#define KILN_TARGET_AVX2 "avx,avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,popcnt"
#define KILN_TARGET_AVX512 KILN_TARGET_AVX2 ",avx512f,avx512vl,avx512bw,avx512dq,avx512cd"

// One copy of body per instruction set: flatten inlines everything body calls into each copy, so
// each is code generated for its set (calls that cannot be inlined, such as libm's, stay calls).
// The body is taken by value: a closure reached through a reference lives in memory that every
// store of the kernel might alias, so its scalars are reloaded (and loops peeled) in the hot loop;
// a local copy is kept in registers. Kernels capture their scalars by value for the same reason.
template <class Body> [[gnu::target(KILN_TARGET_AVX512), gnu::flatten]] void run_compiled_for_avx512(Body body) { body(); }
template <class Body> [[gnu::target(KILN_TARGET_AVX2), gnu::flatten]] void run_compiled_for_avx2(Body body) { body(); }
template <class Body> [[gnu::flatten]] void run_compiled_for_baseline(Body body) { body(); }

// Runs body in the copy compiled for this CPU. Put hot loops inside, parallel regions outside.
template <class Body> void for_this_cpu(const Body& body) {
  switch (active_isa()) {
    case Isa::avx512: return run_compiled_for_avx512(body);
    case Isa::avx2: return run_compiled_for_avx2(body);
    case Isa::baseline: return run_compiled_for_baseline(body);
  }
}

}  // namespace kiln
