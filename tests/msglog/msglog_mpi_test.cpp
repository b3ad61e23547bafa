// The message log with real processes (libreprise_msglog.so linked in
// front of MPI): which events each pattern logs, what the application sees
// of statuses, counts and truncation, the garbage collection over 1000
// checkpoints, the log's bound, and the refusal of uncovered calls.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "reprise/msglog.h"
#include "reprise/msglog.hpp"

namespace {

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

/// This process's place in a ring over `comm`.
struct Ring {
  int me = 0;
  int size = 1;
  int next = 0;
  int previous = 0;
};

Ring ring_of(MPI_Comm comm) {
  Ring ring;
  ring.me = rank_of(comm);
  ring.size = size_of(comm);
  ring.next = (ring.me + 1) % ring.size;
  ring.previous = (ring.me + ring.size - 1) % ring.size;
  return ring;
}

/// A duplicate of world whose errors come back as return codes.
class Returning {
 public:
  Returning() {
    MPI_Comm_dup(MPI_COMM_WORLD, &_comm);
    MPI_Comm_set_errhandler(_comm, MPI_ERRORS_RETURN);
  }
  ~Returning() { MPI_Comm_free(&_comm); }
  Returning(const Returning&) = delete;
  Returning& operator=(const Returning&) = delete;
  [[nodiscard]] MPI_Comm comm() const { return _comm; }

 private:
  MPI_Comm _comm = MPI_COMM_NULL;
};

int error_class(int code) {
  int cls = 0;
  MPI_Error_class(code, &cls);
  return cls;
}

/// Runs `call` with world's errors returned, and checks it failed with
/// `expected` and a line naming it (and saying `why`, if given).
void expect_refused(const char* name, const std::function<int()>& call, int expected = MPI_ERR_UNSUPPORTED_OPERATION,
                    const std::string& why = "") {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  testing::internal::CaptureStderr();
  const int code = call();
  const std::string said = testing::internal::GetCapturedStderr();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  EXPECT_EQ(error_class(code), expected) << name;
  EXPECT_NE(said.find(std::string("error: msglog: ") + name + ": " + why), std::string::npos) << said;
}

TEST(MsglogMpi, IsActiveAndInterposed) {
  ASSERT_TRUE(reprise::msglog::active());
  reprise_msglog_counters before{};
  ASSERT_EQ(reprise_msglog_get_counters(&before), 0);
  const int me = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  int value = me;
  int got = -1;
  MPI_Sendrecv(&value, 1, MPI_INT, (me + 1) % size, 0, &got, 1, MPI_INT, (me + size - 1) % size, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  EXPECT_EQ(got, (me + size - 1) % size);
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_sent, before.messages_sent + 1);
  EXPECT_EQ(after.messages_received, before.messages_received + 1);
  EXPECT_EQ(after.bytes_logged, before.bytes_logged + sizeof(int));
}

TEST(MsglogMpi, DeterministicPatternsLogNoEventAndSendNothingToTheBuddy) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  std::vector<double> out(1000, me);
  std::vector<double> in(1000);
  // Blocking, non-blocking, Sendrecv, persistent, a Wait, a collective, and a Waitany over one request.
  for (int round = 0; round < 3; ++round) {
    if (me % 2 == 0) {
      MPI_Send(out.data(), 10, MPI_DOUBLE, next, 1, MPI_COMM_WORLD);
      MPI_Recv(in.data(), 10, MPI_DOUBLE, previous, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(in.data(), 10, MPI_DOUBLE, previous, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(out.data(), 10, MPI_DOUBLE, next, 1, MPI_COMM_WORLD);
    }
    MPI_Request requests[2];
    MPI_Irecv(in.data(), 1000, MPI_DOUBLE, previous, 2, MPI_COMM_WORLD, &requests[0]);
    MPI_Isend(out.data(), 1000, MPI_DOUBLE, next, 2, MPI_COMM_WORLD, &requests[1]);
    MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    EXPECT_EQ(in[999], previous);
    MPI_Sendrecv(out.data(), 5, MPI_DOUBLE, next, 3, in.data(), 5, MPI_DOUBLE, previous, 3, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Request persistent[2];
    MPI_Recv_init(in.data(), 7, MPI_DOUBLE, previous, 4, MPI_COMM_WORLD, &persistent[0]);
    MPI_Send_init(out.data(), 7, MPI_DOUBLE, next, 4, MPI_COMM_WORLD, &persistent[1]);
    for (int start = 0; start < 2; ++start) {
      MPI_Startall(2, persistent);
      MPI_Waitall(2, persistent, MPI_STATUSES_IGNORE);
    }
    MPI_Request_free(&persistent[0]);
    MPI_Request_free(&persistent[1]);
    MPI_Request single = MPI_REQUEST_NULL;
    MPI_Irecv(in.data(), 1, MPI_DOUBLE, previous, 5, MPI_COMM_WORLD, &single);
    MPI_Send(out.data(), 1, MPI_DOUBLE, next, 5, MPI_COMM_WORLD);
    int index = -1;
    MPI_Waitany(1, &single, &index, MPI_STATUS_IGNORE);
    EXPECT_EQ(index, 0);
    double sum = 0;
    const double one = 1;
    MPI_Allreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(sum, size);
  }
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.events_matching, before.events_matching);
  EXPECT_EQ(after.events_delivery, before.events_delivery);
  EXPECT_EQ(after.determinant_batches, before.determinant_batches) << "no extra message";
  // Per round: 1 + 1 + 1 + 2 + 1 messages.
  EXPECT_EQ(after.messages_logged - before.messages_logged, 3U * 6U);
  EXPECT_EQ(after.messages_received - before.messages_received, 3U * 6U);
  EXPECT_EQ(after.bytes_logged - before.bytes_logged, 3U * (10U + 1000U + 5U + 14U + 1U) * sizeof(double));
  EXPECT_EQ(reprise::msglog::held_determinants(previous), 0U);
}

TEST(MsglogMpi, AnySourceLogsOneMatchingEventPerReception) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const int me = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  constexpr int kPerPeer = 4;
  if (me == 0) {
    std::vector<int> from(static_cast<std::size_t>(size), 0);
    for (int i = 0; i < kPerPeer * (size - 1); ++i) {
      int value = -1;
      MPI_Status status;
      MPI_Recv(&value, 1, MPI_INT, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &status);
      EXPECT_EQ(value, status.MPI_SOURCE * 100 + from[static_cast<std::size_t>(status.MPI_SOURCE)]++);
    }
  } else {
    for (int i = 0; i < kPerPeer; ++i) {
      const int value = me * 100 + i;
      MPI_Send(&value, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    }
  }
  const reprise_msglog_counters after = reprise::msglog::counters();
  const std::uint64_t expected = me == 0 ? static_cast<std::uint64_t>(kPerPeer * (size - 1)) : 0U;
  EXPECT_EQ(after.events_matching - before.events_matching, expected);
  EXPECT_EQ(after.events_delivery, before.events_delivery);
  // The barrier is a collective: process 0's events reach its buddy, rank 1, first.
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(reprise::msglog::counters().determinant_batches - before.determinant_batches, me == 0 ? 1U : 0U);
  if (me == 1) {
    EXPECT_EQ(reprise::msglog::held_determinants(0), static_cast<std::size_t>(kPerPeer * (size - 1)));
  }
  reprise::msglog::mark_checkpoint();
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    EXPECT_EQ(reprise::msglog::held_determinants(0), 0U) << "the checkpoint covers them";
  }
}

TEST(MsglogMpi, TestsThatFailAreMergedIntoTheirSuccess) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const int me = rank_of(MPI_COMM_WORLD);
  int value = 0;
  std::uint64_t expected = 0;
  if (me == 0) {
    // A first test fails for sure (rank 1 sends only when told to); the
    // message telling it is a send, so that run of one failure is flushed
    // as an event; the next run ends in the success: a second event.
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(&value, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, &request);
    int flag = 0;
    int index = -1;
    MPI_Testany(1, &request, &index, &flag, MPI_STATUS_IGNORE);
    ASSERT_EQ(flag, 0);
    const int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, 2, MPI_COMM_WORLD);
    while (flag == 0) MPI_Testany(1, &request, &index, &flag, MPI_STATUS_IGNORE);
    EXPECT_EQ(value, 42);
    // Waitany over two active requests: a choice, a third event.
    int values[2] = {0, 0};
    MPI_Request two[2];
    MPI_Irecv(&values[0], 1, MPI_INT, 1, 4, MPI_COMM_WORLD, &two[0]);
    MPI_Irecv(&values[1], 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &two[1]);
    MPI_Waitany(2, two, &index, MPI_STATUS_IGNORE);
    MPI_Wait(&two[1 - index], MPI_STATUS_IGNORE);
    EXPECT_EQ(values[0] + values[1], 9);
    expected = 3;
  } else if (me == 1) {
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    value = 42;
    MPI_Send(&value, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
    const int four = 4;
    const int five = 5;
    MPI_Send(&four, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
    MPI_Send(&five, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
  }
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.events_delivery - before.events_delivery, expected);
  EXPECT_EQ(after.events_matching, before.events_matching);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 1) {
    EXPECT_EQ(reprise::msglog::held_determinants(0), 3U) << "flushed at the send and at the barrier";
  }
}

