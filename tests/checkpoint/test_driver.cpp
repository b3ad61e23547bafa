// The recovery driver under real kills: an iterative computation checkpoints
// every few iterations, processes are killed at fixed points, and the result
// must equal a failure-free run exactly (integer arithmetic), with respawning
// and with shrinking (the lost work redistributed). Messages of an older
// epoch must never be matched after a recovery.

#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <climits>
#include <map>
#include <stdexcept>
#include <thread>

#include "failure_helpers.hpp"
#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/heartbeat.hpp"
#include "reprise/inject.hpp"
#include "reprise/placement.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kItemsPerProcess = 500;
constexpr std::uint64_t kIterations = 12;
constexpr std::uint64_t kCheckpointEvery = 3;

std::uint64_t step(std::uint64_t value, std::uint64_t id, std::uint64_t global_sum) {
  return detail::mix64(value + id * 31 + global_sum);
}

/// The failure-free result for all items, computed serially.
std::map<std::uint64_t, std::uint64_t> expected_result(int processes) {
  std::map<std::uint64_t, std::uint64_t> value;
  for (std::uint64_t id = 0; id < kItemsPerProcess * static_cast<std::uint64_t>(processes); ++id)
    value[id] = detail::mix64(id);
  for (std::uint64_t iteration = 0; iteration < kIterations; ++iteration) {
    std::uint64_t sum = 0;
    for (const auto& [id, v] : value) sum += v;
    for (auto& [id, v] : value) v = step(v, id, sum);
  }
  return value;
}

/// One process's share of the computation: its items and the iteration.
struct Work {
  std::vector<std::uint64_t> ids;
  std::vector<std::uint64_t> values;
  std::vector<std::uint64_t> iteration{0, UINT64_MAX};  // the iteration, and the last one checkpointed

  explicit Work(OriginalRank me) {
    for (std::uint64_t k = 0; k < kItemsPerProcess; ++k) {
      ids.push_back(static_cast<std::uint64_t>(me.value()) * kItemsPerProcess + k);
      values.push_back(detail::mix64(ids.back()));
    }
  }
  void protect_in(Checkpoint& checkpoint) {
    checkpoint.protect("ids", ids);
    checkpoint.protect("values", values);
    checkpoint.protect("iteration", iteration);
  }
};

/// Runs the computation under `driver`, killing (or hanging) `kills[epoch]`
/// (an original rank) when it reaches iteration `at[epoch]`. Checkpoints
/// every few iterations, from iteration `first_checkpoint` on.
void compute(Comm& comm, Checkpoint& checkpoint, Work& work, const std::map<std::uint64_t, OriginalRank>& kills,
             const std::map<std::uint64_t, std::uint64_t>& at, inject::Action action = inject::Action::kKill,
             std::uint64_t first_checkpoint = 0) {
  while (work.iteration[0] < kIterations) {
    if (work.iteration[0] % kCheckpointEvery == 0 && work.iteration[0] >= first_checkpoint &&
        work.iteration[1] != work.iteration[0]) {
      work.iteration[1] = work.iteration[0];
      checkpoint.checkpoint();
    }
    const auto kill = kills.find(comm.epoch());
    if (kill != kills.end() && kill->second == comm.original_rank() && at.at(comm.epoch()) == work.iteration[0]) {
      if (action == inject::Action::kHang) inject::hang(comm.original_rank());
      inject::kill_self(comm.original_rank());
    }
    std::uint64_t local = 0;
    for (auto v : work.values) local += v;
    const auto sum = comm.allreduce(local, MPI_SUM);
    for (std::size_t k = 0; k < work.values.size(); ++k) work.values[k] = step(work.values[k], work.ids[k], sum);
    ++work.iteration[0];
  }
}

/// Gathers every (id, value) pair to every process and compares with the
/// failure-free run; returns the number of wrong or missing items.
std::size_t wrong_items(Comm& comm, const Work& work, int original_processes) {
  std::vector<std::uint64_t> mine;
  for (std::size_t k = 0; k < work.ids.size(); ++k) mine.insert(mine.end(), {work.ids[k], work.values[k]});
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(comm.size()));
  comm.check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm.raw()), "MPI_Allgather");
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<std::uint64_t> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  comm.check(MPI_Allgatherv(mine.data(), count, MPI_UINT64_T, all.data(), counts.data(), offsets.data(), MPI_UINT64_T,
                            comm.raw()),
             "MPI_Allgatherv");
  const auto expected = expected_result(original_processes);
  std::map<std::uint64_t, std::uint64_t> got;
  for (std::size_t i = 0; i + 1 < all.size(); i += 2) got[all[i]] = all[i + 1];
  std::size_t wrong = expected.size() > got.size() ? expected.size() - got.size() : got.size() - expected.size();
  for (const auto& [id, value] : expected) {
    const auto it = got.find(id);
    wrong += (it == got.end() || it->second != value) ? 1 : 0;
  }
  return wrong;
}

