#pragma once
// Death at the n-th MPI call of one kind: the chaos program defines the MPI
// functions reprise calls most (see mpi_kill.cpp); they count the calls and
// forward to the PMPI entry points. The library is linked statically into the
// program, so its own calls pass through them too.

#include "reprise/rank.hpp"
#include "scenario.hpp"

namespace reprise::chaos {

/// From now on, the `nth` call of `kind` in this process kills it (SIGKILL,
/// recorded as killed on purpose) before the call starts.
void arm_mpi_kill(MpiKind kind, int nth, OriginalRank me);

}  // namespace reprise::chaos
