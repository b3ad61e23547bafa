// The replay (RecoveryMode::kReplay) under real kills: a master hands a
// task to every worker each step and takes the results with MPI_ANY_SOURCE,
// in whatever order they come, then tells each worker its place in that
// order. A process is killed for real (SIGKILL) between two checkpoints; its
// replacement restarts from its checkpoint and replays from its peers' logs
// and its buddy's determinants while the others keep their state. Checked:
// every survivor ran each step exactly once (never rolled back), the
// replaced process took the same decisions as the process it replaces (the
// places the master told and the order it recorded agree on every process,
// every step), and every chain of results equals the one recomputed from
// that order.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/inject.hpp"
#include "reprise/msglog.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kSteps = 24;
constexpr std::uint64_t kCheckpointEvery = 6;
constexpr int kTaskTag = 1;
constexpr int kResultTag = 2;
constexpr int kPlaceTag = 3;

std::uint64_t task_of(std::uint64_t step, int worker) {
  return detail::mix64(step * 1000 + static_cast<std::uint64_t>(worker));
}
std::uint64_t result_of(std::uint64_t task, int worker) {
  return detail::mix64(task ^ static_cast<std::uint64_t>(worker));
}

/// A process killed for real: original rank `rank` at step `step`, in the
/// process that holds that rank when `epoch` recoveries have happened (0:
/// the original process; 1: its replacement after one recovery, ...).
struct Kill {
  int rank = 0;
  std::uint64_t step = 0;
  std::uint64_t epoch = 0;
};

/// How the master takes the results, each way non-deterministic: a
/// receive from MPI_ANY_SOURCE, MPI_Waitany or MPI_Testsome over a receive
/// per worker, or MPI_Iprobe polling (then a receive from the source found).
enum class Gather { kAnySource, kWaitany, kTestsome, kIprobe };

/// One process's protected state: a chain over what it received, and per
/// step the order the master took the results in (master) or the place it
/// was told (worker).
struct State {
  std::vector<std::uint64_t> chain{0};
  std::vector<std::int32_t> record;
};

class MasterWorker {
 public:
  MasterWorker(Comm& comm, Checkpoint& checkpoint, Gather gather)
      : _comm(comm), _workers(comm.size() - 1), _gather(gather) {
    _state.record.assign(kSteps * static_cast<std::size_t>(_workers), -1);
    checkpoint.protect("chain", _state.chain);
    checkpoint.protect("record", _state.record);
  }

  /// Step `step`; a process named by `kills` dies there (a worker after taking its task).
  void step(std::uint64_t step, const std::vector<Kill>& kills) {
    _executed.push_back(step);
    const MPI_Comm raw = _comm.raw();
    const int me = _comm.rank().value();
    const bool dies = std::ranges::any_of(
        kills, [&](const Kill& kill) { return kill.rank == me && kill.step == step && kill.epoch == _comm.epoch(); });
    if (me == 0) {
      if (dies) inject::kill_self(_comm.original_rank());
      master_step(step, raw);
      return;
    }
    std::uint64_t task = 0;
    _comm.check(MPI_Recv(&task, 1, MPI_UINT64_T, 0, kTaskTag, raw, MPI_STATUS_IGNORE), "MPI_Recv task");
    EXPECT_EQ(task, task_of(step, me));
    if (dies) inject::kill_self(_comm.original_rank());
    const std::uint64_t result = result_of(task, me);
    _comm.check(MPI_Send(&result, 1, MPI_UINT64_T, 0, kResultTag, _comm.raw()), "MPI_Send result");
    std::int32_t place = -1;
    _comm.check(MPI_Recv(&place, 1, MPI_INT32_T, 0, kPlaceTag, _comm.raw(), MPI_STATUS_IGNORE), "MPI_Recv place");
    _state.record[step * static_cast<std::size_t>(_workers)] = place;
    _state.chain[0] = detail::mix64(_state.chain[0] ^ static_cast<std::uint64_t>(place) ^ step);
  }

  [[nodiscard]] const State& state() const { return _state; }
  [[nodiscard]] const std::vector<std::uint64_t>& executed() const { return _executed; }