/// After a shrink: departed process k's items go to survivor k mod size.
void adopt_departed(Comm& comm, Checkpoint& checkpoint, Work& work, const Recovery& recovery) {
  std::vector<OriginalRank> mine;
  for (std::size_t k = 0; k < recovery.lost.size(); ++k) {
    if (static_cast<int>(k) % comm.size() == comm.rank().value()) mine.push_back(recovery.lost[k]);
  }
  for (const auto& [owner, saved] : checkpoint.fetch(mine)) {
    const auto ids = saved.values<std::uint64_t>("ids");
    const auto values = saved.values<std::uint64_t>("values");
    work.ids.insert(work.ids.end(), ids.begin(), ids.end());
    work.values.insert(work.values.end(), values.begin(), values.end());
    EXPECT_EQ(saved.values<std::uint64_t>("iteration"), work.iteration) << "all rolled back to one checkpoint";
  }
}

/// The computation under a driver; original rank 1 dies at iteration 4,
/// then (a survivor) 2 at iteration 8.
struct DrivenRun {
  Comm comm = Comm::world();
  int processes = comm.size();
  Work work{comm.original_rank()};
  Checkpoint checkpoint{comm};
  Driver driver;

  explicit DrivenRun(RecoveryMode mode) : driver(comm, checkpoint, {.mode = mode}) { work.protect_in(checkpoint); }
  void go() {
    const std::map<std::uint64_t, OriginalRank> kills{{0, OriginalRank{1}}, {1, OriginalRank{2}}};
    const std::map<std::uint64_t, std::uint64_t> at{{0, 4}, {1, 8}};
    driver.run([&] { compute(comm, checkpoint, work, kills, at); });
  }
};

}  // namespace

TEST(Driver, RespawnFinishesWithTheFailureFreeResult) {
  DrivenRun run(RecoveryMode::kRespawn);
  auto& [comm, processes, work, checkpoint, driver] = run;
  run.go();
  EXPECT_EQ(comm.size(), processes);
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
  EXPECT_EQ(comm.epoch(), 2U);
  if (!comm.is_replacement()) {
    ASSERT_EQ(driver.recoveries().size(), 2U);
    EXPECT_EQ(driver.recoveries()[0].lost, std::vector<OriginalRank>{OriginalRank{1}});
    EXPECT_EQ(driver.recoveries()[1].lost, std::vector<OriginalRank>{OriginalRank{2}});
  }
}

TEST(Driver, ShrinkRedistributesAndFinishesWithTheFailureFreeResult) {
  DrivenRun run(RecoveryMode::kShrink);
  auto& [comm, processes, work, checkpoint, driver] = run;
  driver.on_recovery([&](const Recovery& recovery) { adopt_departed(comm, checkpoint, work, recovery); });
  run.go();
  EXPECT_EQ(comm.size(), processes - 2);
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
  ASSERT_EQ(driver.recoveries().size(), 2U);
  EXPECT_EQ(driver.recoveries()[0].lost, std::vector<OriginalRank>{OriginalRank{1}});
  EXPECT_EQ(driver.recoveries()[1].lost, std::vector<OriginalRank>{OriginalRank{2}});
}

// Original rank 1 dies at iteration 4; original rank 2 (not its buddy) dies
// inside the recovery from it. The recovery starts again and the result is
// still exact.
void kill_during_recovery(RecoveryMode mode) {
  DrivenRun run(mode);
  auto& [comm, processes, work, checkpoint, driver] = run;
  const OriginalRank second{2};
  if (!comm.is_replacement()) inject::arm("checkpoint.restore", second);  // not again in its replacement
  driver.on_recovery([&](const Recovery& recovery) {
    if (mode == RecoveryMode::kShrink) adopt_departed(comm, checkpoint, work, recovery);
  });
  driver.run([&] { compute(comm, checkpoint, work, {{0, OriginalRank{1}}}, {{0, 4}}); });
  inject::disarm_all();
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
  EXPECT_EQ(comm.size(), mode == RecoveryMode::kShrink ? processes - 2 : processes);
  if (!comm.is_replacement()) {
    ASSERT_EQ(driver.recoveries().size(), 1U);
    EXPECT_GE(driver.recoveries()[0].attempts, 2) << "the recovery was interrupted and started again";
    const std::vector<OriginalRank> both{OriginalRank{1}, second};
    EXPECT_EQ(driver.recoveries()[0].lost, both);
  }
}

