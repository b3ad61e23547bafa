// Live migration (Migration): processes move to new ones at a safe point,
// asked by request(), by a signal, or several at once, alone or under a
// Driver, and the run ends with exactly the numbers of a run without any
// move. Every process checks every value of every process's state at the
// end (the state is a pure function of the original rank and the step).
// Processes killed during a move: the leaving one, a bystander.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/comm.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/driver.hpp"
#include "reprise/image.hpp"
#include "reprise/inject.hpp"
#include "reprise/migration.hpp"
#include "reprise/placement.hpp"

namespace reprise {
namespace {

constexpr std::size_t kValues = 3000;  // doubles per process
constexpr std::size_t kRows = 30;      // the typed array: kRows x kColumns
constexpr std::size_t kColumns = 20;

/// One process's state: a vector, a typed 2-D array and the step counter.
struct State {
  std::vector<double> values = std::vector<double>(kValues, 0.0);
  std::vector<std::int32_t> grid = std::vector<std::int32_t>(kRows * kColumns, 0);
  std::uint64_t step = 0;
  std::uint64_t mixed = 0;  // the sum of every process's step over the run (from an allreduce)

  void register_with(Checkpoint& checkpoint) {
    checkpoint.protect("values", values);
    checkpoint.protect_array<std::int32_t>("grid", grid, {kRows, kColumns});
    checkpoint.protect("step", step);
    checkpoint.protect("mixed", mixed);
  }

  /// One step of original rank `me` among `processes`.
  void advance(Comm& comm, OriginalRank me) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = values[i] * 0.5 + static_cast<double>((me.value() + 1) * (i + 1)) + static_cast<double>(step);
    }
    grid[step % grid.size()] += me.value() + static_cast<std::int32_t>(step);
    mixed += comm.allreduce(step, MPI_SUM);
    ++step;
  }
};

/// What original rank `me` holds after `steps` steps among `processes`
/// processes, computed alone.
State expected(OriginalRank me, int processes, std::uint64_t steps) {
  State state;
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < state.values.size(); ++i) {
      state.values[i] =
          state.values[i] * 0.5 + static_cast<double>((me.value() + 1) * (i + 1)) + static_cast<double>(s);
    }
    state.grid[s % state.grid.size()] += me.value() + static_cast<std::int32_t>(s);
    state.mixed += s * static_cast<std::uint64_t>(processes);
    ++state.step;
  }
  return state;
}

void expect_exact(const State& state, OriginalRank me, int processes, std::uint64_t steps) {
  const State want = expected(me, processes, steps);
  EXPECT_EQ(state.step, want.step) << "original rank " << me.value();
  EXPECT_EQ(state.mixed, want.mixed) << "original rank " << me.value();
  EXPECT_EQ(state.values, want.values) << "original rank " << me.value();
  EXPECT_EQ(state.grid, want.grid) << "original rank " << me.value();
}

/// A run of `steps` steps with a safe point before each; `ask(step, migration)`
/// may ask for moves. Returns the migrations this process saw.
using Ask = std::function<void(std::uint64_t step, OriginalRank me, Migration& migration)>;

/// What a run saw on this process.
struct Seen {
  bool migrated_in = false;  // this process was started by a move
  OriginalRank me{0};
  std::vector<MigrationRecord> history;
  std::uint64_t version = 0;  // the committed checkpoint version at the end
  int processes = 0;          // the communicator's original size
  double receive_s = 0;       // in a process started by a move: MigrationTimes::receive_s
};

