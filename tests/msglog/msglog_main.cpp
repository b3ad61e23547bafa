// GoogleTest main for the message log's MPI tests: MPI_Init, not
// reprise::Environment, so that the log's own calls are all the tests see
// (msglog_with_reprise runs under reprise::Environment).
// Every process records its outcome for scripts/reprise-run.

#include <gtest/gtest.h>
#include <mpi.h>

#include "test_outcome.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  const reprise::OriginalRank me = reprise::test::launch_rank();
  reprise::test::start_recording(me);
  const int result = RUN_ALL_TESTS();
  reprise::test::record_result(me, result);
  MPI_Finalize();
  return result;
}