TEST(MsglogMpi, IprobeFailuresAreOneEvent) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const int me = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  if (me == 0) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &flag, &status);
    ASSERT_EQ(flag, 0) << "nobody sent yet";
    MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD);  // a collective: the run of one failure is flushed
    while (flag == 0) MPI_Iprobe(MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &flag, &status);
    int count = 0;
    MPI_Get_count(&status, MPI_INT, &count);
    EXPECT_EQ(count, 3);
    int values[3];
    MPI_Recv(values, 3, MPI_INT, status.MPI_SOURCE, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(values[2], status.MPI_SOURCE);
  } else {
    int flag = 0;
    MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (me == size - 1) {
      const int values[3] = {me, me, me};
      MPI_Send(values, 3, MPI_INT, 0, 7, MPI_COMM_WORLD);
    }
  }
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.events_delivery - before.events_delivery, me == 0 ? 2U : 0U);
  EXPECT_EQ(after.events_matching, before.events_matching) << "the receive names its source";
}

TEST(MsglogMpi, StatusesCountsAndDatatypesAsWithoutTheLog) {
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  // Both receive paths: staged (small) and straight into the buffer (above
  // the default REPRISE_MSGLOG_STAGING_BYTES, 32 KiB).
  for (const int n : {6, 20000}) {
    std::vector<int> out(static_cast<std::size_t>(n));
    std::iota(out.begin(), out.end(), me * 100000);
    // 1. Fewer elements than the buffer holds: count, elements, source, tag.
    std::vector<int> in(static_cast<std::size_t>(2 * n), -1);
    MPI_Status status;
    MPI_Sendrecv(out.data(), n, MPI_INT, next, 11, in.data(), 2 * n, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                 MPI_COMM_WORLD, &status);
    int count = 0;
    MPI_Get_count(&status, MPI_INT, &count);
    EXPECT_EQ(count, n);
    MPI_Get_elements(&status, MPI_INT, &count);
    EXPECT_EQ(count, n);
    EXPECT_EQ(status.MPI_SOURCE, previous);
    EXPECT_EQ(status.MPI_TAG, 11);
    EXPECT_EQ(in[static_cast<std::size_t>(n - 1)], previous * 100000 + n - 1);
    EXPECT_EQ(in[static_cast<std::size_t>(n)], -1);
    // 2. A strided type on the receive side: every other int, gaps untouched.
    MPI_Datatype strided = MPI_DATATYPE_NULL;
    MPI_Type_vector(n, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    std::fill(in.begin(), in.end(), -1);
    MPI_Sendrecv(out.data(), n, MPI_INT, next, 12, in.data(), 1, strided, previous, 12, MPI_COMM_WORLD, &status);
    MPI_Get_count(&status, strided, &count);
    EXPECT_EQ(count, 1);
    EXPECT_EQ(in[2], previous * 100000 + 1);
    EXPECT_EQ(in[1], -1);
    EXPECT_EQ(in[static_cast<std::size_t>(2 * n - 2)], previous * 100000 + n - 1);
    MPI_Type_free(&strided);
    // 3. A partial element: 2n+1 ints into pairs; Get_count says undefined,
    //    Get_elements the ints, and the pair's second int is left alone.
    std::vector<int> odd(static_cast<std::size_t>(2 * n + 1), me);
    MPI_Datatype pair = MPI_DATATYPE_NULL;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    std::fill(in.begin(), in.end(), -1);
    in.resize(static_cast<std::size_t>(2 * n + 2), -1);
    MPI_Sendrecv(odd.data(), 2 * n + 1, MPI_INT, next, 13, in.data(), n + 1, pair, previous, 13, MPI_COMM_WORLD,
                 &status);
    MPI_Get_count(&status, pair, &count);
    EXPECT_EQ(count, MPI_UNDEFINED);
    MPI_Get_elements(&status, pair, &count);
    EXPECT_EQ(count, 2 * n + 1);
    EXPECT_EQ(in[static_cast<std::size_t>(2 * n)], previous);
    EXPECT_EQ(in[static_cast<std::size_t>(2 * n + 1)], -1);
    MPI_Type_free(&pair);
    // 4. A probe counts the payload only.
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Isend(out.data(), n, MPI_INT, next, 14, MPI_COMM_WORLD, &request);
    MPI_Probe(previous, 14, MPI_COMM_WORLD, &status);
    MPI_Get_count(&status, MPI_INT, &count);
    EXPECT_EQ(count, n);
    MPI_Recv(in.data(), n, MPI_INT, previous, 14, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

TEST(MsglogMpi, TruncationAsWithoutTheLog) {
  const Returning returning;
  const MPI_Comm comm = returning.comm();
  const int me = rank_of(comm);
  const int size = size_of(comm);
  // Eager and staged; longer than the eager size and staged (Open MPI
  // 5.0.11 writes such a message whole past a contiguous buffer); straight.
  for (const int n : {10, 4000, 40000}) {
    std::vector<int> out(static_cast<std::size_t>(n));
    std::iota(out.begin(), out.end(), 0);
    std::vector<int> in(static_cast<std::size_t>(n), -1);
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Isend(out.data(), n, MPI_INT, (me + 1) % size, 0, comm, &request);
    MPI_Status status;
    const int code = MPI_Recv(in.data(), n / 2, MPI_INT, (me + size - 1) % size, 0, comm, &status);
    EXPECT_EQ(error_class(code), MPI_ERR_TRUNCATE);
    EXPECT_EQ(in[static_cast<std::size_t>(n / 2 - 1)], n / 2 - 1);
    EXPECT_EQ(in[static_cast<std::size_t>(n / 2)], -1);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
}

TEST(MsglogMpi, ABadRankIsMpisError) {
  const Returning returning;
  const std::uint64_t logged = reprise::msglog::counters().messages_logged;
  const int value = 1;
  EXPECT_EQ(error_class(MPI_Send(&value, 1, MPI_INT, 99, 0, returning.comm())), MPI_ERR_RANK);
  MPI_Request request = MPI_REQUEST_NULL;
  EXPECT_EQ(error_class(MPI_Isend(&value, 1, MPI_INT, -5, 0, returning.comm(), &request)), MPI_ERR_RANK);
  EXPECT_EQ(reprise::msglog::counters().messages_logged, logged);
}

TEST(MsglogMpi, MatchedProbeAndReceive) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const int me = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  const int value = me + 1000;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(&value, 1, MPI_INT, (me + 1) % size, 21, MPI_COMM_WORLD, &request);
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  MPI_Mprobe(MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &message, &status);
  int count = 0;
  MPI_Get_count(&status, MPI_INT, &count);
  EXPECT_EQ(count, 1);
  int got = -1;
  MPI_Mrecv(&got, 1, MPI_INT, &message, &status);
  EXPECT_EQ(got, (me + size - 1) % size + 1000);
  EXPECT_EQ(status.MPI_SOURCE, (me + size - 1) % size);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.events_delivery - before.events_delivery, 1U) << "the probe's match";
  EXPECT_EQ(after.events_matching, before.events_matching) << "the receive took the probed message";
  // The non-blocking pair, on a message of the straight path's size: every
  // Improbe is a choice (the failures merge with the success: one event).
  std::vector<double> big(20000, me);
  MPI_Isend(big.data(), 20000, MPI_DOUBLE, (me + 1) % size, 22, MPI_COMM_WORLD, &request);
  int flag = 0;
  while (flag == 0) MPI_Improbe(MPI_ANY_SOURCE, 22, MPI_COMM_WORLD, &flag, &message, &status);
  MPI_Get_count(&status, MPI_DOUBLE, &count);
  EXPECT_EQ(count, 20000);
  std::vector<double> in(20000, -1);
  MPI_Request received = MPI_REQUEST_NULL;
  MPI_Imrecv(in.data(), 20000, MPI_DOUBLE, &message, &received);
  MPI_Wait(&received, &status);
  MPI_Get_count(&status, MPI_DOUBLE, &count);
  EXPECT_EQ(count, 20000);
  EXPECT_EQ(in[19999], (me + size - 1) % size);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  const reprise_msglog_counters last = reprise::msglog::counters();
  EXPECT_EQ(last.events_delivery - after.events_delivery, 1U);
  EXPECT_EQ(last.events_matching, after.events_matching);
}

TEST(MsglogMpi, ADerivedTypeKeepsItsTypeMapOrder) {
  // Two ints in memory order b, a, but type-map order a (at 4), b (at 0):
  // MPI packs a first. Without MPI's packing the receiver would get b, a.
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  const int lengths[2] = {1, 1};
  const MPI_Aint displacements[2] = {4, 0};
  const MPI_Datatype types[2] = {MPI_INT, MPI_INT};
  MPI_Datatype reversed = MPI_DATATYPE_NULL;
  MPI_Type_create_struct(2, lengths, displacements, types, &reversed);
  MPI_Type_commit(&reversed);
  const int memory[2] = {me * 10 + 2, me * 10 + 1};  // b, then a
  int got[2] = {-1, -1};
  MPI_Sendrecv(memory, 1, reversed, next, 5, got, 2, MPI_INT, previous, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  EXPECT_EQ(got[0], previous * 10 + 1);
  EXPECT_EQ(got[1], previous * 10 + 2);
  MPI_Type_free(&reversed);
}

TEST(MsglogMpi, ChildCommunicatorsHaveTheSameKeyInEveryMember) {
  const int me = rank_of(MPI_COMM_WORLD);
  std::vector<std::uint64_t> older;
  for (const auto& channel : reprise::msglog::channel_states()) older.push_back(channel.communicator);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
  const int rank = rank_of(half);
  const int size = size_of(half);
  if (size > 1) {
    int value = rank;
    MPI_Sendrecv_replace(&value, 1, MPI_INT, (rank + 1) % size, 0, (rank + size - 1) % size, 0, half,
                         MPI_STATUS_IGNORE);
    EXPECT_EQ(value, (rank + size - 1) % size);
  }
  std::uint64_t key = 0;
  for (const auto& channel : reprise::msglog::channel_states()) {
    if (std::find(older.begin(), older.end(), channel.communicator) == older.end()) key = channel.communicator;
  }
  std::uint64_t lowest = 0;
  std::uint64_t highest = 0;
  MPI_Allreduce(&key, &lowest, 1, MPI_UINT64_T, MPI_MIN, half);
  MPI_Allreduce(&key, &highest, 1, MPI_UINT64_T, MPI_MAX, half);
  if (size > 1) {
    EXPECT_NE(key, 0U);
    EXPECT_EQ(lowest, highest);
  }
  MPI_Comm_free(&half);
}

TEST(MsglogMpi, EverySendModeAndCompletionCall) {
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  std::vector<int> got(8, -1);
  std::vector<MPI_Request> receives(8, MPI_REQUEST_NULL);
  for (int tag = 0; tag < 8; ++tag) {
    MPI_Irecv(&got[static_cast<std::size_t>(tag)], 1, MPI_INT, previous, tag, MPI_COMM_WORLD,
              &receives[static_cast<std::size_t>(tag)]);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every receive is posted: ready sends are allowed
  std::vector<char> attached(1024 + MPI_BSEND_OVERHEAD);
  MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size()));
  const std::vector<int> values{100, 101, 102, 103, 104, 105, 106, 107};
  MPI_Ssend(&values[0], 1, MPI_INT, next, 0, MPI_COMM_WORLD);
  MPI_Bsend(&values[1], 1, MPI_INT, next, 1, MPI_COMM_WORLD);
  MPI_Rsend(&values[2], 1, MPI_INT, next, 2, MPI_COMM_WORLD);
  MPI_Request sends[3];
  MPI_Issend(&values[3], 1, MPI_INT, next, 3, MPI_COMM_WORLD, &sends[0]);
  MPI_Irsend(&values[4], 1, MPI_INT, next, 4, MPI_COMM_WORLD, &sends[1]);
  MPI_Isend(&values[5], 1, MPI_INT, next, 5, MPI_COMM_WORLD, &sends[2]);
  MPI_Request persistent = MPI_REQUEST_NULL;
  MPI_Ssend_init(&values[6], 1, MPI_INT, next, 6, MPI_COMM_WORLD, &persistent);
  MPI_Start(&persistent);
  MPI_Request freed = MPI_REQUEST_NULL;
  MPI_Isend(&values[7], 1, MPI_INT, next, 7, MPI_COMM_WORLD, &freed);
  MPI_Request_free(&freed);
  EXPECT_EQ(freed, MPI_REQUEST_NULL);
  // Completion by Waitsome and Testsome until every receive is in.
  int done = 0;
  std::vector<int> indices(8);
  std::vector<MPI_Status> statuses(8);
  while (done < 8) {
    int outcount = 0;
    if (done % 2 == 0) {
      MPI_Waitsome(8, receives.data(), &outcount, indices.data(), statuses.data());
    } else {
      MPI_Testsome(8, receives.data(), &outcount, indices.data(), statuses.data());
    }
    for (int k = 0; k < outcount; ++k) {
      EXPECT_EQ(statuses[static_cast<std::size_t>(k)].MPI_TAG, indices[static_cast<std::size_t>(k)]);
      int count = 0;
      MPI_Get_count(&statuses[static_cast<std::size_t>(k)], MPI_INT, &count);
      EXPECT_EQ(count, 1);
    }
    done += outcount;
  }
  for (int tag = 0; tag < 8; ++tag) EXPECT_EQ(got[static_cast<std::size_t>(tag)], 100 + tag);
  int flag = 0;
  while (flag == 0) MPI_Testall(3, sends, &flag, MPI_STATUSES_IGNORE);
  MPI_Status sent;
  MPI_Wait(&persistent, &sent);
  int count = 0;
  MPI_Get_count(&sent, MPI_INT, &count);
  EXPECT_EQ(count, 1) << "a send's status counts the payload";
  MPI_Request_free(&persistent);
  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  EXPECT_EQ(detached, attached.data());
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_logged - before.messages_logged, 8U);
  EXPECT_EQ(after.messages_received - before.messages_received, 8U);
  EXPECT_EQ(after.events_matching, before.events_matching);
  EXPECT_GE(after.events_delivery - before.events_delivery, 1U) << "Waitsome over 8, Testsome, Testall";
  MPI_Barrier(MPI_COMM_WORLD);
}

/// `count` ints, different for every `seed`.
std::vector<int> numbered(int seed, std::size_t count) {
  std::vector<int> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = seed * 1000003 + static_cast<int>(i * 7919 % 1000000);
  return values;
}

// The log's copy of every message is the bytes sent, whichever way it was
// made: copied first and sent from the log (small messages, buffered
// sends, Sendrecv), or sent from the application's buffer and copied while
// MPI moves it (contiguous payloads from 64 KiB, in slices of 64 KiB).
TEST(MsglogMpi, TheLogHoldsEveryByteSent) {
  reprise::msglog::mark_checkpoint();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  // Below, at, between and above the slices of the copy made while sending.
  const std::vector<std::size_t> counts{1, 1000, 16384, 16385, 50000, 300001};
  std::vector<std::vector<int>> sent;
  std::vector<std::vector<int>> got;
  std::vector<MPI_Request> receives;
  int tag = 0;
  const auto expect = [&](std::size_t count) {
    got.emplace_back(count, -1);
    receives.emplace_back();
    MPI_Irecv(got.back().data(), static_cast<int>(count), MPI_INT, previous, tag++, MPI_COMM_WORLD, &receives.back());
  };
  // Tags in order of sending: Send, Ssend, Rsend, Isend, Issend, Irsend, Send_init; one message of each count.
  constexpr int kWays = 7;
  for (int way = 0; way < kWays; ++way) {
    for (const std::size_t count : counts) expect(count);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every receive is posted: ready sends are allowed
  std::vector<MPI_Request> sends;
  tag = 0;
  for (int way = 0; way < kWays; ++way) {
    for (const std::size_t count : counts) {
      sent.push_back(numbered(me * 100 + tag, count));
      const int n = static_cast<int>(count);
      std::vector<int>& out = sent.back();
      switch (way) {
        case 0:
          MPI_Send(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD);
          break;
        case 1:
          MPI_Ssend(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD);
          break;
        case 2:
          MPI_Rsend(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD);
          break;
        case 3:
          MPI_Isend(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD, &sends.emplace_back());
          break;
        case 4:
          MPI_Issend(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD, &sends.emplace_back());
          break;
        case 5:
          MPI_Irsend(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD, &sends.emplace_back());
          break;
        default: {
          MPI_Request persistent = MPI_REQUEST_NULL;
          MPI_Send_init(out.data(), n, MPI_INT, next, tag, MPI_COMM_WORLD, &persistent);
          MPI_Start(&persistent);
          MPI_Wait(&persistent, MPI_STATUS_IGNORE);
          MPI_Request_free(&persistent);
        }
      }
      ++tag;
    }
  }
  MPI_Waitall(static_cast<int>(receives.size()), receives.data(), MPI_STATUSES_IGNORE);
  MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  // Then a buffered send and a Sendrecv_replace of the largest count (tags after the others).
  std::vector<char> attached(counts.back() * sizeof(int) + MPI_BSEND_OVERHEAD);
  MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size()));
  sent.push_back(numbered(me * 100 + tag, counts.back()));
  expect(counts.back());
  MPI_Bsend(sent.back().data(), static_cast<int>(counts.back()), MPI_INT, next, tag - 1, MPI_COMM_WORLD);
  MPI_Wait(&receives.back(), MPI_STATUS_IGNORE);
  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  std::vector<int> both = numbered(me * 100 + tag, counts.back());
  sent.push_back(both);
  MPI_Sendrecv_replace(both.data(), static_cast<int>(both.size()), MPI_INT, next, tag, previous, tag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE);
  got.push_back(both);
  // Every message arrived whole, and the log holds each byte sent, in order.
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t m = 0; m < got.size(); ++m) {
    EXPECT_EQ(got[m], numbered(previous * 100 + static_cast<int>(m), got[m].size())) << "message " << m;
  }
  const std::vector<reprise::msglog::LoggedMessage> logged = reprise::msglog::logged_messages(1, next);
  ASSERT_EQ(logged.size(), sent.size());
  for (std::size_t m = 0; m < logged.size(); ++m) {
    EXPECT_EQ(logged[m].tag, static_cast<int>(m)) << "message " << m;
    ASSERT_EQ(logged[m].payload.size(), sent[m].size() * sizeof(int)) << "message " << m;
    EXPECT_EQ(std::memcmp(logged[m].payload.data(), sent[m].data(), logged[m].payload.size()), 0)
        << "the log's copy of message " << m << " (" << sent[m].size() << " ints) differs from what was sent";
  }
  reprise::msglog::mark_checkpoint();
  EXPECT_TRUE(reprise::msglog::logged_messages(1, next).empty()) << "the checkpoint frees what was consumed";
}