/// The bytes of original rank `me`'s ballast (state that only travels).
std::vector<std::byte> ballast_of(OriginalRank me, std::size_t bytes) {
  std::vector<std::byte> ballast(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    ballast[i] = static_cast<std::byte>((i * 131U + 7U * static_cast<unsigned>(me.value())) >> 3U);
  return ballast;
}

/// `ballast_bytes`: a buffer of that many more bytes of state per process,
/// which no step changes, so that each move carries a large image.
Seen run(std::uint64_t steps, const Ask& ask, std::size_t ballast_bytes = 0) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm);
  state.register_with(checkpoint);
  std::vector<std::byte> ballast = ballast_of(comm.original_rank(), ballast_bytes);
  if (ballast_bytes > 0) checkpoint.protect("ballast", std::span<std::byte>(ballast));
  Migration migration(comm, checkpoint);
  const bool arrived = comm.migrated_in();
  if (arrived) {
    migration.arrive();
    EXPECT_GT(migration.last_times().image_open_s, 0.0);
    EXPECT_GT(migration.last_times().restore_s, 0.0);
    EXPECT_GT(migration.last_times().response_s, 0.0);
  } else {
    checkpoint.checkpoint();
  }
  while (state.step < steps) {
    migration.poll();
    ask(state.step, comm.original_rank(), migration);
    state.advance(comm, comm.original_rank());
  }
  expect_exact(state, comm.original_rank(), comm.original_size(), steps);
  EXPECT_TRUE(ballast == ballast_of(comm.original_rank(), ballast_bytes))
      << "original rank " << comm.original_rank().value();
  EXPECT_EQ(comm.size(), comm.original_size());
  return {arrived, comm.original_rank(), migration.history()};
}

}  // namespace

std::vector<OriginalRank> ranks(std::initializer_list<int> values) {
  std::vector<OriginalRank> result;
  for (const int value : values) result.emplace_back(value);
  return result;
}

TEST(Migration, OneProcessMovesOnRequestAndTheRunEndsExact) {
  const auto seen = run(12, [](std::uint64_t step, OriginalRank me, Migration& migration) {
    if (step == 4 && me == OriginalRank{1}) migration.request();
  });
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, ranks({1}));
  EXPECT_EQ(seen.migrated_in, seen.me == OriginalRank{1});
}

// Every process asks to move at the same step, eight times over, each move
// carrying 8 MiB per process: the processes of one generation meet only
// their successors.
// This hung at the third move or later (docs/RELIABILITY.md, defect 22).
TEST(Migration, EveryProcessMovesEightTimes) {
  constexpr std::uint64_t kMoves = 8;
  const auto seen = run(
      3 * kMoves + 2,
      [](std::uint64_t step, OriginalRank, Migration& migration) {
        if (step % 3 == 1 && step < 3 * kMoves) migration.request();  // every process asks for itself
      },
      std::size_t{8} << 20U);
  EXPECT_TRUE(seen.migrated_in) << "only the last processes reach the end";
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_GE(seen.history[0].epoch, kMoves);
}

// Any process may ask for others: process 0 moves 2 and 3.
TEST(Migration, OneProcessAsksForTwoOthers) {
  const auto seen = run(10, [](std::uint64_t step, OriginalRank me, Migration& migration) {
    if (step == 2 && me == OriginalRank{0}) migration.request(ranks({2, 3}));
  });
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, seen.migrated_in ? std::vector{seen.me} : ranks({2, 3}));
}

// A request for an original rank the job never had is refused at once, in
// one line naming it, and nothing moves.
TEST(Migration, ARankTheJobNeverHadIsRefused) {
  auto comm = Comm::world();
  std::uint64_t value = 7;
  Checkpoint checkpoint(comm);
  checkpoint.protect("value", value);
  Migration migration(comm, checkpoint, {.hosts = "", .signal = 0});
  const int size = comm.original_size();
  try {
    migration.request(ranks({size}));
    ADD_FAILURE() << "a request for original rank " << size << " was taken";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()), "reprise::Migration::request: original rank " + std::to_string(size) +
                                             " is not in the job (original ranks 0 to " + std::to_string(size - 1) +
                                             ")");
  }
  EXPECT_THROW(migration.request(ranks({-1})), UsageError);
  EXPECT_FALSE(migration.poll());
  EXPECT_FALSE(migration.poll());
  // As in a program, a collective before the end: a process that destroys its
  // Migration drops the round its last safe point started, which a slower
  // process still finishing that safe point would see as a revocation.
  comm.barrier();
  EXPECT_EQ(comm.size(), size);
}

