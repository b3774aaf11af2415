#include "kiln/function.hpp"

namespace kiln {

Mode Mode::fast_run() { return Mode("fast_run", {}); }
Mode Mode::fast_compile() { return Mode("fast_compile", {}); }
Mode Mode::debug() { return Mode("debug", {}); }

}  // namespace kiln