 private:
  void master_step(std::uint64_t step, MPI_Comm raw) {
    for (int w = 1; w <= _workers; ++w) {
      const std::uint64_t task = task_of(step, w);
      _comm.check(MPI_Send(&task, 1, MPI_UINT64_T, w, kTaskTag, raw), "MPI_Send task");
    }
    std::vector<std::int32_t> place(static_cast<std::size_t>(_workers) + 1, -1);
    int k = 0;
    const auto take = [&](int worker, std::uint64_t result) {
      EXPECT_EQ(result, result_of(task_of(step, worker), worker));
      _state.record[step * static_cast<std::size_t>(_workers) + static_cast<std::size_t>(k)] = worker;
      place[static_cast<std::size_t>(worker)] = k;
      _state.chain[0] = detail::mix64(_state.chain[0] ^ result ^ static_cast<std::uint64_t>(k));
      ++k;
    };
    if (_gather == Gather::kAnySource || _gather == Gather::kIprobe) {
      while (k < _workers) {
        std::uint64_t result = 0;
        MPI_Status status;
        int source = MPI_ANY_SOURCE;
        if (_gather == Gather::kIprobe) {
          int found = 0;
          while (found == 0) {
            _comm.check(MPI_Iprobe(MPI_ANY_SOURCE, kResultTag, _comm.raw(), &found, &status), "MPI_Iprobe");
          }
          source = status.MPI_SOURCE;
        }
        _comm.check(MPI_Recv(&result, 1, MPI_UINT64_T, source, kResultTag, _comm.raw(), &status), "MPI_Recv result");
        take(status.MPI_SOURCE, result);
      }
    } else {
      std::vector<std::uint64_t> results(static_cast<std::size_t>(_workers));
      std::vector<MPI_Request> requests(static_cast<std::size_t>(_workers));
      for (int w = 1; w <= _workers; ++w) {
        _comm.check(MPI_Irecv(&results[static_cast<std::size_t>(w - 1)], 1, MPI_UINT64_T, w, kResultTag, _comm.raw(),
                              &requests[static_cast<std::size_t>(w - 1)]),
                    "MPI_Irecv result");
      }
      std::vector<int> indices(requests.size());
      while (k < _workers) {
        int done = 0;
        if (_gather == Gather::kWaitany) {
          _comm.check(MPI_Waitany(_workers, requests.data(), indices.data(), MPI_STATUS_IGNORE), "MPI_Waitany");
          done = 1;
        } else {
          _comm.check(MPI_Testsome(_workers, requests.data(), &done, indices.data(), MPI_STATUSES_IGNORE),
                      "MPI_Testsome");
        }
        for (int d = 0; d < done; ++d) {
          take(indices[static_cast<std::size_t>(d)] + 1,
               results[static_cast<std::size_t>(indices[static_cast<std::size_t>(d)])]);
        }
      }
    }
    for (int w = 1; w <= _workers; ++w) {
      _comm.check(MPI_Send(&place[static_cast<std::size_t>(w)], 1, MPI_INT32_T, w, kPlaceTag, _comm.raw()),
                  "MPI_Send place");
    }
  }

  Comm& _comm;
  int _workers;
  Gather _gather;
  State _state;
  std::vector<std::uint64_t> _executed;  // not protected: what this process ran
};

/// Every process's record and chain at the master, checked against each
/// other: the place each worker was told is its place in the master's
/// order, and each chain is the one that order gives.
void expect_consistent(Comm& comm, const State& state) {
  const int workers = comm.size() - 1;
  const std::size_t per = state.record.size();
  std::vector<std::int32_t> records(per * static_cast<std::size_t>(comm.size()));
  comm.check(MPI_Allgather(state.record.data(), static_cast<int>(per), MPI_INT32_T, records.data(),
                           static_cast<int>(per), MPI_INT32_T, comm.raw()),
             "MPI_Allgather");
  std::vector<std::uint64_t> chains(static_cast<std::size_t>(comm.size()));
  comm.check(MPI_Allgather(state.chain.data(), 1, MPI_UINT64_T, chains.data(), 1, MPI_UINT64_T, comm.raw()),
             "MPI_Allgather");
  std::uint64_t master_chain = 0;
  std::vector<std::uint64_t> worker_chain(static_cast<std::size_t>(comm.size()), 0);
  for (std::uint64_t step = 0; step < kSteps; ++step) {
    for (int k = 0; k < workers; ++k) {
      const std::int32_t worker = records[step * static_cast<std::size_t>(workers) + static_cast<std::size_t>(k)];
      ASSERT_TRUE(worker >= 1 && worker <= workers) << "step " << step << " place " << k;
      const std::int32_t told =
          records[static_cast<std::size_t>(worker) * per + step * static_cast<std::size_t>(workers)];
      EXPECT_EQ(told, k) << "worker " << worker << " at step " << step;
      master_chain =
          detail::mix64(master_chain ^ result_of(task_of(step, worker), worker) ^ static_cast<std::uint64_t>(k));
      auto& chain = worker_chain[static_cast<std::size_t>(worker)];
      chain = detail::mix64(chain ^ static_cast<std::uint64_t>(k) ^ step);
    }
  }
  EXPECT_EQ(chains[0], master_chain);
  for (int w = 1; w <= workers; ++w)
    EXPECT_EQ(chains[static_cast<std::size_t>(w)], worker_chain[static_cast<std::size_t>(w)]);
}

