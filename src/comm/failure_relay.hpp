#pragma once
// A relay over a limit of Open MPI 5.0's runtime (PRRTE 3.0): it tells a
// process's death only to the processes of the dead one's own job, so the
// processes of another job (those that MPI_Comm_spawn started, or the job
// that started them) may never learn of it (docs/RELIABILITY.md, defect 37).

namespace reprise::detail::pmix {

/// What `install_failure_relay` found.
enum class FailureRelay {
  kInstalled,  ///< in force in this process
  kNotNeeded,  ///< fault tolerance is off, or no PMIx library (another MPI): nothing to relay
  kUnusable,   ///< PMIx is there, but the relay could not be set up
};

/// PRRTE sends the event of a process's failure (killed by a signal, ended
/// without finalising, aborted) to the dead process's own job alone (a
/// custom range of its namespace), and Open MPI marks a process failed on
/// that event; a process of another job learns of the death only from its
/// own connection to the dead one, if it has one. An agreement of processes
/// of two jobs (the parents and the new processes of a respawn or a move)
/// then never ends: the new ones wait for a member they do not know is dead.
/// The relay registers, ahead of Open MPI's own handler, for those three
/// events; one process of the dead process's job (the lowest rank of it not
/// known to be dead) notifies the same event again to every job, marked as
/// relayed so that nobody relays it twice, and Open MPI everywhere marks the
/// process failed. A relay that dies is taken over by the next rank, which
/// notifies every death it knows of again. Open MPI ignores a failure it
/// already knows. Uses the PMIx library Open MPI loaded (found by its
/// soname; nothing links against it). After `MPI_Init`; idempotent and
/// thread-safe.
FailureRelay install_failure_relay();

}  // namespace reprise::detail::pmix
