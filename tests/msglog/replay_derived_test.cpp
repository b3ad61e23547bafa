// Communicators made from the Driver's under the replay
// (RecoveryMode::kReplay): the rows and the columns of a 2x2 grid, made by
// MPI_Comm_split of the Driver's communicator at the first step a process
// runs, an MPI_Allreduce on each every step (and, in some runs, two
// messages each way on a duplicate of the row, whose two receives of one
// source and tag are in progress across the column's collective). A process is killed for real (SIGKILL): the
// survivors re-map their rows and columns to communicators made again from
// the healed one, its replacement takes those for the splits it makes again
// while it replays, and no survivor runs a step twice. Made anew every step
// instead (a communicator made since the checkpoint, which the replay
// cannot match), every process rolls back, saying why in one line (tested by
// the line, see CMakeLists.txt). Kept, with only the duplicate of the row
// made every step, every process rolls back too, and a replacement killed
// after the checkpoint that rollback takes rolls every process back again:
// the next replacement must make its duplicates of the row under the
// survivors' keys. Without the recovery revoking the rows and columns,
// process 0 waited forever in a collective on its column for process 2,
// which met the failure in its row.
// Checked: every process's state equals, bitwise, that of the same steps run
// again afterwards without a failure.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
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

using tests::Kill;
using tests::KillPoint;

/// What each step calls on the row besides its MPI_Allreduce, and when the rows and columns are made.
struct Use {
  bool messages = false;         ///< two messages each way along the row too (on a duplicate of it), received in order
  bool every_step = false;       ///< made at each step and freed at its end (else at the first step, kept)
  bool pair_every_step = false;  ///< the duplicate of the row alone made at each step and freed at its end
};

/// The replacement of `kill`'s victim, dying again at `again.step` and
/// `again.point` (`again.rank` negative: it does not).
struct KillAgain {
  Kill kill;
  Kill again;
};

class Grid : public tests::MixedCells {
 public:
  Grid(int rank, Use use) : MixedCells(rank), _use(use) {}
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;
  ~Grid() { forget(); }

  /// Step `step` on the rows and columns of `comm`; the process `kill` names dies where it says.
  void step(Comm& comm, std::uint64_t step, const KillAgain& kills) {
    executing(step);
    const int me = comm.rank().value();
    if (_columns == MPI_COMM_NULL || (_use.messages && !_use.pair_every_step && _pair == MPI_COMM_NULL)) {
      forget();
      _rows = split(comm, me / 2);
      _columns = split(comm, me % 2);
    }
    if (_use.messages && _pair == MPI_COMM_NULL) comm.check(MPI_Comm_dup(_rows, &_pair), "MPI_Comm_dup (row)");
    die_if(comm, step, kills, KillPoint::kStepStart);
    // Two receives of one source and tag, in progress across the column's
    // collective: a recovery must post them again in this order.
    const int partner = 1 - me % 2;  // in the row
    std::uint64_t in[2] = {0, 0};
    MPI_Request receives[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    for (int k = 0; k < 2 && _use.messages; ++k) {
      comm.check(MPI_Irecv(&in[k], 1, MPI_UINT64_T, partner, 7, _pair, &receives[k]), "MPI_Irecv (row)");
    }
    std::uint64_t column = word(step);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &column, 1, MPI_UINT64_T, MPI_SUM, _columns), "MPI_Allreduce (column)");
    absorb(column);
    die_if(comm, step, kills, KillPoint::kMidStep);
    if (_use.messages) {
      const std::uint64_t out[2] = {word(step + 1), word(step + 3) ^ 0x77};
      for (const std::uint64_t value : out) {
        comm.check(MPI_Send(&value, 1, MPI_UINT64_T, partner, 7, _pair), "MPI_Send (row)");
      }
      comm.check(MPI_Waitall(2, receives, MPI_STATUSES_IGNORE), "MPI_Waitall (row)");
      absorb(in[0]);
      absorb(in[1] * 3);
    }
    std::uint64_t row = word(step + 2);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &row, 1, MPI_UINT64_T, MPI_BXOR, _rows), "MPI_Allreduce (row)");
    absorb(row);
    if (_use.every_step) forget();
    if (_use.pair_every_step) MPI_Comm_free(&_pair);
  }

  /// After a rollback: frees those made since its checkpoint (with
  /// `pair_every_step`, the tests' rollbacks go back past the first step).
  void forget_made_since_checkpoint() {
    if (!_use.pair_every_step) forget();
    if (_pair != MPI_COMM_NULL) MPI_Comm_free(&_pair);
  }

  /// A split of `comm` by `colour` (a failed split leaves no handle behind).
  static MPI_Comm split(Comm& comm, int colour) {
    MPI_Comm made = MPI_COMM_NULL;
    comm.check(MPI_Comm_split(comm.raw(), colour, comm.rank().value(), &made), "MPI_Comm_split");
    return made;
  }

  /// Frees the rows and columns (a failure may have come between their splits).
  void forget() {
    if (_rows != MPI_COMM_NULL) MPI_Comm_free(&_rows);
    if (_columns != MPI_COMM_NULL) MPI_Comm_free(&_columns);
    if (_pair != MPI_COMM_NULL) MPI_Comm_free(&_pair);
  }

 private:
  /// Dies for real at `point` of `step` if `kills` names this process there:
  /// the original process as `kills.kill` says, its first replacement as `kills.again` does.
  static void die_if(const Comm& comm, std::uint64_t step, const KillAgain& kills, KillPoint point) {
    MixedCells::die_if(comm, step, kills.kill, point);
    const Kill& again = kills.again;
    if (comm.is_replacement() && comm.epoch() == 1 && comm.rank().value() == again.rank && step == again.step &&
        again.point == point) {
      inject::kill_self(comm.original_rank());
    }
  }

  Use _use;
  MPI_Comm _rows = MPI_COMM_NULL;
  MPI_Comm _columns = MPI_COMM_NULL;
  MPI_Comm _pair = MPI_COMM_NULL;  ///< a duplicate of the row (a communicator made from one made from the Driver's)
};

