#include "rewrite/catalogue.hpp"

#include <map>

namespace kiln {

const RewriteGroup& rewrite_group(const std::string& name) {
  // Built on first use (no static registration: linking statically cannot lose a group).
  static const std::map<std::string, RewriteGroup> groups = [] {
    std::map<std::string, RewriteGroup> g;
    for (RewriteGroup group : {merge_group(), constant_folding_group(), canonicalize_group(), stabilize_group(), specialize_group(), fusion_group()})
      g.emplace(group.name, std::move(group));
    return g;
  }();
  auto it = groups.find(name);
  if (it == groups.end()) throw Error("rewrite_group: no rewrite group named '" + name + "'");
  return it->second;
}

}  // namespace kiln
