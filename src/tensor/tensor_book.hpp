#pragma once
#include <memory>
#include <string>

#include "kiln/tensor.hpp"
#include "tensor/loc.hpp"

namespace kiln {


// The books kept on the tensors made for the user: which dispose scope holds each, how many were
// made and disposed, which are alive and where they were made (docs/eager.md).
struct TensorBook {
  using Impl = Tensor::Impl;
  // t was just made at loc: counted, listed and put in this thread's innermost scope, unless
  // kiln is making it for itself (InternalTensors).
  static void made(const std::shared_ptr<Tensor::Impl>& t, Loc loc);
  // Releases t's storage and marks it disposed at loc; by: the DisposeScope step ("end": the
  // scope made at loc ended), null for dispose().
  static void dispose(Tensor::Impl& t, Loc loc, const char* by = nullptr);
  static void gone(Tensor::Impl& t);  // its last handle went away
  static std::string disposed_message(const Tensor::Impl& t);
  static const std::shared_ptr<Impl>& impl_of(const Tensor& t) { return t.impl_; }
  // A tensor made while kiln runs for the user is counted only where kiln hands it over.
  static Tensor handed_over(Tensor t, Loc loc);
  // t is a temporary that kiln now keeps as its own (a builder's constant): when no handle but
  // t's (and its scope's) holds it, it is no longer counted, listed or in a scope; returns
  // whether it was taken over.
  static bool take_over(const Tensor& t);
};

// While one lives on a thread, the tensors that thread makes are kiln's own: not counted, listed
// or put in a scope (a compiled function's arena and slots, a graph's constants, a shared
// variable's value). What kiln then gives the user it hands over (TensorBook::handed_over).
class InternalTensors {
 public:
  InternalTensors();
  ~InternalTensors();
  InternalTensors(const InternalTensors&) = delete;
  InternalTensors& operator=(const InternalTensors&) = delete;
};

}  // namespace kiln
