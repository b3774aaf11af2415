#include "ops/openblas.hpp"

#include <dlfcn.h>

namespace kiln {

namespace {

// Debian's path of the OpenMP build (the alternatives system points libopenblas.so.0 at whichever
// build was installed last, so the generic name may be the pthread one).
constexpr const char* kOpenMpBuild = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";

OpenBlas* load() {
  void* handle = dlopen(kOpenMpBuild, RTLD_NOW | RTLD_LOCAL);
  if (!handle) return nullptr;
  auto parallel = reinterpret_cast<int (*)()>(dlsym(handle, "openblas_get_parallel"));
  auto corename = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_corename"));
  auto* blas = new OpenBlas;  // kept for the process, like the library
  blas->sgemm = reinterpret_cast<OpenBlas::Sgemm>(dlsym(handle, "cblas_sgemm"));
  blas->dgemm = reinterpret_cast<OpenBlas::Dgemm>(dlsym(handle, "cblas_dgemm"));
  constexpr int kOpenMp = 2;  // openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP
  if (!parallel || parallel() != kOpenMp || !blas->sgemm || !blas->dgemm) {
    delete blas;
    dlclose(handle);
    return nullptr;
  }
  blas->core = corename ? corename() : "?";
  return blas;
}

}  // namespace

const OpenBlas* openblas() {
  static const OpenBlas* loaded = load();
  return loaded;
}

}  // namespace kiln