/// Where a replacement restarts: from its checkpoint (the Driver sends no
/// snapshots), from a snapshot its predecessor sent after it, or either (a
/// snapshot serves only if every survivor consumed what was sent before it).
enum class Restart { kCheckpoint, kSnapshot, kEither };

/// A replacement ran each step once from where `restart` says up to the end.
void expect_restarted(const Comm& comm, const std::vector<Kill>& kills, const std::vector<std::uint64_t>& executed,
                      Restart restart) {
  ASSERT_FALSE(executed.empty());
  const auto last = std::ranges::find_if(kills.rbegin(), kills.rend(),
                                         [&](const Kill& kill) { return kill.rank == comm.original_rank().value(); });
  ASSERT_NE(last, kills.rend());
  const std::uint64_t checkpointed = last->step / kCheckpointEvery * kCheckpointEvery;
  if (restart == Restart::kCheckpoint) {
    EXPECT_EQ(executed.front(), checkpointed) << "restarted from its checkpoint";
  }
  if (restart == Restart::kSnapshot) {
    EXPECT_GT(executed.front(), checkpointed) << "restarted from a snapshot";
  }
  EXPECT_GE(executed.front(), checkpointed);
  EXPECT_LE(executed.front(), last->step) << "restarted before the step its predecessor died in";
  for (std::size_t i = 1; i < executed.size(); ++i) EXPECT_EQ(executed[i], executed[i - 1] + 1);
  EXPECT_EQ(executed.back(), kSteps - 1);
}

/// The run under the driver in replay mode with `kills`. With `replays`,
/// each lost process replays alone (a survivor runs every step once); else
/// the one failure makes every process roll back to the checkpoint before it.
void replay_run(const std::vector<Kill>& kills, bool replays, Gather gather = Gather::kAnySource,
                Restart restart = Restart::kEither) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  MasterWorker app(comm, checkpoint, gather);
  DriverConfig config{.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}};
  if (restart == Restart::kCheckpoint) config.cadence.snapshots_per_interval = 0;
  Driver driver(comm, checkpoint, config);
  driver.run(kSteps, [&](std::uint64_t step) { app.step(step, kills); });
  expect_consistent(comm, app.state());
  const std::vector<std::uint64_t>& executed = app.executed();
  if (comm.is_replacement()) {
    expect_restarted(comm, kills, executed, restart);
    return;
  }
  const std::uint64_t failed_at = kills.front().step;
  const std::uint64_t checkpointed = failed_at / kCheckpointEvery * kCheckpointEvery;
  // Rolled back, a survivor ran the steps from the checkpoint to the failure twice.
  std::vector<std::uint64_t> expected;
  for (std::uint64_t s = 0; s < (replays ? kSteps : failed_at + 1); ++s) expected.push_back(s);
  for (std::uint64_t s = checkpointed; s < kSteps && !replays; ++s) expected.push_back(s);
  EXPECT_EQ(executed, expected);
  if (!replays) {
    ASSERT_EQ(driver.recoveries().size(), 1U);
    EXPECT_EQ(driver.recoveries()[0].mode, RecoveryMode::kRespawn);
    std::vector<OriginalRank> lost;
    for (const Kill& kill : kills) lost.emplace_back(kill.rank);
    EXPECT_EQ(driver.recoveries()[0].lost, lost);
    return;
  }
  ASSERT_EQ(driver.recoveries().size(), kills.size());
  for (std::size_t k = 0; k < kills.size(); ++k) {
    EXPECT_EQ(driver.recoveries()[k].mode, RecoveryMode::kReplay);
    EXPECT_EQ(driver.recoveries()[k].lost, std::vector<OriginalRank>{OriginalRank{kills[k].rank}});
  }
}

/// A halo exchange on a ring with an allreduce every step: each process
/// holds kCells cells; a step takes the neighbours' edge cells (two
/// MPI_Sendrecv), updates every cell, and folds the sum over all processes
/// (MPI_Allreduce) into every cell and the chain. Deterministic, so the
/// failure-free result is computed here too.
class Halo {
 public:
  static constexpr std::size_t kCells = 64;
  /// Where the victim dies in its step.
  enum class KillPoint { kStepStart, kBeforeAllreduce };

  Halo(Comm& comm, Checkpoint& checkpoint) : _comm(comm) {
    _cells = initial(comm.rank().value());
    checkpoint.protect("cells", _cells);
    checkpoint.protect("chain", _chain);
  }