// SIGUSR1 reaching two processes at the same step moves both together;
// later one of the new processes moves again.
TEST(Migration, SignalsAtTwoProcessesMoveBothThenOneMovesAgain) {
  const auto seen = run(14, [](std::uint64_t step, OriginalRank me, Migration&) {
    if (step == 3 && (me == OriginalRank{1} || me == OriginalRank{3})) std::raise(SIGUSR1);
    if (step == 8 && me == OriginalRank{3}) std::raise(SIGUSR1);
  });
  if (!seen.migrated_in) {
    ASSERT_EQ(seen.history.size(), 2U);
    EXPECT_EQ(seen.history[0].moved, ranks({1, 3}));
    EXPECT_EQ(seen.history[1].moved, ranks({3}));
  } else if (seen.me == OriginalRank{1}) {
    ASSERT_EQ(seen.history.size(), 2U);  // its arrival, then 3's second move
    EXPECT_EQ(seen.history[1].moved, ranks({3}));
  } else {
    ASSERT_EQ(seen.history.size(), 1U);  // the second new process of rank 3
  }
}

namespace {

/// A run under a Driver (checkpoints every 3 steps, respawn) with a
/// migration attached; `ask(step, me, migration)` runs inside each step.
/// `arm(comm)` may arm fault points first (in the processes the job started).
/// `every_steps`: the driver's checkpoint cadence; `ballast_bytes` as in `run`;
/// `on_arrival(checkpoint)` runs in a new process right after `arrive()`.
Seen run_driven(std::uint64_t steps, const Ask& ask, const std::function<void(const Comm&)>& arm = {},
                std::uint64_t every_steps = 3, std::size_t ballast_bytes = 0,
                const std::function<void(Checkpoint&)>& on_arrival = {}) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm);
  state.register_with(checkpoint);
  std::vector<std::byte> ballast = ballast_of(comm.original_rank(), ballast_bytes);
  if (ballast_bytes > 0) checkpoint.protect("ballast", std::span<std::byte>(ballast));
  DriverConfig config;
  config.cadence.every_steps = every_steps;
  Driver driver(comm, checkpoint, config);
  Migration migration(comm, checkpoint);
  migration.attach(driver);
  const bool arrived = comm.migrated_in();
  if (arrived) {
    migration.arrive();
    if (on_arrival) on_arrival(checkpoint);
  }
  if (arm && !comm.is_replacement()) arm(comm);
  driver.run(steps, [&](std::uint64_t step) {
    EXPECT_EQ(step, state.step);
    ask(step, comm.original_rank(), migration);
    state.advance(comm, comm.original_rank());
  });
  expect_exact(state, comm.original_rank(), comm.original_size(), steps);
  EXPECT_TRUE(ballast == ballast_of(comm.original_rank(), ballast_bytes))
      << "original rank " << comm.original_rank().value();
  EXPECT_EQ(comm.size(), comm.original_size());
  return {arrived,
          comm.original_rank(),
          migration.history(),
          checkpoint.version(),
          comm.original_size(),
          arrived ? migration.last_times().receive_s : 0.0};
}

}  // namespace

TEST(Migration, UnderADriverTheMoveHappensBetweenSteps) {
  const auto seen = run_driven(16, [](std::uint64_t step, OriginalRank me, Migration& migration) {
    if (step == 5 && me == OriginalRank{2}) migration.request();
  });
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, ranks({2}));
}

// The leaving process dies while it hands its image over: every process
// raises, the driver respawns it from its buddy's copy and rolls everyone
// back; its request died with it. The run still ends exact.
TEST(Migration, TheLeavingProcessKilledDuringAMoveIsRecovered) {
  const auto seen = run_driven(
      16,
      [](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 5 && me == OriginalRank{2}) migration.request();
      },
      [](const Comm&) { inject::arm("comm.migrate.handover", OriginalRank{2}); });
  EXPECT_TRUE(seen.history.empty());
  EXPECT_FALSE(seen.migrated_in);
}

