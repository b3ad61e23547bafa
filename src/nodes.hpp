#pragma once
// Which processes share a node.

#include <vector>

#include "reprise/comm.hpp"

namespace reprise::detail {

/// Collective: for every member of `comm`, a key naming its node (the lowest
/// rank on that node).
[[nodiscard]] std::vector<int> node_of_each_process(Comm& comm);

/// The slots of a layout in node-major order (`node_major_order`): the
/// process (rank) at each slot, and the node of each slot.
struct SlotOrder {
  std::vector<int> process;
  std::vector<int> node;
};

[[nodiscard]] SlotOrder slot_order(const std::vector<int>& node_of_process);

}  // namespace reprise::detail