// The determinants are held on another host when the job spans several
// (run on one host and on the nodes of scripts/cluster): each process's
// buddy, and the events it holds for those whose buddy it is.
TEST(MsglogMpi, TheBuddyIsOnAnotherHostWhenThereIsOne) {
  reprise::msglog::mark_checkpoint();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  std::vector<char> name(MPI_MAX_PROCESSOR_NAME, '\0');
  int length = 0;
  MPI_Get_processor_name(name.data(), &length);
  std::vector<char> names(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r)
    hosts.emplace_back(names.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  std::vector<std::string> distinct = hosts;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (const char* expected = std::getenv("REPRISE_TEST_HOSTS"); expected != nullptr) {
    ASSERT_EQ(distinct.size(), static_cast<std::size_t>(std::atoi(expected))) << "the hosts the job spans";
  }
  const int buddy = reprise::msglog::buddy();
  std::vector<int> buddies(static_cast<std::size_t>(size));
  MPI_Allgather(&buddy, 1, MPI_INT, buddies.data(), 1, MPI_INT, MPI_COMM_WORLD);
  if (distinct.size() == 1) {
    EXPECT_EQ(buddy, next) << "one host: the next rank";
  } else {
    EXPECT_NE(hosts[static_cast<std::size_t>(buddy)], hosts[static_cast<std::size_t>(me)])
        << "rank " << me << " on " << hosts[static_cast<std::size_t>(me)] << " has its buddy " << buddy
        << " on the same host, though the job spans " << distinct.size();
  }
  // One reception from MPI_ANY_SOURCE each: one event, at the buddy after the barrier.
  int out = me;
  int in = -1;
  MPI_Request sent = MPI_REQUEST_NULL;
  MPI_Isend(&out, 1, MPI_INT, next, 77, MPI_COMM_WORLD, &sent);
  MPI_Recv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Wait(&sent, MPI_STATUS_IGNORE);
  EXPECT_EQ(in, previous);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int r = 0; r < size; ++r) {
    if (buddies[static_cast<std::size_t>(r)] == me) {
      EXPECT_EQ(reprise::msglog::held_determinants(r), 1U) << "the event of rank " << r << ", whose buddy this is";
    }
  }
  reprise::msglog::mark_checkpoint();
}