// A bystander dies during the move: the driver respawns it, and the request
// still stands, so the move happens after the recovery.
TEST(Migration, ABystanderKilledDuringAMoveIsRecoveredAndTheMoveRetried) {
  const auto seen = run_driven(
      20,
      [](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 5 && me == OriginalRank{2} && migration.history().empty()) migration.request();
      },
      [](const Comm&) { inject::arm("comm.migrate.handover", OriginalRank{0}); });
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, ranks({2}));
}

namespace {

/// Original rank 2 asks to move at step 5 (the move is at the safe point
/// before step 7, and spawning its successor takes about a second here);
/// 300 ms into step 6, on a thread, `victim` dies: during the spawn. Only
/// the processes the job started kill or ask; a move that failed is asked
/// again after the rollback.
Seen run_killed_while_spawning(int victim) {
  bool first_generation = false;
  return run_driven(
      20,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 5 && me == OriginalRank{2} && migration.history().empty()) migration.request();
        if (step == 6 && me == OriginalRank{victim} && first_generation) {
          std::thread([me] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            inject::kill_self(me);
          }).detach();
        }
      },
      [&](const Comm&) { first_generation = true; });
}

}  // namespace

// A process that neither moves nor spawns dies while the successor is
// spawned: the spawn ends (one parent spawns alone), the agreement after
// it fails everywhere, the driver recovers, the move is asked again.
TEST(Migration, ABystanderKilledWhileTheSuccessorIsSpawnedIsRecovered) { (void)run_killed_while_spawning(1); }

// The parent that spawns (rank 0) dies while it spawns: the others recover
// without it, and the successor it was starting gives up.
TEST(Migration, TheProcessThatSpawnsKilledWhileItSpawnsIsRecovered) { (void)run_killed_while_spawning(0); }

// The leaving process dies while its successor is spawned: its request dies
// with it, the driver respawns it from its copies.
TEST(Migration, TheLeavingProcessKilledWhileItsSuccessorIsSpawnedIsRecovered) { (void)run_killed_while_spawning(2); }

// The successor dies inside its MPI_Init (REPRISE_TEST_KILL_IN_INIT): the
// spawn never ends, the parent that spawned gives up after
// REPRISE_SPAWN_TIMEOUT, every process raises, the driver recovers, and the
// move asked again spawns from another parent.
TEST(Migration, ASuccessorKilledWhileItStartsIsGivenUpAndTheMoveRetried) {
  const auto seen = run_driven(16, [](std::uint64_t step, OriginalRank me, Migration& migration) {
    if (step == 5 && me == OriginalRank{2} && migration.history().empty()) migration.request();
  });
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, ranks({2}));
}

namespace {

/// The slots holding original rank `owner`'s checkpoint copies (slots in
/// rank order on one node, two copies).
std::vector<Slot> holders_of(int owner, int processes) {
  const Placement placement({.blocks = static_cast<std::uint64_t>(processes),
                             .slots = processes,
                             .copies = 2,
                             .node_of_slot = std::vector<int>(static_cast<std::size_t>(processes), 0)});
  return placement.holders(BlockId{static_cast<std::uint64_t>(owner)});
}

bool holds(const std::vector<Slot>& holders, int rank) {
  return std::find(holders.begin(), holders.end(), Slot{rank}) != holders.end();
}

/// The original rank whose state has its second copy on `mover`'s slot, or -1.
int victim_of(int mover, int processes) {
  for (int owner = 0; owner < processes; ++owner) {
    if (owner != mover && holds(holders_of(owner, processes), mover)) return owner;
  }
  return -1;
}

/// What each process saw of a run where `mover` moved once and `replaced`
/// was killed after the move: its replacement saw no move.
void expect_one_move(const Seen& seen, int mover, int replaced) {
  if (seen.me == OriginalRank{replaced}) {
    EXPECT_TRUE(seen.history.empty()) << "the replacement came after the move";
  } else {
    ASSERT_EQ(seen.history.size(), 1U);
    EXPECT_EQ(seen.history[0].moved, ranks({mover}));
  }
}

}  // namespace