/// The grid under the Driver in replay mode, `kill` as it says, then its
/// first replacement as `again` says; `replays`: the failures are replayed
/// (else every process rolls back).
void grid_run(Use use, const Kill& kill, bool replays, const Kill& again = {}) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  ASSERT_EQ(comm.size(), 4);
  Checkpoint checkpoint(comm);
  Grid app(comm.rank().value(), use);
  app.protect(checkpoint);
  {
    Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
    // A rollback forgets the communicators made since the checkpoint: the step makes them again.
    driver.on_recovery([&](const Recovery& recovery) {
      if (recovery.mode != RecoveryMode::kReplay) app.forget_made_since_checkpoint();
    });
    driver.run(kSteps, [&](std::uint64_t step) { app.step(comm, step, {kill, again}); });
    const std::size_t failures = (kill.rank < 0 ? 0U : 1U) + (again.rank < 0 ? 0U : 1U);
    // A replacement knows the recovery that started it, and none before.
    ASSERT_EQ(driver.recoveries().size(), comm.is_replacement() ? std::min<std::size_t>(failures, 1) : failures);
    for (const Recovery& recovery : driver.recoveries()) {
      EXPECT_EQ(recovery.mode, replays ? RecoveryMode::kReplay : RecoveryMode::kRespawn);
      EXPECT_EQ(recovery.lost, std::vector<OriginalRank>{OriginalRank{kill.rank}});
    }
    if (!comm.is_replacement()) {
      std::vector<std::uint64_t> once(kSteps);
      std::iota(once.begin(), once.end(), 0);
      if (replays) {
        EXPECT_EQ(app.executed(), once) << "a survivor never runs a step twice";
      } else {
        EXPECT_GT(app.executed().size(), kSteps) << "a survivor ran again from its checkpoint";
      }
    }
  }
  app.forget();
  Grid clean(comm.rank().value(), use);
  for (std::uint64_t step = 0; step < kSteps; ++step) clean.step(comm, step, KillAgain{});
  EXPECT_EQ(app.state(), clean.state()) << "this process's state, bitwise";
}

}  // namespace

TEST(ReplayDerived, RowsAndColumnsReplayAKillBetweenTheirCollectives) {
  grid_run({}, {.rank = 3, .step = 9, .point = KillPoint::kMidStep}, true);
}

TEST(ReplayDerived, RowsAndColumnsReplayAKillBetweenTheirMessagesAndCollectives) {
  grid_run({.messages = true}, {.rank = 3, .step = 9, .point = KillPoint::kMidStep}, true);
}

TEST(ReplayDerived, RowsAndColumnsReplayAKillJustAfterACheckpoint) {
  grid_run({.messages = true}, {.rank = 1, .step = 12, .point = KillPoint::kStepStart}, true);
}

TEST(ReplayDerived, RowsAndColumnsReplayAKilledFirstProcess) {
  grid_run({.messages = true}, {.rank = 0, .step = 16, .point = KillPoint::kMidStep}, true);
}

TEST(ReplayDerived, RowsAndColumnsMadeEveryStepRollBackInsteadOfHanging) {
  grid_run({.messages = true, .every_step = true}, {.rank = 3, .step = 9, .point = KillPoint::kMidStep}, false);
}

// Rows and columns kept, a duplicate of the row made every step: process 3
// killed at step 9 rolls every process back to step 6, where the Driver
// checkpoints again before the replacement has taken the rows and columns
// made again for it; that replacement killed at step 7 rolls back to this
// checkpoint, and the next one must make its duplicates of the row under the
// keys the survivors make theirs (it made the key of the first duplicate ever
// made from the row, and its messages reached the survivors as another
// communicator's).
TEST(ReplayDerived, AReplacementKilledAfterTheCheckpointOfARollbackRollsBackAgain) {
  grid_run({.messages = true, .pair_every_step = true}, {.rank = 3, .step = 9, .point = KillPoint::kMidStep}, false,
           {.rank = 3, .step = 7, .point = KillPoint::kMidStep});
}

TEST(ReplayDerived, AFailureFreeRunAgreesWithOpenMpi) { grid_run({}, {}, true); }