  static std::vector<std::uint64_t> initial(int rank) {
    std::vector<std::uint64_t> cells(kCells);
    for (std::size_t i = 0; i < kCells; ++i) cells[i] = detail::mix64(static_cast<std::uint64_t>(rank) * kCells + i);
    return cells;
  }
  static void update(std::vector<std::uint64_t>& cells, std::uint64_t left, std::uint64_t right, std::uint64_t step) {
    std::vector<std::uint64_t> next(cells.size());
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::uint64_t l = i == 0 ? left : cells[i - 1];
      const std::uint64_t r = i + 1 == cells.size() ? right : cells[i + 1];
      next[i] = detail::mix64(l + 3 * cells[i] + 7 * r + step);
    }
    cells = std::move(next);
  }
  static void fold(std::vector<std::uint64_t>& cells, std::uint64_t& chain, std::uint64_t total) {
    for (auto& cell : cells) cell ^= total;
    chain = detail::mix64(chain ^ total);
  }

  void step(std::uint64_t step, int victim, std::uint64_t kill_at, KillPoint point) {
    _executed.push_back(step);
    const int me = _comm.rank().value();
    const int size = _comm.size();
    const bool dies = !_comm.is_replacement() && me == victim && step == kill_at;
    if (dies && point == KillPoint::kStepStart) inject::kill_self(_comm.original_rank());
    const int left = (me + size - 1) % size;
    const int right = (me + 1) % size;
    std::uint64_t from_left = 0;
    std::uint64_t from_right = 0;
    _comm.check(MPI_Sendrecv(&_cells.back(), 1, MPI_UINT64_T, right, 1, &from_left, 1, MPI_UINT64_T, left, 1,
                             _comm.raw(), MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
    _comm.check(MPI_Sendrecv(&_cells.front(), 1, MPI_UINT64_T, left, 2, &from_right, 1, MPI_UINT64_T, right, 2,
                             _comm.raw(), MPI_STATUS_IGNORE),
                "MPI_Sendrecv");
    update(_cells, from_left, from_right, step);
    std::uint64_t sum = 0;
    for (const auto cell : _cells) sum += cell;
    if (dies) inject::kill_self(_comm.original_rank());
    std::uint64_t total = 0;
    _comm.check(MPI_Allreduce(&sum, &total, 1, MPI_UINT64_T, MPI_SUM, _comm.raw()), "MPI_Allreduce");
    fold(_cells, _chain[0], total);
  }

  /// Every process's cells and chain after `steps` steps without a failure.
  static std::vector<std::vector<std::uint64_t>> failure_free(int size, std::uint64_t steps,
                                                              std::vector<std::uint64_t>& chains) {
    std::vector<std::vector<std::uint64_t>> cells;
    for (int r = 0; r < size; ++r) cells.push_back(initial(r));
    chains.assign(static_cast<std::size_t>(size), 0);
    for (std::uint64_t s = 0; s < steps; ++s) {
      std::vector<std::vector<std::uint64_t>> next = cells;
      for (int r = 0; r < size; ++r) {
        update(next[static_cast<std::size_t>(r)], cells[static_cast<std::size_t>((r + size - 1) % size)].back(),
               cells[static_cast<std::size_t>((r + 1) % size)].front(), s);
      }
      std::uint64_t total = 0;
      for (const auto& mine : next) {
        for (const auto cell : mine) total += cell;
      }
      for (int r = 0; r < size; ++r)
        fold(next[static_cast<std::size_t>(r)], chains[static_cast<std::size_t>(r)], total);
      cells = std::move(next);
    }
    return cells;
  }

  [[nodiscard]] const std::vector<std::uint64_t>& cells() const { return _cells; }
  [[nodiscard]] std::uint64_t chain() const { return _chain[0]; }
  [[nodiscard]] const std::vector<std::uint64_t>& executed() const { return _executed; }

 private:
  Comm& _comm;
  std::vector<std::uint64_t> _cells;
  std::vector<std::uint64_t> _chain{0};
  std::vector<std::uint64_t> _executed;
};

/// The halo exchange under the driver in replay mode, `victim` killed at
/// step `kill_at` where `point` says, checkpointing as `cadence` says.
void halo_run(int victim, std::uint64_t kill_at, Halo::KillPoint point,
              Cadence cadence = {.every_steps = kCheckpointEvery}, Restart restart = Restart::kEither) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  Halo app(comm, checkpoint);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = cadence});
  driver.run(kSteps, [&](std::uint64_t step) { app.step(step, victim, kill_at, point); });
  std::vector<std::uint64_t> chains;
  const auto expected = Halo::failure_free(comm.size(), kSteps, chains);
  EXPECT_EQ(app.cells(), expected[static_cast<std::size_t>(comm.rank().value())]) << "every cell, bitwise";
  EXPECT_EQ(app.chain(), chains[static_cast<std::size_t>(comm.rank().value())]);
  if (comm.is_replacement()) {
    // Where the checkpoints fall is known only with every_steps and no bound of the log.
    if (restart != Restart::kEither) expect_restarted(comm, {{victim, kill_at, 0}}, app.executed(), restart);
    return;
  }
  std::vector<std::uint64_t> once(kSteps);
  for (std::uint64_t s = 0; s < kSteps; ++s) once[s] = s;
  EXPECT_EQ(app.executed(), once) << "a survivor never runs a step twice";
  ASSERT_EQ(driver.recoveries().size(), 1U);
  EXPECT_EQ(driver.recoveries()[0].mode, RecoveryMode::kReplay);
}

