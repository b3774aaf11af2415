#include "rewrite/catalogue.hpp"

#include <map>
#include <memory>
#include <mutex>

namespace kiln {

namespace {
struct Registered {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const RewriteGroup>> groups;
  std::vector<std::shared_ptr<const RewriteGroup>> retired;  // replaced groups stay valid
};
Registered& registered() {
  static Registered r;
  return r;
}
}  // namespace

void register_rewrite_group(RewriteGroup group) {
  auto& r = registered();
  std::lock_guard lock(r.mutex);
  const std::string name = group.name;
  auto& slot = r.groups[name];
  if (slot) r.retired.push_back(slot);
  slot = std::make_shared<const RewriteGroup>(std::move(group));
}

const RewriteGroup& rewrite_group(const std::string& name) {
  {
    auto& r = registered();
    std::lock_guard lock(r.mutex);
    if (auto it = r.groups.find(name); it != r.groups.end()) return *it->second;
  }
  // Built on first use (no static registration: linking statically cannot lose a group).
  static const std::map<std::string, RewriteGroup> groups = [] {
    std::map<std::string, RewriteGroup> g;
    for (RewriteGroup group : {merge_group(), constant_folding_group(), canonicalize_group(), stabilize_group(), specialize_group(), fusion_group(), scan_group()})
      g.emplace(group.name, std::move(group));
    return g;
  }();
  auto it = groups.find(name);
  if (it == groups.end()) throw Error("rewrite_group: no rewrite group named '" + name + "'");
  return it->second;
}

}  // namespace kiln
