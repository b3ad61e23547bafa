#pragma once
// The slots of a layout, grouped by node.

#include <vector>

namespace reprise::detail {

/// The slots of a layout in node-major order (`node_major_order`): the
/// process (rank) at each slot, and the node of each slot.
struct SlotOrder {
  std::vector<int> process;
  std::vector<int> node;
};

[[nodiscard]] SlotOrder slot_order(const std::vector<int>& node_of_process);

}  // namespace reprise::detail
