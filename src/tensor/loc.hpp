#pragma once
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

std::string loc_str(const Loc& loc);  // "file.cpp:12": the file without its folders, and the line

}  // namespace kiln
