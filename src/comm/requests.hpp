#pragma once
// Send requests reprise does not wait for.

#include <mpi.h>

#include <span>

namespace reprise::detail {

/// Takes a send request this process will not wait for (a message sent and
/// forgotten, or a send given up after a failure). It stays allocated until
/// it completes without error, and forever if it ends in error: Open MPI
/// (ob1) aborts the process when a send request that was freed later ends in
/// error ("Send error after request freed"), which is the usual fate of a
/// send to a dead process or on a revoked communicator. Each call also frees
/// the requests taken earlier that have completed well. Thread-safe.
void let_go(MPI_Request request) noexcept;
/// Takes many such requests at once: one pass over those in flight, not
/// one per request.
void let_go(std::span<const MPI_Request> requests) noexcept;

}  // namespace reprise::detail
