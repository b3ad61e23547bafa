// A message that reaches a process after it freed the communicator it was
// sent on is kept by Open MPI 5.0.11 and handed to the next communicator
// given the same index (tools/upstream/late_message/): there it matches a
// receive meant for another message. reprise keeps (retires) a communicator
// that lost a member instead of freeing it, so its index is never reused.
// Without that, the receive below gets the late message's 111.

#include <gtest/gtest.h>
#include <mpi.h>
// After mpi.h, which it needs.
#include <mpi-ext.h>

#include <chrono>
#include <thread>

#include "reprise/comm.hpp"
#include "reprise/detail/ulfm.hpp"
#include "reprise/inject.hpp"

using namespace reprise;

namespace {

constexpr int kTag = 7;
constexpr int kLate = 111;
constexpr int kMeant = 222;

/// Waits until this process knows that a member of `comm` failed.
void wait_for_failure(MPI_Comm comm, MPI_Comm live) {
  for (;;) {
    MPI_Group failed = MPI_GROUP_NULL;
    MPIX_Comm_get_failed(comm, &failed);
    int count = 0;
    MPI_Group_size(failed, &count);
    MPI_Group_free(&failed);
    if (count > 0) return;
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, live, &flag, MPI_STATUS_IGNORE);  // lets MPI progress
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

TEST(LateMessage, NeverReachesACommunicatorMadeAfterTheOneItWasSentOn) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.size(), 3);
  const int rank = comm.rank().value();
  MPI_Comm lost = MPI_COMM_NULL;  // loses process 2
  MPI_Comm_dup(MPI_COMM_WORLD, &lost);
  MPI_Comm_set_errhandler(lost, MPI_ERRORS_RETURN);
  MPI_Comm live = MPI_COMM_NULL;  // processes 0 and 1
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &live);
  if (rank == 2) inject::kill_self(comm.original_rank());
  MPI_Comm_set_errhandler(live, MPI_ERRORS_RETURN);
  wait_for_failure(lost, live);
  // Process 0 lets go of `lost` as reprise's recovery does; process 1 still
  // sends on it (a process that has not learnt of the failure yet).
  if (rank == 0) detail::ulfm::release(lost);
  ASSERT_EQ(MPI_Barrier(live), MPI_SUCCESS);
  if (rank == 1) {
    ASSERT_EQ(MPI_Send(&kLate, 1, MPI_INT, 0, kTag, lost), MPI_SUCCESS);
    MPI_Comm_free(&lost);
  }
  // The late message arrived at process 0 before this barrier ended.
  ASSERT_EQ(MPI_Barrier(live), MPI_SUCCESS);
  MPI_Comm fresh = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(live, &fresh), MPI_SUCCESS);
  if (rank == 1) {
    ASSERT_EQ(MPI_Send(&kMeant, 1, MPI_INT, 0, kTag, fresh), MPI_SUCCESS);
  }
  if (rank == 0) {
    int received = 0;
    ASSERT_EQ(MPI_Recv(&received, 1, MPI_INT, 1, kTag, fresh, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(received, kMeant) << "the new communicator received a message sent on the one freed before it";
  }
  MPI_Comm_free(&fresh);
  MPI_Comm_free(&live);
}