/// Each step every process but 0 reads the clock (a value from outside
/// MPI), keeps it and sends it to process 0, which keeps what it got and,
/// if `answered`, answers. Process 2 dies at step 9 after sending; replayed,
/// it must read the values it had read, or its history and process 0's
/// disagree. Unanswered, processes 1 and 3 meet the failure only in the
/// checkpoint of step 12, between two steps: they go on from there.
void clock_run(bool answered) {
  constexpr std::uint64_t kKillAt = 9;
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  const auto size = static_cast<std::size_t>(comm.size());
  std::vector<std::uint64_t> history(kSteps * size, 0);  // process 0: what each sent; others: what they read
  checkpoint.protect("history", history);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
  std::vector<std::uint64_t> executed;
  driver.run(kSteps, [&](std::uint64_t step) {
    executed.push_back(step);
    const int me = comm.rank().value();
    if (me == 0) {
      for (int p = 1; p < comm.size(); ++p) {
        comm.check(MPI_Recv(&history[step * size + static_cast<std::size_t>(p)], 1, MPI_UINT64_T, p, 1, comm.raw(),
                            MPI_STATUS_IGNORE),
                   "MPI_Recv");
      }
      for (int p = 1; p < comm.size() && answered; ++p) {
        comm.check(MPI_Send(&step, 1, MPI_UINT64_T, p, 2, comm.raw()), "MPI_Send");
      }
      return;
    }
    const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const std::uint64_t read = msglog::replayable(now);
    history[step * size + static_cast<std::size_t>(me)] = read;
    comm.check(MPI_Send(&read, 1, MPI_UINT64_T, 0, 1, comm.raw()), "MPI_Send");
    if (me == 2 && step == kKillAt && comm.epoch() == 0) inject::kill_self(comm.original_rank());
    if (!answered) return;
    std::uint64_t answer = 0;
    comm.check(MPI_Recv(&answer, 1, MPI_UINT64_T, 0, 2, comm.raw(), MPI_STATUS_IGNORE), "MPI_Recv");
    EXPECT_EQ(answer, step);
  });
  std::vector<std::uint64_t> all(history.size() * size);
  comm.check(MPI_Allgather(history.data(), static_cast<int>(history.size()), MPI_UINT64_T, all.data(),
                           static_cast<int>(history.size()), MPI_UINT64_T, comm.raw()),
             "MPI_Allgather");
  for (std::size_t p = 1; p < size; ++p) {
    for (std::uint64_t step = 0; step < kSteps; ++step) {
      EXPECT_EQ(all[p * history.size() + step * size + p], all[step * size + p]) << "process " << p << " step " << step;
    }
  }
  if (!comm.is_replacement()) {
    std::vector<std::uint64_t> once(kSteps);
    for (std::uint64_t step = 0; step < kSteps; ++step) once[step] = step;
    EXPECT_EQ(executed, once) << "a survivor never runs a step twice";
    ASSERT_EQ(driver.recoveries().size(), 1U);
    EXPECT_EQ(driver.recoveries()[0].mode, RecoveryMode::kReplay);
  }
}

/// The byte `at` of what process `sender` sends its neighbours at `step`.
std::uint8_t big_byte(std::uint64_t step, int sender, std::size_t at) {
  return static_cast<std::uint8_t>(step * 31 + static_cast<std::uint64_t>(sender) * 7 + at);
}

