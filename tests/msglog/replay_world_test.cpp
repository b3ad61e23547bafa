// MPI_COMM_WORLD and communicators made from it under the replay
// (RecoveryMode::kReplay), which re-maps only the Driver's communicator and
// those made from it: the rows and the columns of a 2x2 grid split from
// MPI_COMM_WORLD, an MPI_Allreduce on each every step, then a pipeline of
// one word from process 3 down to process 0 on MPI_COMM_WORLD itself.
// Process 3 is killed for real (SIGKILL): at the start of a step, when
// process 0 then waits in its row's collective for process 1, which met the
// failure in its column and recovers; or between its column's and its
// row's collectives, when process 1 then waits on MPI_COMM_WORLD for the
// word of process 2, which met the failure in its row and recovers; or at
// the start of a step with an MPI_Ibarrier on the columns first, when
// process 1 meets the failure outside the log (the barrier's completion,
// which the log passes straight to MPI) and recovers in the Driver's loop
// while process 0 waits in its row's collective for it. A
// recovery revokes MPI_COMM_WORLD and every communicator made from it, so
// the waiting survivor meets the failure too, and every process rolls back
// (one line says why); the program makes its communicators again from the
// Driver's in Driver::on_recovery. A program on the Driver's communicator
// that holds a duplicate of MPI_COMM_WORLD, unused since the checkpoint,
// rolls back too (the recovery revoked it), and so does one that started a
// process with MPI_Comm_spawn, or passed messages in partitions
// (MPI_Psend_init), whose messages the log does not hold. Without the revocation each waited
// forever. Checked: every process's state equals, bitwise, that of the same
// steps run again afterwards without a failure, and each survivor ran the
// steps in order, going back once, to the checkpoint.

#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/msglog.hpp"
#include "replay_checks.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kSteps = 18;
constexpr std::uint64_t kCheckpointEvery = 6;
constexpr int kPipelineTag = 11;
constexpr int kPartitionedTag = 12;

using tests::Kill;
using tests::KillPoint;

/// Where the grid runs, and what it adds.
struct Use {
  bool on_world = true;      ///< rows, columns and pipeline on MPI_COMM_WORLD (else on the Driver's communicator)
  bool barrier = false;      ///< an MPI_Ibarrier on the column first in each step
  bool holds_world = false;  ///< a duplicate of MPI_COMM_WORLD made at the first step, unused after its barrier
  bool spawns = false;       ///< process 0 starts a process at the first step and exchanges a number with it
  bool partitioned = false;  ///< a number passed round the ring in partitions at the first step
};

class WorldGrid : public tests::MixedCells {
 public:
  WorldGrid(int rank, Use use) : MixedCells(rank), _use(use) {}
  WorldGrid(const WorldGrid&) = delete;
  WorldGrid& operator=(const WorldGrid&) = delete;
  ~WorldGrid() { forget(); }

