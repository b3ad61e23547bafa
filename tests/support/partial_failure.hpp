#pragma once
// A failure that only some processes see in a collective the others
// completed, made deterministic for the tests: a test overrides one MPI
// collective (through PMPI), and while it is armed, every process completes
// the collective, then one process dies (SIGKILL) and one survivor reports
// that death as the collective's result, as ULFM may; the others return
// success.

#include <mpi.h>
#include <mpi-ext.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

namespace reprise::test {

/// One armed collective call on this process.
class PartialFailure {
 public:
  /// Arms the next call of the overridden collective on every process:
  /// `victim` dies after it, `unlucky` reports the death, others go on.
  void arm(const Comm& comm, OriginalRank victim, OriginalRank unlucky) {
    if (_hold == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &_hold);
    _me = comm.original_rank();
    _hold_on_own = false;
    _passes = 1;
    _role = _me == victim ? Role::kDie : _me == unlucky ? Role::kReportFailure : Role::kGoOn;
  }

  /// What a process does in the armed call.
  enum class Role { kUnarmed, kGoOn, kDie, kReportFailure };

  /// Arms this process alone, for processes that share no communicator
  /// before the call (those a migration or a respawn started, which join
  /// inside `Comm::world()`): the `pass`-th call of the overridden
  /// collective from now plays `role` (`me`: the original rank a death is
  /// recorded under), and the processes wait for each other on the
  /// collective's own communicator. Arm every member of that communicator.
  void arm_alone(Role role, OriginalRank me, unsigned pass = 1) {
    _me = me;
    _hold_on_own = true;
    _passes = pass;
    _role = role;
  }

  /// True while the next call is armed.
  [[nodiscard]] bool armed() const { return _role.load() != Role::kUnarmed; }

  /// Called by the override once the collective completed here with `rc`:
  /// waits until every process completed it, then plays this process's role
  /// and returns the result the caller gets. Disarms.
  int finish(int rc, MPI_Comm comm) {
    if (_role.load() == Role::kUnarmed || --_passes > 0) return rc;
    const Role role = _role.exchange(Role::kUnarmed);
    PMPI_Barrier(_hold_on_own ? comm : _hold);
    if (role == Role::kDie) inject::kill_self(_me);
    if (role == Role::kReportFailure) {
      // Reports the death once MPI here knows of it, as ULFM would; a spare
      // of the dead process's job was seen not to learn of it for longer
      // than 30 s while it probed (the runtime's event had not reached it),
      // so after kNewsWait it reports the death all the same.
      const auto deadline = std::chrono::steady_clock::now() + kNewsWait;
      for (;;) {
        MPI_Group failed = MPI_GROUP_NULL;
        int count = 0;
        MPIX_Comm_get_failed(comm, &failed);
        MPI_Group_size(failed, &count);
        if (failed != MPI_GROUP_EMPTY) MPI_Group_free(&failed);
        if (count > 0 || std::chrono::steady_clock::now() > deadline) break;
        int flag = 0;  // progresses MPI, which learns of failures as it does
        PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return MPIX_ERR_PROC_FAILED;
    }
    return rc;
  }

 private:
  static constexpr std::chrono::seconds kNewsWait{5};
  std::atomic<Role> _role{Role::kUnarmed};
  MPI_Comm _hold = MPI_COMM_NULL;  // holds the processes until all completed the call
  bool _hold_on_own = false;       // holds them on the call's own communicator instead
  unsigned _passes = 1;            // calls left until the armed one, counting it
  OriginalRank _me{0};
};

}  // namespace reprise::test