TEST(MsglogMpi, FreeingAnActiveReceiveIsRefused) {
  const int me = rank_of(MPI_COMM_WORLD);
  int value = -1;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(&value, 1, MPI_INT, me, 31, MPI_COMM_WORLD, &request);
  expect_refused(
      "MPI_Request_free", [&] { return MPI_Request_free(&request); }, MPI_ERR_ARG, "an active receive");
  MPI_Send(&me, 1, MPI_INT, me, 31, MPI_COMM_WORLD);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  EXPECT_EQ(value, me);
}

TEST(MsglogMpi, TheBoundDiscardsByDefaultAndSaysSoOnce) {
  if (std::getenv("REPRISE_MSGLOG_MAX_BYTES") == nullptr) GTEST_SKIP() << "run by msglog_mpi_discard";
  // REPRISE_MSGLOG_MAX_BYTES=10000, REPRISE_MSGLOG_WHEN_FULL unset.
  const int me = rank_of(MPI_COMM_WORLD);
  const int size = size_of(MPI_COMM_WORLD);
  std::vector<char> out(4000, 'd');
  std::vector<char> in(4000);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 10; ++i) {
    MPI_Sendrecv(out.data(), 4000, MPI_CHAR, (me + 1) % size, 0, in.data(), 4000, MPI_CHAR, (me + size - 1) % size, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(in[3999], 'd');
    EXPECT_LE(reprise::msglog::counters().log_bytes_now, 10000U);
  }
  const std::string said = testing::internal::GetCapturedStderr();
  const std::string line = "warning: msglog: the log reached REPRISE_MSGLOG_MAX_BYTES=10000 without a checkpoint";
  EXPECT_NE(said.find(line), std::string::npos) << said;
  EXPECT_EQ(said.find(line), said.rfind(line)) << "said once: " << said;
  const reprise_msglog_counters counters = reprise::msglog::counters();
  EXPECT_EQ(counters.messages_logged, 10U);
  EXPECT_EQ(counters.log_bytes_discarded, 8U * 4012U) << "two entries fit";
}

