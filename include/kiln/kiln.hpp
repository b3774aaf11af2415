#pragma once
// kiln: symbolic tensor expressions compiled into fast functions. Everything is in namespace kiln.
#include "kiln/data.hpp"
#include "kiln/eager.hpp"
#include "kiln/errors.hpp"
#include "kiln/function.hpp"
#include "kiln/grad.hpp"
#include "kiln/graph.hpp"
#include "kiln/io.hpp"
#include "kiln/ops.hpp"
#include "kiln/scan.hpp"
#include "kiln/scope.hpp"
#include "kiln/sparse.hpp"
#include "kiln/tensor.hpp"
