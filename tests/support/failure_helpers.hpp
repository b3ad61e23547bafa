#pragma once
// Helpers shared by the MPI tests that kill processes.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

namespace reprise::test {

/// Runs `operation`, which must raise `ProcessFailed` or `Revoked` because
/// members died, then revokes so that every member starts recovery. Where the
/// error names failed ranks, they must be among `victims`.
inline void expect_failure_reported(Comm& comm, const std::vector<OriginalRank>& victims,
                                    const std::function<void()>& operation) {
  try {
    operation();
    ADD_FAILURE() << "original rank " << comm.original_rank().value() << ": the failure was not reported";
  } catch (const ProcessFailed& error) {
    for (auto rank : error.failed()) {
      EXPECT_NE(std::find(victims.begin(), victims.end(), rank), victims.end())
          << "reported " << rank << " as failed: " << error.what();
    }
  } catch (const Revoked&) {
  }
  comm.revoke();
}

/// Kills `victims` right after a barrier; the others see the failure in that
/// barrier (a victim may leave it before the others do) or the next, and revoke.
/// A victim dies even if another victim died before it left the barrier.
inline void kill_and_detect(Comm& comm, const std::vector<OriginalRank>& victims) {
  if (std::find(victims.begin(), victims.end(), comm.original_rank()) != victims.end()) {
    try {
      comm.barrier();
    } catch (const CommFailure&) {
    }
    inject::kill_self(comm.original_rank());
  }
  expect_failure_reported(comm, victims, [&] {
    comm.barrier();
    comm.barrier();
  });
}

/// Checks that `comm` works for every member: the sum of the original ranks
/// over all members equals the sum of `comm.members()`.
inline void expect_working(Comm& comm) {
  long expected = 0;
  for (auto member : comm.members()) expected += member.value();
  EXPECT_EQ(comm.allreduce(static_cast<long>(comm.original_rank().value()), MPI_SUM), expected);
  EXPECT_EQ(comm.original_rank(comm.rank()), comm.original_rank());
}

/// Runs `run` (a `Driver::run` in which the process of original rank
/// `thrower` raises a `UsageError` of its own): it must raise on every
/// process, `thrower` its own error, the others that another process ended
/// with an error.
inline void expect_run_ended_by(Comm& comm, OriginalRank thrower, const std::function<void()>& run) {
  try {
    run();
    ADD_FAILURE() << "run() returned";
  } catch (const UsageError& error) {
    EXPECT_EQ(comm.original_rank(), thrower) << error.what();
  } catch (const Error& error) {
    EXPECT_NE(comm.original_rank(), thrower);
    EXPECT_STREQ(error.what(),
                 "reprise::Driver: another process ended with an error (it says which); every process stops");
  }
}

}  // namespace reprise::test
