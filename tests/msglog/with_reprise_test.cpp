// The message log under a program on reprise's own objects, started by
// reprise::Environment (which asks for MPI_THREAD_MULTIPLE): the log grants
// it, a Heartbeat runs on its thread, and every Checkpoint commit marks the
// log without the program calling reprise_msglog_mark_checkpoint. The log
// holds the application's messages only: not the heartbeats, not the
// checkpoint copies, not reprise's agreements. And the events of a process
// killed for real stay with its buddy (in memory they share on one host).

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/inject.hpp"
#include "reprise/msglog.hpp"
#include "failure_helpers.hpp"

namespace {

constexpr int kIterations = 30;
constexpr int kCommitEvery = 10;

TEST(MessageLogWithReprise, ThreadMultipleIsGranted) {
  ASSERT_TRUE(reprise::msglog::active());
  int provided = -1;
  MPI_Query_thread(&provided);
  EXPECT_EQ(provided, MPI_THREAD_MULTIPLE);
}

TEST(MessageLogWithReprise, CommitsMarkTheLogWhichHoldsTheApplicationsMessagesOnly) {
  ASSERT_TRUE(reprise::msglog::active());
  reprise::Comm comm = reprise::Comm::world();
  reprise::Heartbeat heartbeat(comm, {.period_seconds = 0.01, .timeout_seconds = 5.0});
  reprise::Checkpoint checkpoint(comm);
  std::vector<double> state(1000, comm.rank().value());
  checkpoint.protect("state", state);
  const int size = comm.size();
  const int next = (comm.rank().value() + 1) % size;
  const int previous = (comm.rank().value() + size - 1) % size;
  const reprise_msglog_counters before = reprise::msglog::counters();
  for (int i = 1; i <= kIterations; ++i) {
    double sent = state[0] + i;
    double received = -1;
    MPI_Sendrecv(&sent, 1, MPI_DOUBLE, next, i, &received, 1, MPI_DOUBLE, previous, i, comm.raw(), MPI_STATUS_IGNORE);
    ASSERT_EQ(received, previous + i);
    state[static_cast<std::size_t>(i)] = received;
    if (i % kCommitEvery != 0) continue;
    ASSERT_GT(reprise::msglog::counters().log_bytes_now, 0U) << "the ring's messages are in the log";
    checkpoint.checkpoint();
    EXPECT_EQ(reprise::msglog::counters().log_bytes_now, 0U) << "the commit at iteration " << i << " marked the log";
  }
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_sent - before.messages_sent, static_cast<std::uint64_t>(kIterations));
  EXPECT_EQ(after.messages_received - before.messages_received, static_cast<std::uint64_t>(kIterations));
  EXPECT_EQ(after.messages_logged - before.messages_logged, static_cast<std::uint64_t>(kIterations));
}

// Process 1 matches kEvents receptions from MPI_ANY_SOURCE (one event
// each), sends a word to its buddy (the events reach the buddy before it
// leaves) and is killed; once every survivor has seen it fail, the buddy
// still holds all kEvents.
TEST(MessageLogWithReprise, TheEventsOfAKilledProcessStayWithItsBuddy) {
  constexpr int kEvents = 5;
  constexpr int kVictim = 1;
  reprise::Comm comm = reprise::Comm::world();
  ASSERT_GE(comm.size(), 3);
  const int me = comm.rank().value();
  const int buddy = kVictim + 1;  // on one host, the next rank
  if (me == kVictim) {
    ASSERT_EQ(reprise::msglog::buddy(), buddy);
    for (int i = 0; i < kEvents; ++i) {
      int value = -1;
      MPI_Recv(&value, 1, MPI_INT, MPI_ANY_SOURCE, 7, comm.raw(), MPI_STATUS_IGNORE);
    }
    const int done = kEvents;
    MPI_Send(&done, 1, MPI_INT, buddy, 8, comm.raw());
    reprise::inject::kill_self(comm.original_rank());
  }
  if (me == 0) {
    for (int i = 0; i < kEvents; ++i) MPI_Send(&i, 1, MPI_INT, kVictim, 7, comm.raw());
  }
  if (me == buddy) {
    int done = -1;
    MPI_Recv(&done, 1, MPI_INT, kVictim, 8, comm.raw(), MPI_STATUS_IGNORE);
    ASSERT_EQ(done, kEvents);
  }
  reprise::test::expect_failure_reported(comm, {reprise::OriginalRank{kVictim}}, [&] {
    comm.barrier();
    comm.barrier();
  });
  if (me == buddy) {
    EXPECT_EQ(reprise::msglog::held_determinants(kVictim), static_cast<std::size_t>(kEvents));
  }
}

}  // namespace
