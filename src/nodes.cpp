#include "nodes.hpp"

#include "reprise/placement.hpp"

namespace reprise::detail {

SlotOrder slot_order(const std::vector<int>& node_of_process) {
  SlotOrder order{node_major_order(node_of_process), {}};
  for (int process : order.process) order.node.push_back(node_of_process[static_cast<std::size_t>(process)]);
  return order;
}

}  // namespace reprise::detail
