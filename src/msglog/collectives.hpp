#pragma once
// The collectives whose result differs from member to member (rooted,
// personalised, prefix and scattering reductions), as the message log runs
// them where reprise's Driver replays (docs/ARCHITECTURE.md §16): each is
// built on collectives whose result every member shares, which
// Runtime::uniform_collective keeps until the next checkpoint, so that a
// replaying process is served them from the survivors' record as it is
// served MPI_Allreduce. A reduction runs as MPI_Allreduce (the root keeps
// the result); gathers, scatters and all-to-alls as one exchange of packed
// contributions that every member receives whole; a scan as an allgather
// of the contributions, folded in rank order on each member.

#include <mpi.h>

#include <span>

#include "runtime.hpp"

namespace reprise::detail {

/// A reduction's arguments, as MPI_Reduce takes them.
struct Reduction {
  const void* send = nullptr;  ///< MPI_IN_PLACE: the contribution is at `receive`
  void* receive = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

/// What this process sends one member in an exchange (count 0: nothing).
struct OutgoingPiece {
  const void* buffer = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
};

/// MPI_Reduce to `root`: the result lands at `reduction.receive` on the root only.
int shared_reduce(Runtime& runtime, CommInfo& comm, const Reduction& reduction, int root);

/// MPI_Reduce_scatter: `whole.count` elements reduced, member r keeps the
/// `counts[r]` of them after those of the members before it, at `whole.receive`.
int shared_reduce_scatter(Runtime& runtime, CommInfo& comm, const Reduction& whole, std::span<const int> counts);

/// MPI_Scan, or MPI_Exscan when `exclusive` (member 0's result untouched).
int shared_scan(Runtime& runtime, CommInfo& comm, const Reduction& reduction, bool exclusive);

/// This process sends `to[m]` to member m and receives member m's piece
/// for it at `from[m]` (one piece per member in both).
int shared_exchange(Runtime& runtime, CommInfo& comm, std::span<const OutgoingPiece> to,
                    std::span<const ResultPiece> from);

}  // namespace reprise::detail