TEST(MsglogMpi, ACollectiveCarriesThePendingEventsFirst) {
  reprise::msglog::mark_checkpoint();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  // A periodic ring as a Cartesian communicator (logged): a neighbourhood
  // collective sends to both neighbours, rank 1 (rank 0's buddy) among them.
  const int dims[1] = {size};
  const int periods[1] = {1};
  MPI_Comm ring = MPI_COMM_NULL;
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
  if (me == 0) {
    int flag = 1;
    MPI_Iprobe(MPI_ANY_SOURCE, 77, ring, &flag, MPI_STATUS_IGNORE);
    ASSERT_EQ(flag, 0) << "nobody sends with tag 77";
  }
  const int mine = me;
  std::vector<int> theirs(2, -1);
  MPI_Neighbor_allgather(&mine, 1, MPI_INT, theirs.data(), 1, MPI_INT, ring);
  EXPECT_EQ(theirs[0], previous);
  EXPECT_EQ(theirs[1], next);
  // Rank 1 got rank 0's contribution, so rank 0's open run reached it before.
  if (me == 1) {
    EXPECT_EQ(reprise::msglog::held_determinants(0), 1U);
  }
  MPI_Comm_free(&ring);
  MPI_Barrier(MPI_COMM_WORLD);
}

// A persistent collective (MPI-4) is a collective too: its start carries
// the pending events to the buddy first.
TEST(MsglogMpi, APersistentCollectiveCarriesThePendingEventsFirst) {
  reprise::msglog::mark_checkpoint();
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  if (me == 0) {
    int flag = 1;
    MPI_Iprobe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    ASSERT_EQ(flag, 0) << "nobody sends with tag 77";
  }
  const int mine = me + 1;
  int sum = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Allreduce_init(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &request), MPI_SUCCESS);
  ASSERT_EQ(MPI_Start(&request), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(sum, size * (size + 1) / 2);
  // Rank 1 has rank 0's contribution, so rank 0's open run reached it before.
  if (me == 1) {
    EXPECT_EQ(reprise::msglog::held_determinants(0), 1U);
  }
  MPI_Request_free(&request);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MsglogMpi, TheBuddyAcknowledgesWhileBlockedInMpi) {
  reprise::msglog::mark_checkpoint();
  const int me = rank_of(MPI_COMM_WORLD);
  if (me == 0) {
    // A reception from any source (from itself): one event, pending.
    const int mine = 5;
    int got = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Isend(&mine, 1, MPI_INT, 0, 88, MPI_COMM_WORLD, &request);
    MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 88, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    EXPECT_EQ(got, 5);
    // Rank 1, the buddy, is blocked in MPI_Recv from here: its thread must
    // acknowledge the event before this send may leave.
    MPI_Send(&got, 1, MPI_INT, 1, 89, MPI_COMM_WORLD);
  } else if (me == 1) {
    int got = -1;
    MPI_Recv(&got, 1, MPI_INT, 0, 89, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(got, 5);
    EXPECT_EQ(reprise::msglog::held_determinants(0), 1U);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MsglogMpi, ThousandCheckpointsKeepTheLogBounded) {
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  MPI_Comm ring = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &ring);
  reprise::msglog::mark_checkpoint();
  std::vector<char> out(3000, 'x');
  std::vector<char> in(3000);
  std::uint64_t most_held = 0;
  constexpr int kCheckpoints = 1000;
  for (int i = 0; i < kCheckpoints; ++i) {
    // Two messages a round, one received from any source (an event).
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(in.data(), 3000, MPI_CHAR, MPI_ANY_SOURCE, 0, ring, &request);
    MPI_Send(out.data(), 3000, MPI_CHAR, next, 0, ring);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    MPI_Sendrecv(out.data(), 100, MPI_CHAR, next, 1, in.data(), 100, MPI_CHAR, previous, 1, ring, MPI_STATUS_IGNORE);
    most_held = std::max<std::uint64_t>(most_held, reprise::msglog::counters().log_bytes_now);
    reprise::msglog::mark_checkpoint();
    ASSERT_EQ(reprise::msglog::counters().log_bytes_now, 0U) << "checkpoint " << i;
    ASSERT_LE(reprise::msglog::held_determinants(previous), 1U) << "checkpoint " << i;
  }
  EXPECT_LE(most_held, 3100U + 2U * 12U);
  EXPECT_GE(reprise::msglog::counters().log_bytes_peak, 3100U);
  // The channels' numbers went on: 2 per round to `next`, from `previous`.
  bool seen_next = false;
  bool seen_previous = false;
  for (const auto& channel : reprise::msglog::channel_states()) {
    if (channel.communicator == 1 || channel.logged_messages != 0) continue;
    if (channel.peer == next && channel.next_to_send == 2U * kCheckpoints) seen_next = true;
    if (channel.peer == previous && channel.consumed == 2U * kCheckpoints && channel.consumed_out_of_order.empty()) {
      seen_previous = true;
    }
  }
  EXPECT_TRUE(seen_next);
  EXPECT_TRUE(seen_previous);
  MPI_Comm_free(&ring);
}

TEST(MsglogMpi, FreedCommunicatorsAreForgottenAtCheckpoints) {
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  reprise::msglog::mark_checkpoint();
  const std::size_t channels = reprise::msglog::channel_states().size();
  for (int i = 0; i < 200; ++i) {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &copy);
    int value = i;
    MPI_Sendrecv_replace(&value, 1, MPI_INT, next, 0, previous, 0, copy, MPI_STATUS_IGNORE);
    EXPECT_EQ(value, i);
    EXPECT_GT(reprise::msglog::channel_states().size(), channels) << "the copy's channel is there";
    MPI_Comm_free(&copy);
    reprise::msglog::mark_checkpoint();
    ASSERT_EQ(reprise::msglog::channel_states().size(), channels) << "round " << i;
  }
}

