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

#include <cstddef>
#include <span>
#include <vector>

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

/// Memory for `count` elements of `type`, laid out as MPI reads and writes them.
class TypedBuffer {
 public:
  TypedBuffer(int count, MPI_Datatype type);
  [[nodiscard]] void* data() noexcept { return _bytes.empty() ? nullptr : _bytes.data() + _offset; }

 private:
  std::vector<std::byte> _bytes;
  MPI_Aint _offset = 0;
};

/// What a collective whose contribution may be MPI_IN_PLACE (MPI_Allreduce,
/// MPI_Allgather(v)) sends. In place, MPI reads the contribution from the
/// receive buffer, where a call that meets a process failure may leave
/// partial results before it is made again after the recovery: where the
/// Driver replays, it is copied aside first and sent from there.
class Contribution {
 public:
  /// `send` as the call names it; `in_place`: where the receive buffer holds it.
  Contribution(const Runtime& runtime, const OutgoingPiece& send, const ResultPiece& in_place);
  [[nodiscard]] const OutgoingPiece& send() const noexcept { return _send; }

 private:
  TypedBuffer _copy;
  OutgoingPiece _send;
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