/// The original rank holding the other copy of `mover`'s state (two copies), or -1.
int other_holder_of(int mover, int processes) {
  for (const Slot slot : holders_of(mover, processes)) {
    if (slot.value() != mover) return slot.value();
  }
  return -1;
}

// The move takes no checkpoint (the leaving process carries the copies it
// held): the driver's plan goes on (checkpoints every 10 steps). Asked at
// step 4, the move happens at the safe point before step 6; in that step,
// the process whose other copy the predecessor held is killed:
// the rollback to step 0 needs exactly the copy the new process carried.
TEST(Migration, TheCopiesTheLeavingProcessHeldTravelWithItWithoutACheckpoint) {
  constexpr int kMover = 2;
  int victim = -1;  // set in the processes the job started
  const auto seen = run_driven(
      14,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && me == OriginalRank{kMover} && migration.history().empty()) migration.request();
        if (step == 6 && me == OriginalRank{victim}) inject::kill_self(me);
      },
      [&](const Comm& comm) {
        victim = victim_of(kMover, comm.size());
        ASSERT_GE(victim, 0);
      },
      10);
  // Versions: step 0, the restore's after the respawn, step 10.
  EXPECT_EQ(seen.version, 3U) << "the move took no checkpoint";
  expect_one_move(seen, kMover, victim_of(kMover, seen.processes));
}

// Right after a move, in the first step after it, the process holding the
// other copy of the moved state is killed: one failure must lose nothing,
// so the new process holds its predecessor's copy of that state. The driver
// respawns the victim and rolls everyone back; the run ends exact.
TEST(Migration, TheOtherHolderOfTheMovedStateKilledRightAfterTheMoveLosesNothing) {
  constexpr int kMover = 2;
  int victim = -1;  // set in the processes the job started
  const auto seen = run_driven(
      14,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && me == OriginalRank{kMover} && migration.history().empty()) migration.request();
        if (step == 6 && me == OriginalRank{victim}) inject::kill_self(me);
      },
      [&](const Comm& comm) {
        victim = other_holder_of(kMover, comm.size());
        ASSERT_GE(victim, 0);
      },
      10);
  EXPECT_EQ(seen.version, 3U) << "the move took no checkpoint";
  expect_one_move(seen, kMover, other_holder_of(kMover, seen.processes));
}

// A move with 3 MiB of ballast
// (several chunks and a short last one): the ballast's chunks are received
// straight into the new process's registered memory after the move, and
// every byte, the ballast's included, is exact at the end.
TEST(Migration, ALargeStateLandsInTheNewProcessesMemory) {
  constexpr std::size_t kBallast = (std::size_t{3} << 20U) + 4099;  // several chunks, a short last one
  const auto seen = run_driven(
      12,
      [](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && me == OriginalRank{1} && migration.history().empty()) migration.request();
      },
      {}, 3, kBallast);
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_FALSE(seen.history[0].checkpointed) << "the copies travel: no checkpoint ends the move";
  if (seen.migrated_in) {
    EXPECT_GT(seen.receive_s, 0.0) << "the ballast came in deferred parts";
  }
}

namespace {

constexpr std::size_t kBallast = (std::size_t{3} << 20U) + 4099;

/// A driven run with 3 MiB of ballast where the first process of original
/// rank 1 (not a replacement, which would move again after the rollback)
/// asks to move at step 4; `arm` runs in the processes the job started.
Seen run_moving_rank_one_once(const std::function<void()>& arm) {
  bool first_generation = false;
  return run_driven(
      12,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && me == OriginalRank{1} && first_generation) migration.request();
      },
      [&](const Comm&) {
        first_generation = true;
        arm();
      },
      3, kBallast);
}

}  // namespace

