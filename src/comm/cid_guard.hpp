#pragma once
// A guard over a defect of Open MPI 5.0.x: a communicator's creation that
// meets a dead process never ends (docs/RELIABILITY.md, defect 37).

namespace reprise::detail::ompi {

/// What `install_cid_guard` found.
enum class CidGuard {
  kInstalled,    ///< in force in this process
  kNotOpenMpi5,  ///< another MPI (or Open MPI release series): nothing to guard
  kUnusable,     ///< Open MPI 5.0, but its library could not be guarded here
};

/// Open MPI 5.0 builds a new communicator (the index all members agree on,
/// then its activation) as a chain of steps on an internal request; a step
/// that fails records its error in the request, but the chain's end sets the
/// request's status from the last step's result alone, so the error is
/// lost. `MPI_Intercomm_merge` and `MPI_Intercomm_create` then never return
/// once a member has died: the index agreement sees a mismatch and runs
/// again, forever (`NBC_Progress: an error 75 ...` at each round). The guard
/// wraps every step `libmpi` schedules so that the last step of a chain
/// returns the error an earlier one recorded: the call returns
/// `MPI_ERR_PROC_FAILED` (or `MPI_ERR_REVOKED`) like any other. Installed
/// A creation that fails also keeps Open MPI's turn to pick an index, so
/// that every later creation on a communicator of higher index waits for it
/// forever: the guard gives the turn back when the chain that took it ends
/// (tools/upstream/cid_turn_kept/). Installed
/// by rewriting `libmpi`'s two procedure-linkage slots for scheduling and
/// returning such requests, so it holds whatever the order libraries were
/// loaded in (a Python program's included). After `MPI_Init`; collective
/// over nothing; idempotent and thread-safe.
CidGuard install_cid_guard();

}  // namespace reprise::detail::ompi
