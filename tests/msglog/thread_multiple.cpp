// Under the message log, a program asking for MPI_THREAD_MULTIPLE gets it
// (MPI_Init_thread and MPI_Query_thread say so) and its threads call MPI at
// the same time, two processes:
// - a receive blocked in one thread is completed by a message that the
//   other process sends only after a message from this process's other
//   thread (it deadlocks if the log kept its lock while a call blocks);
// - kThreads threads each ping-pong kRounds messages on a communicator of
//   their own, blocking and non-blocking calls in turn, every value checked;
// - the log's counters add up: every message sent was logged and received.
// Each process prints one line; both must say RIGHT.

#include <mpi.h>

#include <array>
#include <cstdio>
#include <thread>
#include <vector>

#include "reprise/msglog.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 500;

/// Rank 0 blocks in a receive on `waiting` from 1 while its other thread
/// sends 1 the message (on `trigger`) that 1 waits for before it answers.
bool blocked_receive_completes(int rank, MPI_Comm waiting, MPI_Comm trigger) {
  int value = -1;
  if (rank == 0) {
    std::thread sender([&] {
      const int go = 7;
      MPI_Send(&go, 1, MPI_INT, 1, 0, trigger);
    });
    MPI_Recv(&value, 1, MPI_INT, 1, 0, waiting, MPI_STATUS_IGNORE);
    sender.join();
    return value == 8;
  }
  MPI_Recv(&value, 1, MPI_INT, 0, 0, trigger, MPI_STATUS_IGNORE);
  const int answer = value + 1;
  MPI_Send(&answer, 1, MPI_INT, 0, 0, waiting);
  return value == 7;
}

/// kRounds round trips with the other process on `comm`; even rounds
/// blocking, odd ones MPI_Isend/MPI_Irecv/MPI_Waitall. Returns the errors.
int ping_pong(int rank, int thread, MPI_Comm comm) {
  const int peer = 1 - rank;
  int errors = 0;
  for (int round = 0; round < kRounds; ++round) {
    const int expected = thread * 1000000 + round;
    int out = expected;
    int in = -1;
    if (round % 2 == 0) {
      if (rank == 0) {
        MPI_Send(&out, 1, MPI_INT, peer, thread, comm);
        MPI_Recv(&in, 1, MPI_INT, peer, thread, comm, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(&in, 1, MPI_INT, peer, thread, comm, MPI_STATUS_IGNORE);
        MPI_Send(&in, 1, MPI_INT, peer, thread, comm);
      }
    } else {
      std::array<MPI_Request, 2> requests{};
      MPI_Irecv(&in, 1, MPI_INT, peer, thread, comm, &requests[0]);
      MPI_Isend(&out, 1, MPI_INT, peer, thread, comm, &requests[1]);
      MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE);
    }
    if (in != expected) ++errors;
  }
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = -1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int queried = -1;
  MPI_Query_thread(&queried);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<MPI_Comm> comms(kThreads);
  for (MPI_Comm& comm : comms) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const bool unblocked = blocked_receive_completes(rank, comms[0], comms[1]);
  std::array<int, kThreads> errors{};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { errors[t] = ping_pong(rank, t, comms[t]); });
  for (std::thread& thread : threads) thread.join();
  int wrong = 0;
  for (const int e : errors) wrong += e;
  reprise_msglog_counters counters{};
  const bool counted = reprise_msglog_get_counters(&counters) == 0;
  // Per thread kRounds sent and kRounds received; one more of each on the blocked-receive channels.
  const auto messages = static_cast<unsigned long long>(kThreads * kRounds + 1);
  const bool adds_up = counted && counters.messages_sent == messages && counters.messages_received == messages &&
                       counters.messages_logged == messages;
  for (MPI_Comm& comm : comms) MPI_Comm_free(&comm);
  const bool right =
      provided == MPI_THREAD_MULTIPLE && queried == MPI_THREAD_MULTIPLE && unblocked && wrong == 0 && adds_up;
  std::printf("rank %d: provided %d queried %d, blocked receive %s, %d wrong values, counters %s: %s\n", rank, provided,
              queried, unblocked ? "completed" : "WRONG", wrong, adds_up ? "add up" : "do not add up",
              right ? "RIGHT" : "WRONG");
  MPI_Finalize();
  return right ? 0 : 1;
}
