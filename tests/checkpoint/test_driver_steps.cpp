// The driver's own step loop, Driver::run(steps, step): the driver keeps the
// step counter in the checkpoint and checkpoints as the cadence says (every n
// steps, every so many seconds, or Young/Daly's interval). Processes are
// killed for real; the result must equal a failure-free run exactly, and
// every process must checkpoint at the same steps (otherwise a checkpoint
// would be refused or hang). Also Checkpoint::protect of a plain value.

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "failure_helpers.hpp"
#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/inject.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kItemsPerProcess = 200;
constexpr std::uint64_t kSteps = 40;

/// Item `id`'s value after `steps` steps of the failure-free run: each step
/// mixes every value with the sum of all values.
std::vector<std::uint64_t> expected_values(int processes, std::uint64_t steps) {
  std::vector<std::uint64_t> value(kItemsPerProcess * static_cast<std::uint64_t>(processes));
  for (std::uint64_t id = 0; id < value.size(); ++id) value[id] = detail::mix64(id);
  for (std::uint64_t s = 0; s < steps; ++s) {
    std::uint64_t sum = 0;
    for (auto v : value) sum += v;
    for (std::uint64_t id = 0; id < value.size(); ++id) value[id] = detail::mix64(value[id] + id * 31 + sum);
  }
  return value;
}

/// A process's items (respawn keeps one owner per item) and the run around
/// them: original rank `victim` dies at step `kill_at` in the first epoch.
struct StepRun {
  Comm comm = Comm::world();
  int processes = comm.size();
  std::vector<std::uint64_t> values;
  Checkpoint checkpoint{comm};
  Driver driver;

  explicit StepRun(Cadence cadence, bool inject_faults = false)
      : driver(comm, checkpoint, {.mode = RecoveryMode::kRespawn, .cadence = cadence, .inject_faults = inject_faults}) {
    const auto first = static_cast<std::uint64_t>(comm.original_rank().value()) * kItemsPerProcess;
    for (std::uint64_t k = 0; k < kItemsPerProcess; ++k) values.push_back(detail::mix64(first + k));
    checkpoint.protect("values", values);
  }

  /// One step; `pause` stands for computation (it differs between processes).
  void go(OriginalRank victim, std::uint64_t kill_at, std::chrono::microseconds pause) {
    driver.run(kSteps, [&](std::uint64_t step) {
      if (comm.epoch() == 0 && comm.original_rank() == victim && step == kill_at) inject::kill_self(victim);
      std::this_thread::sleep_for(pause);
      std::uint64_t local = 0;
      for (auto v : values) local += v;
      const auto sum = comm.allreduce(local, MPI_SUM);
      const auto first = static_cast<std::uint64_t>(comm.original_rank().value()) * kItemsPerProcess;
      for (std::uint64_t k = 0; k < values.size(); ++k) values[k] = detail::mix64(values[k] + (first + k) * 31 + sum);
    });
  }

  void expect_exact_result() {
    const auto expected = expected_values(processes, kSteps);
    const auto first = static_cast<std::size_t>(comm.original_rank().value()) * kItemsPerProcess;
    ASSERT_EQ(values.size(), kItemsPerProcess);
    for (std::size_t k = 0; k < values.size(); ++k) ASSERT_EQ(values[k], expected[first + k]) << "item " << first + k;
    EXPECT_EQ(driver.step(), kSteps);
  }

  /// Every process took the same number of checkpoints since it last joined
  /// the same plan (replacements count from their recovery).
  void expect_same_checkpoints_on_survivors() {
    const int count = comm.is_replacement() ? -1 : driver.checkpoint_stats().count;
    const int most = comm.allreduce(count, MPI_MAX);
    if (!comm.is_replacement()) {
      EXPECT_EQ(count, most);
    }
  }
};

}  // namespace

// Every 4 steps; original rank 1 dies at step 10: everyone resumes at step 8.
TEST(DriverSteps, EveryNStepsResumesAtTheLastCheckpointAfterAKill) {
  StepRun run({.every_steps = 4});
  run.go(OriginalRank{1}, 10, std::chrono::microseconds{0});
  run.expect_exact_result();
  run.expect_same_checkpoints_on_survivors();
  if (!run.comm.is_replacement()) {
    ASSERT_EQ(run.driver.recoveries().size(), 1U);
    // Steps 4, 8 (then the kill at 10), 12, ..., 36: 9 checkpoints by run().
    EXPECT_EQ(run.driver.checkpoint_stats().count, 9);
  }
}

// About every 20 ms of steps that take at least 1 to 3 ms depending on the
// process: the slowest process's step time sets the plan for all, so the
// checkpoints fall on the same steps everywhere. A step takes at least 3 ms
// on the slowest process, so an interval is at most 7 steps: at least 2
// checkpoints before the kill at step 21 (no upper bound: on a loaded machine
// a step may take longer than the interval).
TEST(DriverSteps, AnIntervalInSecondsIsTheSameStepsOnEveryProcess) {
  StepRun run({.every_seconds = 0.02});
  const auto pause = std::chrono::microseconds{1000 * (1 + run.comm.original_rank().value() % 3)};
  run.go(OriginalRank{2}, 21, pause);
  run.expect_exact_result();
  run.expect_same_checkpoints_on_survivors();
  if (!run.comm.is_replacement()) {
    EXPECT_GE(run.driver.checkpoint_stats().count, 2);
  }
}

// An interval far longer than the whole run: no checkpoint but the first.
TEST(DriverSteps, AnIntervalLongerThanTheRunTakesNoCheckpoint) {
  StepRun run({.every_seconds = 1000.0});
  run.go(OriginalRank{-1}, 0, std::chrono::microseconds{100});
  run.expect_exact_result();
  EXPECT_EQ(run.driver.checkpoint_stats().count, 0);
}

