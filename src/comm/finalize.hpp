#pragma once
// Ending MPI without hanging.

namespace reprise::detail {

/// MPI_Finalize under a watchdog: if it has not returned after
/// REPRISE_FINALIZE_TIMEOUT seconds (default 5; 0 waits forever), the
/// process exits with `exit_status` (open-mpi/ompi#11404).
void finalize_mpi(int exit_status);

}  // namespace reprise::detail