TEST(MsglogMpi, TheBoundFailsTheSendAfterTheHookWhenAskedTo) {
  if (std::getenv("REPRISE_MSGLOG_WHEN_FULL") == nullptr) GTEST_SKIP() << "run by msglog_mpi_error";
  // REPRISE_MSGLOG_WHEN_FULL=error.
  const Returning returning;
  const MPI_Comm comm = returning.comm();
  reprise::msglog::mark_checkpoint();
  std::size_t hook_needed = 0;
  std::size_t hook_bound = 0;
  reprise::msglog::set_max_bytes(1000);
  reprise::msglog::on_log_full([&](std::size_t needed, std::size_t bound) {
    hook_needed = needed;
    hook_bound = bound;
  });
  std::vector<char> big(2000, 'b');
  testing::internal::CaptureStderr();
  const int code = MPI_Send(big.data(), 2000, MPI_CHAR, 0, 0, comm);
  const std::string said = testing::internal::GetCapturedStderr();
  reprise::msglog::on_log_full({});
  reprise::msglog::set_max_bytes(std::size_t{1} << 30U);
  EXPECT_EQ(error_class(code), MPI_ERR_NO_MEM);
  EXPECT_NE(said.find("error: msglog: MPI_Send: "), std::string::npos) << said;
  EXPECT_NE(said.find("REPRISE_MSGLOG_MAX_BYTES=1000"), std::string::npos) << said;
  EXPECT_EQ(hook_needed, 2012U);
  EXPECT_EQ(hook_bound, 1000U);
  EXPECT_EQ(reprise::msglog::counters().log_bytes_now, 0U) << "nothing was logged or sent";
}

/// Cancels `request` and waits for it: whether both succeeded and its status says cancelled.
bool cancelled_and_completed(MPI_Request& request) {
  MPI_Status status{};
  if (MPI_Cancel(&request) != MPI_SUCCESS || MPI_Wait(&request, &status) != MPI_SUCCESS) return false;
  int cancelled = 0;
  MPI_Test_cancelled(&status, &cancelled);
  return cancelled != 0;
}

// Cancelling what the log does not track, and buffered sends to no one, are
// MPI's business: they behave as without the library.
TEST(MsglogMpi, WhatTheLogDoesNotTrackIsCancelledOrSentAsByMpi) {
  int value = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Irecv(&value, 1, MPI_INT, 0, 7, MPI_COMM_SELF, &request), MPI_SUCCESS);
  EXPECT_TRUE(cancelled_and_completed(request));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Request none = MPI_REQUEST_NULL;
  EXPECT_EQ(error_class(MPI_Cancel(&none)), MPI_ERR_REQUEST);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Request buffered = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ibsend(&value, 1, MPI_INT, MPI_PROC_NULL, 7, MPI_COMM_WORLD, &buffered), MPI_SUCCESS);
  EXPECT_EQ(MPI_Wait(&buffered, MPI_STATUS_IGNORE), MPI_SUCCESS);
  MPI_Request persistent = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Bsend_init(&value, 1, MPI_INT, MPI_PROC_NULL, 7, MPI_COMM_WORLD, &persistent), MPI_SUCCESS);
  EXPECT_EQ(MPI_Request_free(&persistent), MPI_SUCCESS);
}

TEST(MsglogMpi, UncoveredCallsAreRefusedByName) {
  int memory[4] = {};
  MPI_Win window = MPI_WIN_NULL;
  expect_refused("MPI_Win_create",
                 [&] { return MPI_Win_create(memory, sizeof memory, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &window); });
  EXPECT_EQ(window, MPI_WIN_NULL);
}

// A process started with MPI_Comm_spawn over a logged communicator is
// outside the log, and so is the intercommunicator to it: the numbers go to
// the new process and back as without the log, and none is logged.
TEST(MsglogMpi, AProcessSpawnedOverALoggedCommunicatorTalksToItUnlogged) {
  const int me = rank_of(MPI_COMM_WORLD);
  const reprise_msglog_counters before = reprise::msglog::counters();
  MPI_Comm helper = MPI_COMM_NULL;
  char command[] = REPRISE_SPAWNED_HELPER;
  int code = MPI_SUCCESS;
  ASSERT_EQ(MPI_Comm_spawn(command, MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &helper, &code), MPI_SUCCESS);
  EXPECT_EQ(code, MPI_SUCCESS);
  long long value = 1000 + me;
  ASSERT_EQ(MPI_Send(&value, 1, MPI_LONG_LONG, 0, 0, helper), MPI_SUCCESS);
  ASSERT_EQ(MPI_Recv(&value, 1, MPI_LONG_LONG, 0, 1, helper, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(value, 2 * (1000 + me));
  EXPECT_EQ(MPI_Comm_disconnect(&helper), MPI_SUCCESS);
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_sent, before.messages_sent);
  EXPECT_EQ(after.messages_logged, before.messages_logged);
}

// Partitioned communication on a logged communicator is MPI's own: a ring
// of four partitions, marked ready last to first, the receiver polling
// MPI_Parrived for each, started twice with new numbers; every number
// arrives, and none is logged.
TEST(MsglogMpi, PartitionedMessagesPassUnlogged) {
  constexpr int kPartitions = 4;
  constexpr int kTag = 31;
  const Ring ring = ring_of(MPI_COMM_WORLD);
  const reprise_msglog_counters before = reprise::msglog::counters();
  std::array<int, kPartitions> sent{};
  std::array<int, kPartitions> got{};
  std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  ASSERT_EQ(MPI_Precv_init(got.data(), kPartitions, 1, MPI_INT, ring.previous, kTag, MPI_COMM_WORLD, MPI_INFO_NULL,
                           &requests[0]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Psend_init(sent.data(), kPartitions, 1, MPI_INT, ring.next, kTag, MPI_COMM_WORLD, MPI_INFO_NULL,
                           &requests[1]),
            MPI_SUCCESS);
  for (int round = 0; round < 2; ++round) {
    got.fill(-1);
    for (int p = 0; p < kPartitions; ++p) sent[p] = 1000 * round + 10 * ring.me + p;
    ASSERT_EQ(MPI_Startall(2, requests.data()), MPI_SUCCESS);
    for (int p = kPartitions - 1; p >= 0; --p) ASSERT_EQ(MPI_Pready(p, requests[1]), MPI_SUCCESS);
    for (int p = 0; p < kPartitions; ++p) {
      int arrived = 0;
      while (arrived == 0) ASSERT_EQ(MPI_Parrived(requests[0], p, &arrived), MPI_SUCCESS);
      EXPECT_EQ(got[p], 1000 * round + 10 * ring.previous + p) << "partition " << p << ", round " << round;
    }
    ASSERT_EQ(MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE), MPI_SUCCESS);
  }
  for (MPI_Request& request : requests) EXPECT_EQ(MPI_Request_free(&request), MPI_SUCCESS);
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_sent, before.messages_sent);
  EXPECT_EQ(after.messages_logged, before.messages_logged);
}

