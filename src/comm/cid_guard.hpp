#pragma once
// A guard over defects of Open MPI 5.0.x in a communicator's creation that
// meets a dead process: it never ends (docs/RELIABILITY.md, defect 37), or
// the process crashes (defect 23).

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
/// `MPI_ERR_PROC_FAILED` (or `MPI_ERR_REVOKED`) like any other.
/// A creation that fails also keeps Open MPI's turn to pick an index, so
/// that every later creation on a communicator of higher index waits for it
/// forever: the guard gives the turn back when the chain that took it ends
/// (tools/upstream/cid_turn_kept/).
/// A failure learned while a new communicator is activated (in Open MPI's
/// table, its collectives not selected yet) revokes it through its null
/// collectives: SIGSEGV in `ompi_comm_revoke_local`
/// (tools/upstream/revoke_activating/). The guard revokes it with
/// collectives that have nothing to revoke of their own: the creation
/// fails, or a collective on the new communicator does (this part only
/// where a communicator is laid out as it expects, checked first).
/// Installed by rewriting `libmpi`'s procedure-linkage
/// slots for scheduling and returning such requests and for revoking a
/// communicator, so it holds whatever the order libraries were loaded in (a
/// Python program's included). After `MPI_Init`; collective over nothing;
/// idempotent and thread-safe.
CidGuard install_cid_guard();

}  // namespace reprise::detail::ompi