TEST(Driver, AKillDuringARespawnRecoveryIsRecoveredToo) { kill_during_recovery(RecoveryMode::kRespawn); }

TEST(Driver, AKillDuringAShrinkRecoveryIsRecoveredToo) { kill_during_recovery(RecoveryMode::kShrink); }

// Original rank 1 dies at iteration 1, before the application's first
// checkpoint (at iteration 3): the driver's own first checkpoint, taken as
// the loop starts, is what everyone rolls back to.
void kill_before_the_first_checkpoint(RecoveryMode mode) {
  DrivenRun run(mode);
  auto& [comm, processes, work, checkpoint, driver] = run;
  driver.on_recovery([&](const Recovery& recovery) {
    if (mode == RecoveryMode::kShrink) adopt_departed(comm, checkpoint, work, recovery);
  });
  driver.run([&] {
    compute(comm, checkpoint, work, {{0, OriginalRank{1}}}, {{0, 1}}, inject::Action::kKill, kCheckpointEvery);
  });
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
  EXPECT_EQ(comm.size(), mode == RecoveryMode::kShrink ? processes - 1 : processes);
  if (!comm.is_replacement()) {
    ASSERT_EQ(driver.recoveries().size(), 1U);
    EXPECT_EQ(driver.recoveries()[0].lost, std::vector<OriginalRank>{OriginalRank{1}});
  }
}

TEST(Driver, RespawnRecoversAKillBeforeTheFirstCheckpoint) { kill_before_the_first_checkpoint(RecoveryMode::kRespawn); }

TEST(Driver, ShrinkRecoversAKillBeforeTheFirstCheckpoint) { kill_before_the_first_checkpoint(RecoveryMode::kShrink); }

// Original rank 2's loop raises an error of its own (not a process failure)
// at iteration 2, while the others wait for it in a collective: no process is
// left waiting; every process's run() raises, rank 2 its own error.
TEST(Driver, AnErrorOnOneProcessEndsTheRunOnEveryProcess) {
  DrivenRun run(RecoveryMode::kRespawn);
  auto& [comm, processes, work, checkpoint, driver] = run;
  const OriginalRank thrower{2};
  reprise::test::expect_run_ended_by(comm, thrower, [&] {
    driver.run([&] {
      while (work.iteration[0] < kIterations) {
        if (comm.original_rank() == thrower && work.iteration[0] == 2) {
          throw UsageError("bad input on #2 (thrown on purpose)");
        }
        EXPECT_EQ(comm.allreduce(std::uint64_t{1}, MPI_SUM), static_cast<std::uint64_t>(processes));
        ++work.iteration[0];
      }
    });
  });
  EXPECT_TRUE(driver.recoveries().empty());
}

// Original rank 1 is killed at iteration 4; original rank 0 turns the failure
// its collective meets into an error of its own, as a program that received
// data a failed process never sent would: the error comes from the failure,
// so every process recovers from it and ends with the failure-free result.
TEST(Driver, AnErrorRaisedBecauseAProcessFailedIsRecoveredLikeTheFailure) {
  DrivenRun run(RecoveryMode::kRespawn);
  auto& [comm, processes, work, checkpoint, driver] = run;
  driver.run([&] {
    while (work.iteration[0] < kIterations) {
      if (work.iteration[0] % kCheckpointEvery == 0 && work.iteration[1] != work.iteration[0]) {
        work.iteration[1] = work.iteration[0];
        checkpoint.checkpoint();
      }
      const bool first_epoch_at_4 = comm.epoch() == 0 && work.iteration[0] == 4;
      if (first_epoch_at_4 && comm.original_rank() == OriginalRank{1}) inject::kill_self(comm.original_rank());
      std::uint64_t local = 0;
      for (auto v : work.values) local += v;
      std::uint64_t sum = 0;
      try {
        sum = comm.allreduce(local, MPI_SUM);
      } catch (const CommFailure&) {
        if (comm.original_rank() == OriginalRank{0}) throw std::runtime_error("a sum that cannot be right");
        throw;
      }
      for (std::size_t k = 0; k < work.values.size(); ++k) work.values[k] = step(work.values[k], work.ids[k], sum);
      ++work.iteration[0];
    }
  });
  EXPECT_EQ(driver.recoveries().size(), 1U);
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
}

