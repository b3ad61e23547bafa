// Communicators made from the Driver's, which the replay (RecoveryMode::kReplay)
// does not re-map yet: the rows and the columns of a 2x2 grid, made by
// MPI_Comm_split of the Driver's communicator, an MPI_Allreduce on each
// every step (and, in one variant, an MPI_Sendrecv along the row). Process
// 3 is killed for real (SIGKILL) between its column's and its row's calls
// of step 9: process 0 then waits in step 10's collective on its column with
// process 2, which met the failure in its row. Checked: no process hangs
// (the recovery revokes the communicators made from the Driver's, so that
// process 0 meets the failure too), every process rolls back to its
// checkpoint saying why in one line (tested by the line, see CMakeLists.txt),
// the program makes its communicators again in Driver::on_recovery, and every
// process's state equals, bitwise, that of the same steps run again afterwards
// without a failure.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
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

/// What each step calls on the row besides its MPI_Allreduce.
enum class Row { kCollectiveOnly, kWithSendrecv };

class Grid : public tests::MixedCells {
 public:
  Grid(int rank, Row row) : MixedCells(rank), _row(row) {}
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;
  ~Grid() { forget(); }

  /// Step `step` on the rows and columns of `comm` (made at the first step
  /// this process runs); the process `kill` names dies where it says.
  void step(Comm& comm, std::uint64_t step, const Kill& kill) {
    executing(step);
    const int me = comm.rank().value();
    if (_rows == MPI_COMM_NULL) {
      comm.check(MPI_Comm_split(comm.raw(), me / 2, me, &_rows), "MPI_Comm_split (rows)");
      comm.check(MPI_Comm_split(comm.raw(), me % 2, me, &_columns), "MPI_Comm_split (columns)");
    }
    die_if(comm, step, kill, KillPoint::kStepStart);
    std::uint64_t column = word(step);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &column, 1, MPI_UINT64_T, MPI_SUM, _columns), "MPI_Allreduce (column)");
    absorb(column);
    die_if(comm, step, kill, KillPoint::kMidStep);
    if (_row == Row::kWithSendrecv) {
      const std::uint64_t out = word(step + 1);
      std::uint64_t in = 0;
      const int partner = 1 - me % 2;
      comm.check(MPI_Sendrecv(&out, 1, MPI_UINT64_T, partner, 7, &in, 1, MPI_UINT64_T, partner, 7, _rows,
                              MPI_STATUS_IGNORE),
                 "MPI_Sendrecv (row)");
      absorb(in);
    }
    std::uint64_t row = word(step + 2);
    comm.check(MPI_Allreduce(MPI_IN_PLACE, &row, 1, MPI_UINT64_T, MPI_BXOR, _rows), "MPI_Allreduce (row)");
    absorb(row);
  }

  /// Frees the rows and columns (revoked by a recovery): the next step makes them again.
  void forget() {
    if (_rows == MPI_COMM_NULL) return;
    MPI_Comm_free(&_rows);
    MPI_Comm_free(&_columns);
  }

 private:
  Row _row;
  MPI_Comm _rows = MPI_COMM_NULL;
  MPI_Comm _columns = MPI_COMM_NULL;
};

void grid_run(Row row, const Kill& kill) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  ASSERT_EQ(comm.size(), 4);
  Checkpoint checkpoint(comm);
  Grid app(comm.rank().value(), row);
  app.protect(checkpoint);
  {
    Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
    driver.on_recovery([&](const Recovery&) { app.forget(); });
    driver.run(kSteps, [&](std::uint64_t step) { app.step(comm, step, kill); });
    ASSERT_EQ(driver.recoveries().size(), kill.rank < 0 ? 0U : 1U);
    for (const Recovery& recovery : driver.recoveries()) {
      EXPECT_EQ(recovery.mode, RecoveryMode::kRespawn) << "every process rolled back";
      EXPECT_EQ(recovery.lost, std::vector<OriginalRank>{OriginalRank{kill.rank}});
    }
    if (!comm.is_replacement()) {
      const std::vector<std::uint64_t>& executed = app.executed();
      ASSERT_FALSE(executed.empty());
      EXPECT_EQ(executed.back(), kSteps - 1);
      if (kill.rank >= 0) {
        EXPECT_GT(executed.size(), kSteps) << "a survivor ran again from its checkpoint";
      }
    }
  }
  app.forget();
  Grid clean(comm.rank().value(), row);
  for (std::uint64_t step = 0; step < kSteps; ++step) clean.step(comm, step, Kill{});
  EXPECT_EQ(app.state(), clean.state()) << "this process's state, bitwise";
}

}  // namespace

TEST(ReplayDerived, CollectivesOnRowsAndColumnsRollBackInsteadOfHanging) {
  grid_run(Row::kCollectiveOnly, {.rank = 3, .step = 9, .point = KillPoint::kMidStep});
}

TEST(ReplayDerived, MessagesOnRowsAndColumnsRollBackInsteadOfHanging) {
  grid_run(Row::kWithSendrecv, {.rank = 3, .step = 9, .point = KillPoint::kMidStep});
}

TEST(ReplayDerived, AFailureFreeRunAgreesWithOpenMpi) { grid_run(Row::kCollectiveOnly, {}); }