// A logged send is not cancelled (MPI lets a cancel fail): an MPI_Issend to
// oneself stays pending, MPI_Request_get_status says so, and once received
// it completes, not cancelled.
TEST(MsglogMpi, ALoggedSendIsNotCancelledAndCompletesOnceReceived) {
  const int me = rank_of(MPI_COMM_WORLD);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Issend(&me, 1, MPI_INT, me, 99, MPI_COMM_WORLD, &request);
  ASSERT_EQ(MPI_Cancel(&request), MPI_SUCCESS);
  int flag = -1;
  MPI_Status status{};
  ASSERT_EQ(MPI_Request_get_status(request, &flag, &status), MPI_SUCCESS);
  EXPECT_EQ(flag, 0) << "not received yet";
  int got = -1;
  MPI_Recv(&got, 1, MPI_INT, me, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  EXPECT_EQ(got, me);
  while (flag == 0) MPI_Request_get_status(request, &flag, &status);
  int cancelled = -1;
  MPI_Test_cancelled(&status, &cancelled);
  EXPECT_EQ(cancelled, 0);
  ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(request, MPI_REQUEST_NULL);
}

// MPI_Request_get_status on a logged receive: once it says complete, the
// data is in the buffer and the count right; the MPI_Wait that frees the
// request gives the same status and the reception counts once.
TEST(MsglogMpi, GetStatusCompletesALoggedReceiveOnce) {
  const int me = rank_of(MPI_COMM_WORLD);
  const reprise_msglog_counters before = reprise::msglog::counters();
  std::array<int, 3> got{-1, -1, -1};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(got.data(), 3, MPI_INT, MPI_ANY_SOURCE, 98, MPI_COMM_WORLD, &request);
  int flag = -1;
  ASSERT_EQ(MPI_Request_get_status(request, &flag, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(flag, 0);
  const std::array<int, 2> sent{me, me + 7};
  MPI_Send(sent.data(), 2, MPI_INT, me, 98, MPI_COMM_WORLD);
  MPI_Status status{};
  while (flag == 0) MPI_Request_get_status(request, &flag, &status);
  EXPECT_EQ(got[0], me);
  EXPECT_EQ(got[1], me + 7);
  int count = -1;
  MPI_Get_count(&status, MPI_INT, &count);
  EXPECT_EQ(count, 2);
  MPI_Status again{};
  ASSERT_EQ(MPI_Wait(&request, &again), MPI_SUCCESS);
  EXPECT_EQ(request, MPI_REQUEST_NULL);
  EXPECT_EQ(again.MPI_SOURCE, me);
  EXPECT_EQ(again.MPI_TAG, 98);
  MPI_Get_count(&again, MPI_INT, &count);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(reprise::msglog::counters().messages_received - before.messages_received, 1U);
}

// MPI-IO passes straight: a file written and read back by every process.
TEST(MsglogMpi, MpiIoPassesStraight) {
  const int me = rank_of(MPI_COMM_WORLD);
  const std::string path = "/tmp/reprise_msglog_io_" + std::to_string(size_of(MPI_COMM_WORLD));
  MPI_File file = MPI_FILE_NULL;
  ASSERT_EQ(MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                          MPI_INFO_NULL, &file),
            MPI_SUCCESS);
  const int value = me * 11;
  MPI_File_write_at_all(file, me * static_cast<MPI_Offset>(sizeof(int)), &value, 1, MPI_INT, MPI_STATUS_IGNORE);
  int back = -1;
  MPI_File_read_at_all(file, me * static_cast<MPI_Offset>(sizeof(int)), &back, 1, MPI_INT, MPI_STATUS_IGNORE);
  EXPECT_EQ(back, value);
  EXPECT_EQ(MPI_File_close(&file), MPI_SUCCESS);
}

// A cancelled receive consumes nothing: the next message on its channel is
// received by the next receive, and a checkpoint then frees every entry
// (a number left unconsumed would keep the log from being collected).
TEST(MsglogMpi, ACancelledReceiveConsumesNothing) {
  reprise::msglog::mark_checkpoint();
  const int me = rank_of(MPI_COMM_WORLD);
  const reprise_msglog_counters before = reprise::msglog::counters();
  for (const bool persistent : {false, true}) {
    int value = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    if (persistent) {
      MPI_Recv_init(&value, 1, MPI_INT, me, 5, MPI_COMM_WORLD, &request);
      MPI_Start(&request);
    } else {
      MPI_Irecv(&value, 1, MPI_INT, me, 5, MPI_COMM_WORLD, &request);
    }
    EXPECT_TRUE(cancelled_and_completed(request));
    EXPECT_EQ(value, -1);
    if (persistent) MPI_Request_free(&request);
    const int sent = me + 100;
    MPI_Send(&sent, 1, MPI_INT, me, 5, MPI_COMM_WORLD);
    MPI_Recv(&value, 1, MPI_INT, me, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(value, sent);
  }
  EXPECT_EQ(reprise::msglog::counters().messages_received - before.messages_received, 2U);
  reprise::msglog::mark_checkpoint();
  EXPECT_EQ(reprise::msglog::counters().log_bytes_now, 0U);
}

// MPI_Ibsend and a persistent buffered send complete at once, as with a
// buffer attached: 1 MiB each, waited for before the receiver posts its
// receive (a request completed by the transfer would wait forever), logged
// byte for byte.
TEST(MsglogMpi, BufferedNonBlockingAndPersistentSendsCompleteAtOnceAndAreLogged) {
  constexpr int kCount = 1 << 18;
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  std::vector<int> attached(2 * (kCount * sizeof(int) + MPI_BSEND_OVERHEAD) / sizeof(int));
  MPI_Buffer_attach(attached.data(), static_cast<int>(attached.size() * sizeof(int)));
  reprise::msglog::mark_checkpoint();
  std::vector<int> out(kCount, me);
  std::vector<int> in(kCount, -1);
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ibsend(out.data(), kCount, MPI_INT, next, 11, MPI_COMM_WORLD, &request), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(request, MPI_REQUEST_NULL);
  MPI_Recv(in.data(), kCount, MPI_INT, previous, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  EXPECT_EQ(in, std::vector<int>(kCount, previous));
  ASSERT_EQ(MPI_Bsend_init(out.data(), kCount, MPI_INT, next, 12, MPI_COMM_WORLD, &request), MPI_SUCCESS);
  for (int round = 0; round < 2; ++round) {
    std::fill(out.begin(), out.end(), me * 10 + round);
    ASSERT_EQ(MPI_Start(&request), MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
    MPI_Recv(in.data(), kCount, MPI_INT, previous, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(in, std::vector<int>(kCount, previous * 10 + round)) << round;
  }
  MPI_Request_free(&request);
  const auto logged = reprise::msglog::logged_messages(1, next);
  ASSERT_EQ(logged.size(), 3U);
  EXPECT_EQ(logged[0].tag, 11);
  EXPECT_EQ(logged[2].payload.size(), kCount * sizeof(int));
  int last = -1;
  std::memcpy(&last, logged[2].payload.data() + logged[2].payload.size() - sizeof(int), sizeof(int));
  EXPECT_EQ(last, me * 10 + 1);
  void* detached = nullptr;
  int bytes = 0;
  MPI_Buffer_detach(&detached, &bytes);
  reprise::msglog::mark_checkpoint();
}

// MPI_Isendrecv and MPI_Isendrecv_replace around a ring, 1 MiB each (the
// send from the log's copy, taken before the receive is posted): every
// value arrives, and each send is logged.
TEST(MsglogMpi, NonBlockingSendReceivesAreLogged) {
  constexpr int kCount = 1 << 18;
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  reprise::msglog::mark_checkpoint();
  const reprise_msglog_counters before = reprise::msglog::counters();
  std::vector<int> out(kCount, me);
  std::vector<int> in(kCount, -1);
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Isendrecv(out.data(), kCount, MPI_INT, next, 21, in.data(), kCount, MPI_INT, previous, 21,
                          MPI_COMM_WORLD, &request),
            MPI_SUCCESS);
  MPI_Status status{};
  ASSERT_EQ(MPI_Wait(&request, &status), MPI_SUCCESS);
  EXPECT_EQ(status.MPI_SOURCE, previous);
  EXPECT_EQ(in, std::vector<int>(kCount, previous));
  ASSERT_EQ(MPI_Isendrecv_replace(out.data(), kCount, MPI_INT, next, 22, MPI_ANY_SOURCE, 22, MPI_COMM_WORLD, &request),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&request, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(out, std::vector<int>(kCount, previous));
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_logged - before.messages_logged, 2U);
  EXPECT_EQ(after.messages_received - before.messages_received, 2U);
  EXPECT_EQ(after.events_matching - before.events_matching, 1U) << "the MPI_ANY_SOURCE receive";
  reprise::msglog::mark_checkpoint();
}

// MPI_Comm_idup (its communicator registered when the request completes)
// and MPI_Comm_create_group (collective over the group only: here the even
// ranks, while the odd ones make nothing) make logged communicators; each
// message on them is logged on a channel of its own, and the keys agree
// across processes (a message sent on one is received on the same one).
TEST(MsglogMpi, NonBlockingAndGroupCommunicatorsAreLogged) {
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  MPI_Comm copy = MPI_COMM_NULL;
  MPI_Request duplication = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &duplication), MPI_SUCCESS);
  int flag = 0;
  while (flag == 0) MPI_Test(&duplication, &flag, MPI_STATUS_IGNORE);
  const reprise_msglog_counters before = reprise::msglog::counters();
  int got = -1;
  MPI_Sendrecv(&me, 1, MPI_INT, next, 4, &got, 1, MPI_INT, previous, 4, copy, MPI_STATUS_IGNORE);
  EXPECT_EQ(got, previous);
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  const int evens[] = {0, 2};
  const int members = size > 2 ? 2 : 1;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group_incl(world, members, evens, &group);
  MPI_Comm even = MPI_COMM_NULL;
  std::uint64_t group_messages = 0;
  if (me % 2 == 0) {
    for (int round = 0; round < 2; ++round) {  // two calls of one group and tag: two keys
      ASSERT_EQ(MPI_Comm_create_group(MPI_COMM_WORLD, group, 9, &even), MPI_SUCCESS);
      const int peer = (rank_of(even) + 1) % members;
      MPI_Sendrecv(&me, 1, MPI_INT, peer, 4, &got, 1, MPI_INT, peer, 4, even, MPI_STATUS_IGNORE);
      EXPECT_EQ(got, members == 2 ? 2 - me : me);
      MPI_Comm_free(&even);
      ++group_messages;
    }
  }
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  EXPECT_EQ(reprise::msglog::counters().messages_logged - before.messages_logged, 1 + group_messages);
  MPI_Comm_free(&copy);
  reprise::msglog::mark_checkpoint();
  EXPECT_EQ(reprise::msglog::counters().log_bytes_now, 0U);
}

// An intercommunicator between the even and the odd processes, and the
// intracommunicator merged from it, are logged: a message across and a ring
// on the merged one, each logged, received on the same key (a mismatch is
// an error), and collected by a checkpoint.
TEST(MsglogMpi, IntercommunicatorsAreLogged) {
  const int me = rank_of(MPI_COMM_WORLD);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
  MPI_Comm across = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, me % 2 == 0 ? 1 : 0, 17, &across), MPI_SUCCESS);
  const reprise_msglog_counters before = reprise::msglog::counters();
  int remote_size = 0;
  MPI_Comm_remote_size(across, &remote_size);
  const int mine = rank_of(half);
  // Each process sends to, and receives from, the remote process of its own
  // local rank, when there is one.
  const bool paired = mine < remote_size;
  if (paired) {
    int got = -1;
    MPI_Status status{};
    MPI_Sendrecv(&me, 1, MPI_INT, mine, 2, &got, 1, MPI_INT, mine, 2, across, &status);
    EXPECT_EQ(status.MPI_SOURCE, mine);
    EXPECT_EQ(got % 2, 1 - me % 2) << "from the other half";
  }
  const std::uint64_t received = paired ? 1 : 0;
  MPI_Comm merged = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Intercomm_merge(across, me % 2, &merged), MPI_SUCCESS);
  const auto [at, size, next, previous] = ring_of(merged);
  int got = -1;
  MPI_Sendrecv(&at, 1, MPI_INT, next, 3, &got, 1, MPI_INT, previous, 3, merged, MPI_STATUS_IGNORE);
  EXPECT_EQ(got, previous);
  const reprise_msglog_counters after = reprise::msglog::counters();
  EXPECT_EQ(after.messages_logged - before.messages_logged, received + 1U);
  EXPECT_EQ(after.messages_received - before.messages_received, received + 1U);
  MPI_Comm_free(&merged);
  MPI_Comm_free(&across);
  MPI_Comm_free(&half);
  reprise::msglog::mark_checkpoint();
  EXPECT_EQ(reprise::msglog::counters().log_bytes_now, 0U);
}