// The same, but original rank 0 raises its error at iteration 4 again after
// the recovery, where no process fails: an error of its own, which ends the
// run on every process.
TEST(Driver, AnErrorRaisedAgainWithoutAFailureEndsTheRunOnEveryProcess) {
  DrivenRun run(RecoveryMode::kRespawn);
  auto& [comm, processes, work, checkpoint, driver] = run;
  const OriginalRank thrower{0};
  reprise::test::expect_run_ended_by(comm, thrower, [&] {
    driver.run([&] {
      while (work.iteration[0] < kIterations) {
        if (work.iteration[0] % kCheckpointEvery == 0 && work.iteration[1] != work.iteration[0]) {
          work.iteration[1] = work.iteration[0];
          checkpoint.checkpoint();
        }
        if (work.iteration[0] == 4) {
          if (comm.epoch() == 0 && comm.original_rank() == OriginalRank{1}) inject::kill_self(comm.original_rank());
          if (comm.epoch() == 1 && comm.original_rank() == thrower) throw UsageError("bad input on #0 (on purpose)");
        }
        try {
          EXPECT_EQ(comm.allreduce(std::uint64_t{1}, MPI_SUM), static_cast<std::uint64_t>(processes));
        } catch (const CommFailure&) {
          if (comm.original_rank() == thrower) throw UsageError("bad input on #0 (on purpose)");
          throw;
        }
        ++work.iteration[0];
      }
    });
  });
  EXPECT_EQ(driver.recoveries().size(), 1U);
}

// Original rank 1 and the other holder of its state die together right
// after the checkpoint of iteration 3: every process's run() raises DataLost
// naming exactly rank 1's state (and the other victim's, if lost too), not
// only the fastest processes while the others see a revoke.
void a_lost_state_is_data_lost_everywhere(RecoveryMode mode) {
  DrivenRun run(mode);
  auto& [comm, processes, work, checkpoint, driver] = run;
  // One node: slot s is rank s.
  const Placement placement({.blocks = static_cast<std::uint64_t>(processes),
                             .slots = processes,
                             .copies = 2,
                             .node_of_slot = std::vector<int>(static_cast<std::size_t>(processes), 0)});
  const auto holders = placement.holders(BlockId{1});
  const std::vector<OriginalRank> victims{OriginalRank{holders[0].value()}, OriginalRank{holders[1].value()}};
  std::vector<BlockRange> expected;
  for (std::uint64_t slot = 0; slot < static_cast<std::uint64_t>(processes); ++slot) {
    const auto held_by = placement.holders(BlockId{slot});
    const auto dead = [&](Slot holder) {
      return std::find(victims.begin(), victims.end(), OriginalRank{holder.value()}) != victims.end();
    };
    if (std::all_of(held_by.begin(), held_by.end(), dead)) expected.push_back({BlockId{slot}, BlockId{slot + 1}});
  }
  try {
    driver.run([&] {
      while (work.iteration[0] < kIterations) {
        if (work.iteration[0] == kCheckpointEvery && work.iteration[1] != kCheckpointEvery) {
          work.iteration[1] = kCheckpointEvery;
          checkpoint.checkpoint();
          comm.barrier();  // everyone holds the checkpoint; then both victims die
          if (std::find(victims.begin(), victims.end(), comm.original_rank()) != victims.end()) {
            inject::kill_self(comm.original_rank());
          }
        }
        (void)comm.allreduce(std::uint64_t{1}, MPI_SUM);
        ++work.iteration[0];
      }
    });
    ADD_FAILURE() << "run() returned";
  } catch (const DataLost& error) {
    EXPECT_EQ(error.lost(), expected) << error.what();
  }
}

TEST(Driver, ALostStateIsDataLostOnEveryProcessAfterARespawn) {
  a_lost_state_is_data_lost_everywhere(RecoveryMode::kRespawn);
}

TEST(Driver, ALostStateIsDataLostOnEveryProcessAfterAShrink) {
  a_lost_state_is_data_lost_everywhere(RecoveryMode::kShrink);
}

