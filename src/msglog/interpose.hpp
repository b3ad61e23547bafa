#pragma once
// What the PMPI entry points of libreprise_msglog.so share: interpose.cpp
// (point-to-point, completion, probes, communicators, refusals) and
// interpose_collectives.cpp (the collectives). See interpose.cpp.

#include <mpi.h>

#include <new>

#include "log.hpp"
#include "reprise/error.hpp"
#include "runtime.hpp"

#define REPRISE_MSGLOG_EXPORT extern "C" __attribute__((visibility("default")))

namespace reprise::detail::interpose {

/// The logged communicator behind `comm`, or nullptr: the call passes straight to MPI.
CommInfo* logged(MPI_Comm comm) noexcept;

/// One line on stderr naming `call`, then `comm`'s error handler.
int report(const char* call, const char* what, MPI_Comm comm, int error_class);

/// Refuses `call`, which the message log does not cover.
int refuse(const char* call, const char* what, MPI_Comm comm = MPI_COMM_WORLD);

/// Runs `body` with the runtime's lock; a reprise error it raises is
/// reported as `call`'s, the lock let go.
template <class Body>
int guarded(const char* call, MPI_Comm comm, Body&& body) noexcept {
  try {
    const auto lock = Runtime::current()->enter();
    return body();
  } catch (const reprise::Error& error) {
    return report(call, error.what(), comm, error.mpi_error_class());
  } catch (const std::bad_alloc&) {
    return report(call, "out of memory", comm, MPI_ERR_NO_MEM);
  }
}

/// Before a collective on `comm`: the pending determinants reach the
/// buddy; `comm` becomes the physical communicator to call.
int collective(const char* call, MPI_Comm& comm);

}  // namespace reprise::detail::interpose