  /// Step `step`; the process `kill` names dies where it says.
  void step(Comm& comm, std::uint64_t step, const Kill& kill) {
    executing(step);
    const MPI_Comm base = _use.on_world ? MPI_COMM_WORLD : comm.raw();
    const int me = comm.rank().value();
    if (_columns == MPI_COMM_NULL) {
      _rows = split(comm, base, me / 2);
      _columns = split(comm, base, me % 2);
    }
    if (_use.holds_world && _held == MPI_COMM_NULL) {
      comm.check(MPI_Comm_dup(MPI_COMM_WORLD, &_held), "MPI_Comm_dup (world)");
      comm.check(MPI_Barrier(_held), "MPI_Barrier (world's duplicate)");
    }
    if (_use.spawns && comm.rank().value() == 0) {
      _use.spawns = false;
      ask_a_spawned_process(comm);
    }
    if (_use.partitioned) {
      _use.partitioned = false;
      pass_partitioned(comm);
    }
    die_if(comm, step, kill, KillPoint::kStepStart);
    if (_use.barrier) {
      MPI_Request request = MPI_REQUEST_NULL;
      comm.check(MPI_Ibarrier(_columns, &request), "MPI_Ibarrier (column)");
      comm.check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait (column's barrier)");
    }
    std::uint64_t column = word(step);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &column, 1, MPI_UINT64_T, MPI_SUM, _columns), "MPI_Allreduce (column)");
    absorb(column);
    die_if(comm, step, kill, KillPoint::kMidStep);
    std::uint64_t row = word(step + 2);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &row, 1, MPI_UINT64_T, MPI_BXOR, _rows), "MPI_Allreduce (row)");
    absorb(row);
    // The pipeline: each process takes the word of the one after it and passes its own on.
    std::uint64_t carried = word(step + 4);
    if (me < comm.size() - 1) {
      std::uint64_t got = 0;
      comm.check(MPI_Recv(&got, 1, MPI_UINT64_T, me + 1, kPipelineTag, base, MPI_STATUS_IGNORE), "MPI_Recv (world)");
      absorb(got);
      carried ^= got;
    }
    if (me > 0) comm.check(MPI_Send(&carried, 1, MPI_UINT64_T, me - 1, kPipelineTag, base), "MPI_Send (world)");
  }

  /// After a rollback: MPI_COMM_WORLD holds a lost process and the
  /// communicators made from it are revoked; the Driver's communicator
  /// takes their place. Those made from the Driver's before the checkpoint
  /// were made again by the rollback, and a replacement takes them: kept.
  void leave_world() {
    if (_use.on_world) forget();
    if (_held != MPI_COMM_NULL) MPI_Comm_free(&_held);
    _use.on_world = false;
    _use.holds_world = false;
  }

  void forget() {
    if (_rows != MPI_COMM_NULL) MPI_Comm_free(&_rows);
    if (_columns != MPI_COMM_NULL) MPI_Comm_free(&_columns);
    if (_held != MPI_COMM_NULL) MPI_Comm_free(&_held);
  }

 private:
  /// Starts a process outside the log (MPI_Comm_spawn on MPI_COMM_SELF),
  /// which doubles a number.
  static void ask_a_spawned_process(Comm& comm) {
    MPI_Comm helper = MPI_COMM_NULL;
    char command[] = REPRISE_SPAWNED_HELPER;
    comm.check(MPI_Comm_spawn(command, MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &helper, MPI_ERRCODES_IGNORE),
               "MPI_Comm_spawn");
    long long value = 21;
    comm.check(MPI_Send(&value, 1, MPI_LONG_LONG, 0, 0, helper), "MPI_Send (spawned)");
    comm.check(MPI_Recv(&value, 1, MPI_LONG_LONG, 0, 1, helper, MPI_STATUS_IGNORE), "MPI_Recv (spawned)");
    EXPECT_EQ(value, 42);
    comm.check(MPI_Comm_disconnect(&helper), "MPI_Comm_disconnect (spawned)");
  }

  /// Passes two numbers to the next process round the ring, one per
  /// partition (MPI_Psend_init, MPI_Precv_init), which the log does not keep.
  static void pass_partitioned(Comm& comm) {
    constexpr int kPartitions = 2;
    const int me = comm.rank().value();
    const int next = (me + 1) % comm.size();
    const int previous = (me + comm.size() - 1) % comm.size();
    const std::array<long long, kPartitions> sent{100LL * me, 100LL * me + 1};
    std::array<long long, kPartitions> got{-1, -1};
    std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    comm.check(MPI_Precv_init(got.data(), kPartitions, 1, MPI_LONG_LONG, previous, kPartitionedTag, comm.raw(),
                              MPI_INFO_NULL, &requests[0]),
               "MPI_Precv_init");
    comm.check(MPI_Psend_init(sent.data(), kPartitions, 1, MPI_LONG_LONG, next, kPartitionedTag, comm.raw(),
                              MPI_INFO_NULL, &requests[1]),
               "MPI_Psend_init");
    comm.check(MPI_Startall(2, requests.data()), "MPI_Startall (partitioned)");
    for (int partition = kPartitions - 1; partition >= 0; --partition) {
      comm.check(MPI_Pready(partition, requests[1]), "MPI_Pready");
    }
    comm.check(MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall (partitioned)");
    EXPECT_EQ(got, (std::array<long long, kPartitions>{100LL * previous, 100LL * previous + 1}));
    for (MPI_Request& request : requests) comm.check(MPI_Request_free(&request), "MPI_Request_free (partitioned)");
  }

  static MPI_Comm split(Comm& comm, MPI_Comm base, int colour) {
    MPI_Comm made = MPI_COMM_NULL;
    comm.check(MPI_Comm_split(base, colour, comm.rank().value(), &made), "MPI_Comm_split");
    return made;
  }

  Use _use;
  MPI_Comm _rows = MPI_COMM_NULL;
  MPI_Comm _columns = MPI_COMM_NULL;
  MPI_Comm _held = MPI_COMM_NULL;
};