TEST(Driver, NothingFromAnOlderEpochIsMatchedAfterARecovery) {
  auto comm = Comm::world();
  ASSERT_GE(comm.size(), 3);
  const OriginalRank victim{comm.size() - 1};
  constexpr int kTag = 77;
  // Rank 0 sends a message that rank 1 never receives in epoch 0.
  const int stale = 1111;
  if (comm.rank().value() == 0) comm.check(MPI_Send(&stale, 1, MPI_INT, 1, kTag, comm.raw()), "MPI_Send");
  reprise::test::kill_and_detect(comm, {victim});
  comm = comm.shrink();
  EXPECT_EQ(comm.epoch(), 1U);
  const int fresh = 2222;
  if (comm.rank().value() == 0) comm.check(MPI_Send(&fresh, 1, MPI_INT, 1, kTag, comm.raw()), "MPI_Send");
  if (comm.rank().value() == 1) {
    int got = 0;
    comm.check(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, kTag, comm.raw(), MPI_STATUS_IGNORE), "MPI_Recv");
    EXPECT_EQ(got, fresh) << "a message of epoch 0 was matched in epoch 1";
    int more = 0;
    comm.check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm.raw(), &more, MPI_STATUS_IGNORE), "MPI_Iprobe");
    EXPECT_EQ(more, 0);
  }
  // Collectives of the new epoch see only its members.
  EXPECT_EQ(comm.allreduce(1, MPI_SUM), comm.size());
}

TEST(Heartbeat, AHungProcessIsKilledAndTheRunRecovers) {
  DrivenRun run(RecoveryMode::kShrink);
  auto& [comm, processes, work, checkpoint, driver] = run;
  Heartbeat heartbeat(comm, {.period_seconds = 0.05, .timeout_seconds = 1.0});
  driver.watch(heartbeat);
  const OriginalRank victim{2};
  const OriginalRank watcher{1};  // the previous rank watches
  driver.on_recovery([&](const Recovery& recovery) { adopt_departed(comm, checkpoint, work, recovery); });
  const std::vector<OriginalRank> declared_before = heartbeat.declared_hung();
  driver.run([&] { compute(comm, checkpoint, work, {{0, victim}}, {{0, 5}}, inject::Action::kHang); });
  EXPECT_TRUE(declared_before.empty());
  EXPECT_EQ(comm.size(), processes - 1);
  EXPECT_EQ(wrong_items(comm, work, processes), 0U);
  ASSERT_EQ(driver.recoveries().size(), 1U);
  EXPECT_EQ(driver.recoveries()[0].lost, std::vector<OriginalRank>{victim});
  if (comm.original_rank() == watcher) {
    // Declared before the restart; the restarted heartbeat keeps the record.
    EXPECT_EQ(heartbeat.declared_hung(), std::vector<OriginalRank>{victim});
  }
}

TEST(Heartbeat, ABusyProcessIsNotDeclaredHung) {
  auto comm = Comm::world();
  Heartbeat heartbeat(comm, {.period_seconds = 0.02, .timeout_seconds = 0.3});
  // Process 0 computes for five timeouts without calling MPI; its heartbeat
  // thread keeps beating.
  if (comm.rank().value() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  comm.barrier();
  EXPECT_TRUE(heartbeat.declared_hung().empty());
  EXPECT_EQ(comm.allreduce(1, MPI_SUM), comm.size());
}

TEST(Heartbeat, ALateProcessIsNotKilled) {
  auto comm = Comm::world();
  Heartbeat heartbeat(comm, {.period_seconds = 0.02, .timeout_seconds = 0.3});
  // Process 0's heartbeat keeps quiet for five timeouts while the process
  // runs, as when its node is too busy to schedule the thread: its watcher
  // declares it hung, finds it running and leaves it alone.
  if (comm.rank().value() == 0) {
    inject::silence_heartbeat(1.5);
    std::this_thread::sleep_for(std::chrono::milliseconds(1700));
  }
  comm.barrier();
  // Its beats came again: the declaration is withdrawn.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!heartbeat.declared_hung().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(heartbeat.declared_hung().empty());
  EXPECT_EQ(comm.allreduce(1, MPI_SUM), comm.size());
}

TEST(Heartbeat, NonsenseSettingsAreRefused) {
  auto comm = Comm::world();
  EXPECT_THROW(Heartbeat(comm, {.period_seconds = 0, .timeout_seconds = 1}), UsageError);
  EXPECT_THROW(Heartbeat(comm, {.period_seconds = 1, .timeout_seconds = 0.5}), UsageError);
}
