#pragma once
#include <stdexcept>
#include <string>

namespace kiln {

// Every error kiln raises derives from Error. Messages name the op, the shapes and dtypes involved
// and, for graph nodes, the source line where the user built the node.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  // A copy of the same dynamic type with a new message, so context can be added while rethrowing.
  virtual void rethrow_with(const std::string& what) const { throw Error(what); }
};

#define KILN_DEFINE_ERROR(Name)                                                           \
  class Name : public Error {                                                             \
   public:                                                                                \
    explicit Name(const std::string& what) : Error(what) {}                               \
    void rethrow_with(const std::string& what) const override { throw Name(what); }       \
  };
KILN_DEFINE_ERROR(TypeError)
KILN_DEFINE_ERROR(ShapeError)
KILN_DEFINE_ERROR(GradError)
KILN_DEFINE_ERROR(DisposedError)
KILN_DEFINE_ERROR(IOError)
KILN_DEFINE_ERROR(MemoryError)      // an allocation the system refused: names the bytes, and in a call the op
KILN_DEFINE_ERROR(BadOptimization)  // Mode::debug(): a rewrite changed a value
#undef KILN_DEFINE_ERROR

}  // namespace kiln
