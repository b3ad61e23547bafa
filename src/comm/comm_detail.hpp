#pragma once
// Pieces of Comm shared between its source files.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/detail/handover.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Everything a new Comm is made of.
struct Comm::Parts {
  MPI_Comm comm = MPI_COMM_NULL;      // the application's communicator
  MPI_Comm internal = MPI_COMM_NULL;  // reprise's private duplicate
  int original_size = 0;
  std::vector<OriginalRank> members;   // ascending
  std::vector<OriginalRank> failures;  // one entry per failure so far, sorted (see Comm::failures)
  std::vector<OriginalRank> moves;     // one entry per move so far, sorted (see Comm::moves)
  std::uint64_t epoch = 0;
  bool replacement = false;
};

/// What a process started by a migration received (`CommInternals::take_handover`).
struct Comm::Arrival {
  Handover handover;
};

/// What an active process brings to a round on the spare pool
/// (`take_from_pool`); a spare brings nothing and learns it from the round.
struct Comm::PoolRound {
  std::uint64_t epoch = 0;                            // the epoch of the result
  std::vector<OriginalRank> failures;                 // every failure so far
  std::vector<OriginalRank> moves;                    // every move so far
  std::vector<OriginalRank> alive;                    // the members before: those missing now failed since
  bool replacement = false;                           // this process is a replacement already
  std::vector<OriginalRank> leaving;                  // a migration: these move to spares
  std::span<const std::span<const std::byte>> state;  // a leaving process's state (pieces), for its spare
  std::span<const std::size_t> deferred;              // which pieces of the state are deferred (ascending)
  HandoverTrailer trailer;                            // what follows them
};

}  // namespace reprise

namespace reprise::detail {

/// MPI's text for the return code `rc` (MPI_Error_string).
std::string mpi_error_text(int rc);

/// Original ranks 0..original_size-1: the members of a full-size communicator.
std::vector<OriginalRank> all_ranks(int original_size);

/// Duplicates `comm` into a communicator for the application and a private
/// one for reprise, all of them returning errors instead of aborting. On
/// failure both are MPI_COMM_NULL (a failed duplicate leaves no handle that
/// may be freed).
int make_pair(MPI_Comm comm, MPI_Comm& application, MPI_Comm& internal);

/// What `split_everywhere` built: `comm` is MPI_COMM_NULL where the split
/// failed anywhere or this process's colour was MPI_UNDEFINED.
struct Split {
  bool ok = false;
  MPI_Comm comm = MPI_COMM_NULL;
};

/// Collective over `parent`, every live member calling it: splits `parent`
/// by `color` and `key` where `ok`, then agrees over `parent` that the
/// split worked everywhere (a process that comes with `ok` false skips the
/// split and revokes `parent`, so that the others leave it). ULFM reports a
/// failure during a creation only where it was seen: a process that failed
/// its split while others built theirs would leave them waiting forever in
/// the next collective on the new communicator, for a failure of a process
/// that is not a member of it (RELIABILITY.md, defect 49).
Split split_everywhere(MPI_Comm parent, bool ok, int color, int key);

}  // namespace reprise::detail