/// Each step every process sends 1 MiB to each neighbour around a ring, and
/// checks every byte it receives; process 2 dies at the start of step 2,
/// so its neighbours send it again every message since the checkpoint.
/// Returns what the log of this process did.
reprise_msglog_counters big_ring_run() {
  constexpr std::uint64_t kBigSteps = 40;
  constexpr std::uint64_t kBigEvery = 5;
  constexpr std::size_t kBig = std::size_t{1} << 20;
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  std::vector<std::uint64_t> received(kBigSteps, 0);
  checkpoint.protect("received", received);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kBigEvery}});
  const int me = comm.rank().value();
  const int size = comm.size();
  const int neighbours[2] = {(me + size - 1) % size, (me + 1) % size};
  std::vector<std::uint8_t> out(kBig);
  std::vector<std::uint8_t> in(kBig);
  std::vector<std::uint64_t> executed;
  driver.run(kBigSteps, [&](std::uint64_t step) {
    executed.push_back(step);
    if (me == 2 && step == 2 && comm.epoch() == 0) inject::kill_self(comm.original_rank());
    for (std::size_t i = 0; i < kBig; ++i) out[i] = big_byte(step, me, i);
    for (int k = 0; k < 2; ++k) {
      comm.check(MPI_Sendrecv(out.data(), static_cast<int>(kBig), MPI_BYTE, neighbours[k], 1, in.data(),
                              static_cast<int>(kBig), MPI_BYTE, neighbours[1 - k], 1, comm.raw(), MPI_STATUS_IGNORE),
                 "MPI_Sendrecv");
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < kBig; ++i) wrong += in[i] != big_byte(step, neighbours[1 - k], i) ? 1 : 0;
      EXPECT_EQ(wrong, 0U) << "bytes from process " << neighbours[1 - k] << " at step " << step;
      received[step] += kBig - wrong;
    }
  });
  EXPECT_EQ(received, std::vector<std::uint64_t>(kBigSteps, 2 * kBig)) << "every byte of every step";
  if (!comm.is_replacement()) {
    std::vector<std::uint64_t> once(kBigSteps);
    for (std::uint64_t step = 0; step < kBigSteps; ++step) once[step] = step;
    EXPECT_EQ(executed, once) << "a survivor never runs a step twice";
    EXPECT_EQ(driver.recoveries().size(), 1U);
  }
  return msglog::counters();
}

}  // namespace

TEST(Replay, AValueFromOutsideMpiIsReplayedAsLogged) { clock_run(true); }

TEST(Replay, SurvivorsThatMeetTheFailureInACheckpointGoOnFromThere) { clock_run(false); }

TEST(Replay, AHaloExchangeWithAllreducesReplaysAKillInsideTheCollective) {
  halo_run(2, 9, Halo::KillPoint::kBeforeAllreduce);
}

TEST(Replay, AHaloExchangeReplaysAKillJustAfterACheckpoint) { halo_run(1, 6, Halo::KillPoint::kStepStart); }

TEST(Replay, AHaloExchangeReplaysFromTheLastSnapshot) {
  halo_run(1, 11, Halo::KillPoint::kBeforeAllreduce, {.every_steps = kCheckpointEvery}, Restart::kSnapshot);
}

// Run with a log bound of 150 bytes (msglog_replay_bounded): 6 steps of the
// halo exchange (40 bytes per step per process) would pass it, so the
// driver checkpoints every step once it has measured the rate; the kill at
// step 17 then finds every message since the checkpoint in the logs (with
// a checkpoint every 6 steps the log would have dropped some, and every
// process would roll back).
TEST(Replay, AHaloExchangeNearTheLogsBoundReplays) { halo_run(2, 17, Halo::KillPoint::kBeforeAllreduce); }

// A checkpoint every 1 ms of steps (a few steps here): the driver plans each one with an
// allreduce before its commit, which a replacement takes from the others.
TEST(Replay, AHaloExchangeAtATimeBasedCadenceReplays) {
  halo_run(2, 17, Halo::KillPoint::kBeforeAllreduce, {.every_seconds = 0.001});
}

TEST(Replay, AKilledWorkerReplaysAloneAndNoSurvivorRollsBack) { replay_run({{2, 9, 0}}, true); }

TEST(Replay, AKilledWorkerReplaysFromItsCheckpointWithoutSnapshots) {
  replay_run({{2, 9, 0}}, true, Gather::kAnySource, Restart::kCheckpoint);
}

// Killed at step 11, five steps after its checkpoint: a snapshot sent
// before step 7 reached its holder two steps before (every process is
// within a step of the master), and the survivors consumed all it sent before.
TEST(Replay, AKilledWorkerReplaysFromItsLastSnapshot) {
  replay_run({{2, 11, 0}}, true, Gather::kAnySource, Restart::kSnapshot);
}

TEST(Replay, AKilledMasterReplaysItsTestsomePollingFromItsLastSnapshot) {
  replay_run({{0, 11, 0}}, true, Gather::kTestsome, Restart::kSnapshot);
}

TEST(Replay, AKilledMasterReplaysItsAnySourceMatchesFromItsBuddy) { replay_run({{0, 9, 0}}, true); }

TEST(Replay, AKilledMasterReplaysItsWaitanyOutcomes) { replay_run({{0, 9, 0}}, true, Gather::kWaitany); }

TEST(Replay, AKilledMasterReplaysItsTestsomePollingFailuresIncluded) {
  replay_run({{0, 9, 0}}, true, Gather::kTestsome);
}

