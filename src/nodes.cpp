#include "nodes.hpp"

#include "reprise/placement.hpp"

namespace reprise::detail {

std::vector<int> node_of_each_process(Comm& comm) {
  MPI_Comm node = MPI_COMM_NULL;
  comm.check(MPI_Comm_split_type(comm.raw(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  // A node is named by the lowest rank on it.
  int key = comm.rank().value();
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  comm.check(rc, "MPI_Allreduce");
  return comm.allgather(key);
}

SlotOrder slot_order(const std::vector<int>& node_of_process) {
  SlotOrder order{node_major_order(node_of_process), {}};
  for (int process : order.process) order.node.push_back(node_of_process[static_cast<std::size_t>(process)]);
  return order;
}

}  // namespace reprise::detail
