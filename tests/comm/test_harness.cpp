// The test harness itself: a process that hangs on purpose (stops responding
// without exiting) must not make the job hang; the launcher kills it once
// everybody else has finished and still judges the job by the others.

#include <gtest/gtest.h>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

using namespace reprise;

TEST(Harness, HungProcessIsCleanedUp) {
  auto comm = Comm::world();
  test::expect_working(comm);
  comm.barrier();
  if (comm.original_rank() == OriginalRank{comm.size() - 1}) inject::hang(comm.original_rank());
}
