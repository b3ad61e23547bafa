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

}  // namespace reprise::detail