// Young/Daly's interval from a mean time between failures and the measured
// checkpoint cost: still the same steps everywhere, and a kill is recovered.
TEST(DriverSteps, YoungDalyFromAnMtbfIsTheSameStepsOnEveryProcess) {
  StepRun run({.mtbf_seconds = 2.0});
  const auto pause = std::chrono::microseconds{500 * (1 + run.comm.original_rank().value() % 2)};
  run.go(OriginalRank{1}, 17, pause);
  run.expect_exact_result();
  run.expect_same_checkpoints_on_survivors();
}

// DriverConfig::inject_faults: the plan in REPRISE_FAULTS kills original rank
// 1 before step 10 without the step doing anything; its replacement (which
// never applies the plan) resumes at step 8 with the others.
TEST(DriverSteps, InjectFaultsCarriesOutThePlanBeforeItsStep) {
  ::setenv("REPRISE_FAULTS", "1@10", 1);
  StepRun run({.every_steps = 4}, true);
  run.go(OriginalRank{-1}, 0, std::chrono::microseconds{0});
  ::unsetenv("REPRISE_FAULTS");
  run.expect_exact_result();
  if (!run.comm.is_replacement()) {
    ASSERT_EQ(run.driver.recoveries().size(), 1U);
    EXPECT_EQ(run.driver.recoveries()[0].lost, std::vector<OriginalRank>{OriginalRank{1}});
  }
}

// A plan the driver cannot carry out is refused on construction, naming the
// variable: a rank the job never had, a node fault, a malformed plan.
TEST(DriverSteps, InjectFaultsRefusesAPlanItCannotCarryOut) {
  Comm comm = Comm::world();
  for (const char* plan : {"9@3", "node1@3", "1@three"}) {
    ::setenv("REPRISE_FAULTS", plan, 1);
    Checkpoint checkpoint{comm};
    try {
      Driver driver(comm, checkpoint, {.cadence = {.every_steps = 2}, .inject_faults = true});
      ADD_FAILURE() << "REPRISE_FAULTS=" << plan << " was accepted";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("REPRISE_FAULTS"), std::string::npos) << error.what();
    }
  }
  ::unsetenv("REPRISE_FAULTS");
  Checkpoint checkpoint{comm};
  EXPECT_NO_THROW(Driver(comm, checkpoint, {.cadence = {.every_steps = 2}, .inject_faults = true}));
}

// No cadence set: about every Cadence::kDefaultSeconds (10 s) of steps, far
// longer than this run, so no checkpoint but the first, to which a kill
// rolls every process back.
TEST(DriverSteps, NoCadenceIsTheDefaultIntervalAndAKillRollsBackToTheStart) {
  StepRun run({});
  run.go(OriginalRank{1}, 10, std::chrono::microseconds{100});
  run.expect_exact_result();
  if (!run.comm.is_replacement()) {
    ASSERT_EQ(run.driver.recoveries().size(), 1U);
    EXPECT_EQ(run.driver.checkpoint_stats().count, 0);
  }
}

TEST(DriverSteps, TwoCadencesANegativeIntervalOrNegativeSnapshotsAreRefused) {
  Comm comm = Comm::world();
  Checkpoint two_checkpoint{comm};
  Driver two(comm, two_checkpoint, {.cadence = {.every_steps = 2, .every_seconds = 1.0}});
  EXPECT_THROW(two.run(3, [](std::uint64_t) {}), UsageError);
  Checkpoint negative_checkpoint{comm};
  EXPECT_THROW(Driver(comm, negative_checkpoint, {.cadence = {.every_seconds = -1.0}}), UsageError);
  Checkpoint snapshots_checkpoint{comm};
  EXPECT_THROW(Driver(comm, snapshots_checkpoint, {.cadence = {.every_steps = 2, .snapshots_per_interval = -1}}),
               UsageError);
}

// A plain value (a struct of scalars, an array) is restored in place.
TEST(DriverSteps, APlainValueIsProtectedInPlace) {
  Comm comm = Comm::world();
  struct Position {
    std::int64_t step;
    double time;
  };
  Position position{7, 0.25};
  std::array<int, 3> counts{1, 2, 3};
  Checkpoint checkpoint{comm};
  checkpoint.protect("position", position);
  checkpoint.protect("counts", counts);
  checkpoint.checkpoint();
  position = {99, 9.5};
  counts = {0, 0, 0};
  checkpoint.restore();
  EXPECT_EQ(position.step, 7);
  EXPECT_EQ(position.time, 0.25);
  EXPECT_EQ(counts, (std::array<int, 3>{1, 2, 3}));
}

// Original rank 1's step raises an error of its own (not a process failure)
// at step 3, a step that communicates nothing, while the others go on into
// the checkpoint before step 4 and wait there for it: they stop as soon as it
// revokes, told that another process ended with an error, not after the
// checkpoint's join timeout (60 s here) with a Timeout of their own.
TEST(DriverSteps, AnErrorOfItsOwnOnOneProcessStopsOthersWaitingInTheCheckpoint) {
  Comm comm = Comm::world();
  std::uint64_t value = 0;
  Checkpoint checkpoint{comm, {.copies = 2, .join_timeout_seconds = 60}};
  checkpoint.protect("value", value);
  Driver driver(comm, checkpoint, {.cadence = {.every_steps = 2}});
  const OriginalRank thrower{1};
  reprise::test::expect_run_ended_by(comm, thrower, [&] {
    driver.run(10, [&](std::uint64_t step) {
      if (comm.original_rank() == thrower && step == 3) throw UsageError("bad input on #1 (thrown on purpose)");
      ++value;
    });
  });
  EXPECT_TRUE(driver.recoveries().empty());
}