/// The grid as `use` says (a replacement on the Driver's communicator)
/// under the Driver in replay mode, `kill` as it says.
void world_run(const Kill& kill, Use use = {}) {
  ASSERT_TRUE(msglog::active());
  // The failure must come back as an error for the Driver to recover from (as on reprise's own communicators).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Comm comm = Comm::world();
  ASSERT_EQ(comm.size(), 4);
  Checkpoint checkpoint(comm);
  if (comm.is_replacement()) use = {.on_world = false, .barrier = use.barrier};
  WorldGrid app(comm.rank().value(), use);
  app.protect(checkpoint);
  {
    Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
    driver.on_recovery([&](const Recovery& recovery) {
      if (recovery.mode != RecoveryMode::kReplay) app.leave_world();
    });
    driver.run(kSteps, [&](std::uint64_t step) { app.step(comm, step, kill); });
    ASSERT_EQ(driver.recoveries().size(), kill.rank < 0 ? 0U : 1U);
    for (const Recovery& recovery : driver.recoveries()) {
      EXPECT_EQ(recovery.mode, RecoveryMode::kRespawn) << "every process rolled back";
      EXPECT_EQ(recovery.lost, std::vector<OriginalRank>{OriginalRank{kill.rank}});
    }
    if (!comm.is_replacement()) {
      // The steps in order up to the failure's, then again from the checkpoint before it.
      std::vector<std::uint64_t> expected(kill.rank < 0 ? kSteps : kill.step + 1);
      std::iota(expected.begin(), expected.end(), 0);
      for (std::uint64_t step = kill.step / kCheckpointEvery * kCheckpointEvery; kill.rank >= 0 && step < kSteps;
           ++step) {
        expected.push_back(step);
      }
      EXPECT_EQ(app.executed(), expected);
    }
  }
  app.forget();
  WorldGrid clean(comm.rank().value(), {.on_world = false, .barrier = use.barrier});
  for (std::uint64_t step = 0; step < kSteps; ++step) clean.step(comm, step, Kill{});
  EXPECT_EQ(app.state(), clean.state()) << "this process's state, bitwise";
}

}  // namespace

TEST(ReplayWorld, ASurvivorWaitingInARowMadeFromWorldForARecoveringOneRollsBackWithTheOthers) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kStepStart});
}

TEST(ReplayWorld, ASurvivorWaitingOnWorldForARecoveringOneRollsBackWithTheOthers) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kMidStep});
}

TEST(ReplayWorld, ASurvivorWaitingForOneThatMetTheFailureOutsideTheLogRollsBackWithTheOthers) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kStepStart}, {.barrier = true});
}

TEST(ReplayWorld, AProgramHoldingADuplicateOfWorldRollsBackInsteadOfReplaying) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kMidStep}, {.on_world = false, .holds_world = true});
}

// Process 0 started a process outside the log (MPI_Comm_spawn) at the first
// step: the log does not hold what went to it or came from it, so a failure
// later rolls every process back (one line says why).
TEST(ReplayWorld, AProgramThatStartedAProcessRollsBackInsteadOfReplaying) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kMidStep}, {.on_world = false, .spawns = true});
}

// Every process passed numbers round the ring in partitions at the first
// step: the log does not keep partitioned messages, so a failure later rolls
// every process back (one line says why).
TEST(ReplayWorld, AProgramThatUsedPartitionedCommunicationRollsBackInsteadOfReplaying) {
  world_run({.rank = 3, .step = 9, .point = KillPoint::kMidStep}, {.on_world = false, .partitioned = true});
}

TEST(ReplayWorld, AFailureFreeRunAgreesWithOpenMpi) { world_run({}); }