TEST(Replay, AKilledMasterReplaysItsIprobePolling) { replay_run({{0, 9, 0}}, true, Gather::kIprobe); }

// Process 2 at step 9, then process 3 at step 15 (its checkpoint at 12).
TEST(Replay, TwoProcessesKilledAtDifferentTimesEachReplayAlone) {
  replay_run({{2, 9, 0}, {3, 15, 1}}, true, Gather::kWaitany);
}

// The master at step 9; its replacement, replaying from step 6, at step 7:
// the second replacement replays from step 6 again, with every event the
// first master made (its replacement stored them at its buddy again).
TEST(Replay, AProcessKilledAgainDuringItsReplayReplaysAgain) {
  replay_run({{0, 9, 0}, {0, 7, 1}}, true, Gather::kTestsome, Restart::kCheckpoint);
}

// The master at step 11, and its replacement, replaying from a snapshot,
// at step 11 again: the second one replays from a snapshot again.
TEST(Replay, AProcessKilledAgainDuringItsReplayFromASnapshotReplaysAgain) {
  replay_run({{0, 11, 0}, {0, 11, 1}}, true, Gather::kTestsome, Restart::kSnapshot);
}

// Process 2 holds the determinants of process 1 (on one host, the next
// rank): losing both, nobody can replay 1, and every process rolls back.
TEST(Replay, AProcessLostWithItsBuddyRollsEveryProcessBack) { replay_run({{1, 9, 0}, {2, 9, 0}}, false); }

// Process 2 at step 8 replays from a snapshot; the master at step 10, before
// the next checkpoint (12), may need the results 2 sent it between the
// checkpoint and that snapshot, which no log holds: every process rolls back
// to step 6, and the result is still the failure-free one.
TEST(Replay, ASecondFailureOfAProcessThatAReplayFromASnapshotSentToRollsEveryProcessBack) {
  const std::vector<Kill> kills = {{2, 8, 0}, {0, 10, 1}};
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  MasterWorker app(comm, checkpoint, Gather::kAnySource);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
  driver.run(kSteps, [&](std::uint64_t step) { app.step(step, kills); });
  expect_consistent(comm, app.state());
  if (comm.is_replacement()) return;
  std::vector<std::uint64_t> expected;
  for (std::uint64_t s = 0; s <= 10; ++s) expected.push_back(s);
  for (std::uint64_t s = 6; s < kSteps; ++s) expected.push_back(s);
  EXPECT_EQ(app.executed(), expected) << "the survivors rolled back once, at the second failure";
  ASSERT_EQ(driver.recoveries().size(), 2U);
  EXPECT_EQ(driver.recoveries()[0].mode, RecoveryMode::kReplay);
  EXPECT_EQ(driver.recoveries()[1].mode, RecoveryMode::kRespawn);
}

/// Two replays in one checkpoint interval: `kills` (the second at epoch 1),
/// the first replacement restarting from a snapshot (`Restart::kSnapshot`)
/// or from its checkpoint (`kCheckpoint`, snapshots off). Both replay, no
/// survivor ever goes back, the result is the failure-free one.
void two_replays_in_one_interval(const std::vector<Kill>& kills, Restart first) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  MasterWorker app(comm, checkpoint, Gather::kAnySource);
  const int snapshots = first == Restart::kSnapshot ? Cadence::kDefaultSnapshots : 0;
  Driver driver(comm, checkpoint,
                {.mode = RecoveryMode::kReplay,
                 .cadence = {.every_steps = kCheckpointEvery, .snapshots_per_interval = snapshots}});
  driver.run(kSteps, [&](std::uint64_t step) { app.step(step, kills); });
  expect_consistent(comm, app.state());
  if (comm.is_replacement()) {
    const std::vector<Kill> mine = {kills.front()};
    if (comm.original_rank().value() == kills.front().rank) expect_restarted(comm, mine, app.executed(), first);
    return;
  }
  std::vector<std::uint64_t> expected;
  for (std::uint64_t s = 0; s < kSteps; ++s) expected.push_back(s);
  EXPECT_EQ(app.executed(), expected) << "a survivor went back";
  ASSERT_EQ(driver.recoveries().size(), 2U);
  EXPECT_EQ(driver.recoveries()[0].mode, RecoveryMode::kReplay);
  EXPECT_EQ(driver.recoveries()[1].mode, RecoveryMode::kReplay);
}

// Process 2 at step 8 replays from a snapshot; worker 3 at step 10, before
// the next checkpoint, needs only the master's messages, which its log
// holds: it replays too.
TEST(Replay, ASecondFailureOfAProcessThatAReplayFromASnapshotNeverSentToReplaysToo) {
  two_replays_in_one_interval({{2, 8, 0}, {3, 10, 1}}, Restart::kSnapshot);
}

