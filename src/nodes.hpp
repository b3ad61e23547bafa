#pragma once
// Which processes share a node.

#include <vector>

#include "reprise/comm.hpp"

namespace reprise::detail {

/// Collective: for every member of `comm`, a key naming its node (the lowest
/// rank on that node).
[[nodiscard]] std::vector<int> node_of_each_process(Comm& comm);

}  // namespace reprise::detail