// The graph constructors make logged communicators: a ring over a
// distributed graph and over a graph topology, each message logged on its
// own channel.
TEST(MsglogMpi, GraphTopologiesAreLogged) {
  const auto [me, size, next, previous] = ring_of(MPI_COMM_WORLD);
  MPI_Comm distributed = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &previous, MPI_UNWEIGHTED, 1, &next, MPI_UNWEIGHTED,
                                           MPI_INFO_NULL, 0, &distributed),
            MPI_SUCCESS);
  std::vector<int> index(static_cast<std::size_t>(size));
  std::vector<int> edges(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    index[static_cast<std::size_t>(r)] = r + 1;
    edges[static_cast<std::size_t>(r)] = (r + 1) % size;
  }
  MPI_Comm graph = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Graph_create(MPI_COMM_WORLD, size, index.data(), edges.data(), 0, &graph), MPI_SUCCESS);
  const reprise_msglog_counters before = reprise::msglog::counters();
  for (MPI_Comm comm : {distributed, graph}) {
    int got = -1;
    MPI_Sendrecv(&me, 1, MPI_INT, next, 3, &got, 1, MPI_INT, previous, 3, comm, MPI_STATUS_IGNORE);
    EXPECT_EQ(got, previous);
  }
  EXPECT_EQ(reprise::msglog::counters().messages_logged - before.messages_logged, 2U);
  std::size_t channels_to_next = 0;
  for (const auto& state : reprise::msglog::channel_states()) {
    if (state.peer == next && state.communicator != 1 && state.logged_messages == 1) ++channels_to_next;
  }
  EXPECT_EQ(channels_to_next, 2U) << "one channel per graph communicator";
  MPI_Comm_free(&distributed);
  MPI_Comm_free(&graph);
  reprise::msglog::mark_checkpoint();
}

}  // namespace
