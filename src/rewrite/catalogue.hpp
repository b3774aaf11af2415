#pragma once
#include "rewrite/engine.hpp"

namespace kiln {

// One builder per group of the catalogue, each in its own file.
RewriteGroup merge_group();
RewriteGroup constant_folding_group();
RewriteGroup canonicalize_group();
RewriteGroup stabilize_group();
RewriteGroup specialize_group();
RewriteGroup fusion_group();
RewriteGroup scan_group();

}  // namespace kiln