// The leaving process dies once the move is agreed, before it sent the
// deferred parts: the new process gives up, the driver respawns the rank
// from the committed checkpoint's copies and rolls everyone back, and the
// run ends exact.
TEST(Migration, TheLeavingProcessKilledBeforeItsLargePiecesArrivedIsRecovered) {
  const auto seen = run_moving_rank_one_once([] { inject::arm("comm.migrate.deferred", OriginalRank{1}); });
  EXPECT_FALSE(seen.migrated_in) << "the process started by the move must have given up";
}

// The new process dies before it received the large pieces
// (REPRISE_TEST_ARM arms it there, see the CMake file): the leaving process
// leaves all the same, the driver respawns the rank from the committed
// checkpoint's copies and rolls back, and the run ends exact.
TEST(Migration, TheNewProcessKilledBeforeItsLargePiecesArrivedIsRecovered) {
  const auto seen = run_moving_rank_one_once([] {});
  EXPECT_FALSE(seen.migrated_in) << "the process started by the move must have died";
}

namespace {

/// A rank other than 0 whose checkpoint copies all lie on ranks other than
/// 0, or -1: if every process but 0 moves, its copies travel with them.
int carried_victim(int processes) {
  for (int owner = 1; owner < processes; ++owner) {
    if (!holds(holders_of(owner, processes), 0)) return owner;
  }
  return -1;
}

/// A driven run of 4 processes with 3 MiB of ballast where every process
/// the job started but rank 0 asks to move at step 4, so every holder of
/// some state moves and carries its checkpoint copies.
/// `at_step(step, me, victim, migration)` runs inside each step,
/// `arm(victim)` in the processes the job started, `on_arrival` as in
/// `run_driven`; `victim` is `carried_victim`.
Seen run_moving_all_but_rank_zero(const std::function<void(std::uint64_t, OriginalRank, int, Migration&)>& at_step,
                                  const std::function<void(int)>& arm = {},
                                  const std::function<void(Checkpoint&)>& on_arrival = {}) {
  constexpr int kProcesses = 4;
  const int victim = carried_victim(kProcesses);
  bool first_generation = false;
  return run_driven(
      14,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && first_generation && me != OriginalRank{0}) migration.request();
        at_step(step, me, victim, migration);
      },
      [&](const Comm& comm) {
        ASSERT_EQ(comm.size(), kProcesses);
        ASSERT_GE(victim, 1);
        first_generation = true;
        if (arm) arm(victim);
      },
      10, kBallast, on_arrival);
}

/// What each process saw of `run_moving_all_but_rank_zero` where the victim
/// was lost and replaced: one move that carried the copies and took no
/// checkpoint (the versions are step 0's, the restore's and step 10's).
void expect_copies_carried(const Seen& seen) {
  EXPECT_EQ(seen.version, 3U) << "the move took no checkpoint";
  if (seen.me == OriginalRank{carried_victim(seen.processes)} && !seen.migrated_in) {
    EXPECT_TRUE(seen.history.empty()) << "the replacement came after the move";
    return;
  }
  EXPECT_EQ(seen.migrated_in, seen.me != OriginalRank{0});
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_EQ(seen.history[0].moved, seen.migrated_in ? std::vector{seen.me} : ranks({1, 2, 3}));
  EXPECT_TRUE(seen.history[0].copies_carried);
  EXPECT_FALSE(seen.history[0].checkpointed);
}

}  // namespace

// Every process but rank 0 moves, so every holder of some state moves: each
// carries the checkpoint copies it holds to its successor, and no
// checkpoint ends the move. Then a new process whose state's copies all
// moved is killed: the driver respawns it and rolls everyone back to step
// 0, which needs exactly the copy of its state that another new process
// carried.
TEST(Migration, EveryHolderMovesAndTheCopiesTravelWithThem) {
  const auto seen =
      run_moving_all_but_rank_zero([](std::uint64_t step, OriginalRank me, int victim, Migration& migration) {
        // Only the process that arrived by the move has seen one (not its replacement).
        if (step == 7 && !migration.history().empty() && me == OriginalRank{victim}) inject::kill_self(me);
      });
  expect_copies_carried(seen);
}

