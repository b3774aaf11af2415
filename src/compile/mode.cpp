#include <sstream>

#include "kiln/function.hpp"

namespace kiln {

Mode Mode::fast_run() { return Mode("fast_run", {"merge", "constant_folding", "canonicalize", "scan", "stabilize", "specialize", "constant_folding", "canonicalize", "merge", "fusion"}); }
Mode Mode::fast_compile() { return Mode("fast_compile", {"merge", "constant_folding"}); }
Mode Mode::debug(DebugChecks checks) { return Mode("debug", fast_run().groups(), checks); }

std::string Profile::str() const {
  std::ostringstream s;
  s << calls << " calls\n";
  for (const OpProfile& op : ops)
    s << "  " << op.op << ": " << op.calls << " runs, " << op.seconds * 1e3 << " ms, " << op.bytes << " bytes written\n";
  return s.str();
}

std::string CompileReport::str() const {
  std::ostringstream s;
  s << "compiled in " << seconds * 1e3 << " ms; nodes " << nodes_before << " -> " << nodes_after << "\n";
  for (const StageTime& t : stages) s << "  stage " << t.stage << ": " << t.seconds * 1e3 << " ms\n";
  for (const RewriteStat& r : rewrites)
    s << "  " << r.group << "/" << r.name << ": fired " << r.fired << ", " << r.seconds * 1e3 << " ms\n";
  return s.str();
}

}  // namespace kiln