// Process 2 at step 8 replays from its checkpoint; worker 3 at step 10
// replays too, and process 2's replacement, which holds no copy from a
// commit, goes on where it is (it was restored again, back to step 6, and
// took the master's task of step 11 for the one of step 7).
TEST(Replay, ASecondReplayInTheIntervalLeavesTheFirstReplacementWhereItIs) {
  two_replays_in_one_interval({{2, 8, 0}, {3, 10, 1}}, Restart::kCheckpoint);
}

// Processes 1 and 3 hold each other's checkpoint (4 processes, 2 copies):
// 1 at step 8, then 3 at step 10, before the next checkpoint. 1's
// replacement took over the copy of 3's state 1 held, so 3's state is
// still held twice and 3 replays (without it, DataLost named 1 and 3).
TEST(Replay, TwoProcessesHoldingEachOthersCheckpointKilledInOneIntervalEachReplay) {
  two_replays_in_one_interval({{1, 8, 0}, {3, 10, 1}}, Restart::kSnapshot);
}

// Processes 1 and 3 at step 9: on 4 processes with 2 copies each holds the
// other's checkpoint, so both states are lost, though each one's buddy (the
// holder of its determinants) lives. Every process raises DataLost naming
// the two: the survivors meet it in the restore the log's hook runs inside
// their MPI call, and raise it as their own.
TEST(Replay, TwoProcessesHoldingEachOthersCheckpointLostTogetherRaiseDataLostEverywhere) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  MasterWorker app(comm, checkpoint, Gather::kAnySource);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
  const std::vector<Kill> kills{{1, 9, 0}, {3, 9, 0}};
  try {
    driver.run(kSteps, [&](std::uint64_t step) { app.step(step, kills); });
    ADD_FAILURE() << "the run ended without DataLost";
  } catch (const DataLost& error) {
    EXPECT_EQ(error.lost_processes(), (std::vector<OriginalRank>{OriginalRank{1}, OriginalRank{3}})) << error.what();
  }
}

// Processes 1 and 3 at the start of step 9 (their states lost, as above),
// while processes 0 and 2 wait in an MPI_Waitall over a ring's receive from
// one of them and send to the other: MPI fails the call with
// MPI_ERR_IN_STATUS, and the restore the log's hook runs inside it raises
// DataLost. The call then returns the process failure, which the program
// raises as one, not MPI_ERR_IN_STATUS, which it would raise as an error of
// its own: every process raises DataLost naming the two.
TEST(Replay, TwoProcessesLostTogetherWhileARingWaitsInWaitallRaiseDataLostEverywhere) {
  constexpr std::uint64_t kKillAt = 9;
  constexpr int kRingTag = 4;
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  std::vector<std::uint64_t> chain{0};
  checkpoint.protect("chain", chain);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = kCheckpointEvery}});
  const int me = comm.rank().value();
  const int size = comm.size();
  try {
    driver.run(kSteps, [&](std::uint64_t step) {
      if (me % 2 == 1 && step == kKillAt && !comm.is_replacement()) inject::kill_self(comm.original_rank());
      std::uint64_t in = 0;
      const std::uint64_t out = detail::mix64(chain[0] + step);
      MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      comm.check(MPI_Irecv(&in, 1, MPI_UINT64_T, (me + size - 1) % size, kRingTag, comm.raw(), &requests[0]),
                 "MPI_Irecv (ring)");
      comm.check(MPI_Isend(&out, 1, MPI_UINT64_T, (me + 1) % size, kRingTag, comm.raw(), &requests[1]),
                 "MPI_Isend (ring)");
      comm.check(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall (ring)");
      chain[0] = detail::mix64(chain[0] ^ in);
    });
    ADD_FAILURE() << "the run ended without DataLost";
  } catch (const DataLost& error) {
    EXPECT_EQ(error.lost_processes(), (std::vector<OriginalRank>{OriginalRank{1}, OriginalRank{3}})) << error.what();
  }
}

// 80 MiB logged per process, 10 MiB between two checkpoints: the log uses
// the memory the checkpoints free again, survivors included, whose
// messages sent again in the recovery are held until received (they were
// held for good, and a survivor's log then took fresh memory for every
// message until its bound).
TEST(Replay, ASurvivorsLogUsesItsMemoryAgainAfterAReplay) {
  ASSERT_TRUE(msglog::active());
  const reprise_msglog_counters counters = big_ring_run();
  EXPECT_LT(counters.log_bytes_mapped, counters.bytes_logged / 2)
      << counters.log_bytes_mapped << " bytes mapped for " << counters.bytes_logged << " logged";
}