// The same move, and one leaving process dies before its large pieces (its
// state and the copies it carries) left: its successor gives up, and the
// driver respawns the rank from the copy of its state that another leaving
// process carried, and rolls everyone back.
TEST(Migration, ALeavingProcessKilledWhileTheCopiesTravelLosesNothing) {
  const auto seen =
      run_moving_all_but_rank_zero([](std::uint64_t, OriginalRank, int, Migration&) {},
                                   [](int victim) { inject::arm("comm.migrate.deferred", OriginalRank{victim}); });
  expect_copies_carried(seen);
}

// The same move, and one leaving process dies at `fault_point`, once its
// successor has its state: the successor runs on without the copies it
// carried (each state keeps its other copy), holds none until the
// checkpoint at step 10, and the run ends exact.
void expect_only_the_carried_copies_lost(const char* fault_point) {
  std::size_t held_on_arrival = 0;
  const auto seen = run_moving_all_but_rank_zero(
      [](std::uint64_t, OriginalRank, int, Migration&) {},
      [&](int victim) { inject::arm(fault_point, OriginalRank{victim}); },
      [&](Checkpoint& checkpoint) { held_on_arrival = detail::CheckpointInternals::held_copies(checkpoint).size(); });
  EXPECT_EQ(seen.version, 2U) << "step 0's and step 10's: the move took no checkpoint and nothing was restored";
  EXPECT_EQ(seen.migrated_in, seen.me != OriginalRank{0}) << "the successor whose predecessor died must run on";
  ASSERT_EQ(seen.history.size(), 1U);
  EXPECT_TRUE(seen.history[0].copies_carried);
  if (seen.migrated_in) {
    EXPECT_EQ(held_on_arrival, seen.me == OriginalRank{carried_victim(seen.processes)} ? 0U : 2U)
        << "original rank " << seen.me.value();
  }
}

// Killed before the copies are sent.
TEST(Migration, ALeavingProcessKilledAfterItsStateLeftCostsOnlyTheCopiesItCarried) {
  expect_only_the_carried_copies_lost("comm.migrate.rest");
}

// Killed once the copies were sent, before their checksums (the trailer):
// copies that cannot be checked are not taken.
TEST(Migration, CarriedCopiesWhoseChecksumsNeverCameAreNotTaken) {
  expect_only_the_carried_copies_lost("comm.migrate.trailer");
}

// A large piece damaged between the image's build and its transfer (its
// checksum was taken before a value changed): the new process refuses it in
// arrive() with a CorruptData naming the piece. The image is built here by
// hand (ImageBuilder, the piece referenced and deferred, as Migration does),
// so that the change can come in between.
TEST(Migration, ALargePieceDamagedInTransitIsRefusedOnArrival) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  if (comm.migrated_in()) {
    std::vector<double> values;
    Checkpoint checkpoint(comm);
    checkpoint.protect("values", values);
    Migration migration(comm, checkpoint);
    try {
      migration.arrive();
      ADD_FAILURE() << "a damaged piece was taken";
    } catch (const CorruptData& error) {
      EXPECT_NE(std::string(error.what()).find("piece 'values' does not match its checksum"), std::string::npos)
          << error.what();
    }
    return;
  }
  const bool mine = comm.original_rank() == leaving;
  std::vector<double> values(kBallast / sizeof(double));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) * 0.25 + 1;
  ImageInfo info;
  info.original_rank = leaving;
  info.world_size = comm.size();
  ImageBuilder builder(info, 0, 1);
  builder.add_referenced("values", std::as_bytes(std::span(values)), ArrayShape{ElementType::kFloat64, {}});
  // What Migration's images say first: no copies carried, the move ends with a checkpoint.
  const std::uint8_t copies_retaken[1] = {0};
  builder.add("reprise::Migration copies", std::as_bytes(std::span(copies_retaken)),
              ArrayShape{ElementType::kUint8, {}});
  const ImagePieces image = std::move(builder).finish_pieces();
  ASSERT_FALSE(image.referenced.empty());
  values[values.size() / 2] += 1;  // after the checksum, before the transfer
  auto moved = detail::CommInternals::migrate_gathered(
      comm, std::vector{leaving}, mine ? image.pieces : std::vector<std::span<const std::byte>>{}, {},
      mine ? std::span<const std::size_t>(image.referenced) : std::span<const std::size_t>());
  if (mine) detail::CommInternals::leave_after_migration(comm);
  ASSERT_TRUE(moved.has_value());
}

