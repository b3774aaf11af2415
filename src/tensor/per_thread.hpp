#pragma once
#include <cstdint>

namespace kiln {

// One T per thread, made on first use and destroyed when the thread exits, reached through an
// initial-exec TLS pointer: a load from the thread register, where a plain thread_local object in
// a shared library costs a __tls_get_addr call and a guard check on every access (a tenth of a
// small eager operation, measured). Each PerThread costs 16 bytes of static TLS, so kiln can
// still be dlopen'ed. get() returns null once the thread's T is destroyed (during thread exit),
// when callers fall back to doing without it.
template <class T> class PerThread {
 public:
  static T* get() {
    if (T* made = current) [[likely]]
      return made;
    return make();
  }

 private:
  enum class State : uint8_t { unmade, alive, gone };
  static inline thread_local T* current __attribute__((tls_model("initial-exec"))) = nullptr;
  static inline thread_local State state __attribute__((tls_model("initial-exec"))) = State::unmade;

  struct Owner {
    ~Owner() {
      state = State::gone;
      T* made = current;
      current = nullptr;
      delete made;
    }
  };

  static T* make() {
    if (state == State::gone) return nullptr;
    thread_local Owner owner;
    (void)owner;
    state = State::alive;
    current = new T();
    return current;
  }
};

}  // namespace kiln
