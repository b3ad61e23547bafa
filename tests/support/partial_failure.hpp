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
    _role = _me == victim ? Role::die : _me == unlucky ? Role::report_failure : Role::go_on;
  }

  /// True while the next call is armed.
  [[nodiscard]] bool armed() const { return _role.load() != Role::unarmed; }

  /// Called by the override once the collective completed here with `rc`:
  /// waits until every process completed it, then plays this process's role
  /// and returns the result the caller gets. Disarms.
  int finish(int rc, MPI_Comm comm) {
    const Role role = _role.exchange(Role::unarmed);
    if (role == Role::unarmed) return rc;
    PMPI_Barrier(_hold);
    if (role == Role::die) inject::kill_self(_me);
    if (role == Role::report_failure) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
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
  enum class Role { unarmed, go_on, die, report_failure };
  std::atomic<Role> _role{Role::unarmed};
  MPI_Comm _hold = MPI_COMM_NULL;  // holds the processes until all completed the call
  OriginalRank _me{0};
};

}  // namespace reprise::test