namespace {

/// What each process saw of a run where every process the job started
/// moved at once, carrying its checkpoint copies, and `replaced` was killed
/// later: its replacement saw no move; the others arrived by the move
/// (`moves` records in all: their own arrival, then the later ones).
void expect_everyone_moved(const Seen& seen, int replaced, std::size_t moves) {
  EXPECT_EQ(seen.version, 3U) << "step 0's, the restore's and step 10's: no move took a checkpoint";
  if (seen.me == OriginalRank{replaced}) {
    EXPECT_FALSE(seen.migrated_in);
    EXPECT_TRUE(seen.history.empty()) << "the replacement came after the moves";
    return;
  }
  EXPECT_TRUE(seen.migrated_in) << "original rank " << seen.me.value();
  ASSERT_EQ(seen.history.size(), moves) << "original rank " << seen.me.value();
  EXPECT_EQ(seen.history[0].moved, std::vector{seen.me});
  EXPECT_TRUE(seen.history[0].copies_carried);
  EXPECT_FALSE(seen.history[0].checkpointed);
}

}  // namespace

// Every process the job started moves, so none of them is left; then a new
// process dies. Its job's other processes share memory with it and see no
// error of their own: they learn of the failure only from the runtime,
// which tells the processes of a job started by MPI_Comm_spawn only when
// launched with state_base_notify_errors (reprise-run passes it; this hung
// without it, docs/RELIABILITY.md defect 27). The driver respawns it from the copy of
// its state that another new process carried, and the run ends exact.
TEST(Migration, EveryProcessMovesThenANewOneIsKilled) {
  bool first_generation = false;
  const auto seen = run_driven(
      14,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (step == 4 && first_generation) migration.request();
        if (step == 7 && !migration.history().empty() && me == OriginalRank{1}) inject::kill_self(me);
      },
      [&](const Comm&) { first_generation = true; }, 10);
  expect_everyone_moved(seen, 1, 1);
}

// Every process moves, then original rank 2 moves again, alone, to a job of
// its own, and dies there: the others, none of which the job started,
// learn of it and respawn it.
TEST(Migration, EveryProcessMovesThenOneMovesAloneAndIsKilled) {
  bool first_generation = false;
  std::optional<std::uint64_t> born;  // the first step this process ran
  const auto seen = run_driven(
      14,
      [&](std::uint64_t step, OriginalRank me, Migration& migration) {
        if (!born) born = step;
        if (step == 4 && first_generation) migration.request();
        const bool second_generation = *born > 4 && *born <= 6;
        if (step == 6 && me == OriginalRank{2} && second_generation) migration.request();
        if (step == 9 && me == OriginalRank{2} && *born > 6) inject::kill_self(me);
      },
      [&](const Comm&) { first_generation = true; }, 10);
  expect_everyone_moved(seen, 2, 2);
  if (seen.me != OriginalRank{2}) {
    ASSERT_EQ(seen.history.size(), 2U);
    EXPECT_EQ(seen.history[1].moved, ranks({2}));
  }
}

}  // namespace reprise
