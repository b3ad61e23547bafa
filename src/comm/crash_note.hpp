#pragma once
// A crash during a recovery, said in one line.

#include "reprise/rank.hpp"

namespace reprise::detail {

/// Open MPI 5.0 can crash (SIGSEGV, SIGBUS) when it learns of a failure
/// while it revokes or builds a communicator (docs/RELIABILITY.md). While a
/// `RecoveryScope` lives on any thread, such a crash prints one line saying
/// so, instead of Open MPI's stack dump, and the process dies of the signal:
/// the others recover from its loss as from any failure. Outside a scope the
/// handler found at `install_crash_note` (Open MPI's) handles the signal as
/// before.
void install_crash_note();

/// Marks the calling code as part of a recovery on process `me`.
class RecoveryScope {
 public:
  explicit RecoveryScope(OriginalRank me) noexcept;
  ~RecoveryScope();
  RecoveryScope(const RecoveryScope&) = delete;
  RecoveryScope& operator=(const RecoveryScope&) = delete;
};

}  // namespace reprise::detail
