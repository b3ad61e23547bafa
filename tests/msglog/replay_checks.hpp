#pragma once
// What the replay tests of one application check alike: its steps under
// the Driver in replay mode with one process killed, then the same steps
// again without a failure and without the Driver (the log passes the calls
// straight to Open MPI); both must leave every process in the same state.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/inject.hpp"
#include "reprise/msglog.hpp"

namespace reprise::tests {

/// Where the victim of a collectives test dies in its step.
enum class KillPoint { kNone, kStepStart, kMidStep };

/// The victim (`rank` negative: none), the step and the place in it.
struct Kill {
  int rank = -1;
  std::uint64_t step = 0;
  KillPoint point = KillPoint::kNone;
};

/// Counts and displacements of a v-collective, 1 or 2 elements per member.
struct Layout {
  std::vector<int> counts;
  std::vector<int> displs;
  explicit Layout(std::size_t size) : counts(size), displs(size) {
    for (std::size_t r = 0; r < size; ++r) counts[r] = 1 + static_cast<int>(r % 2);
    std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), 0);
  }
  [[nodiscard]] int total() const { return displs.back() + counts.back(); }
};

/// Member `me`'s all-to-all-v (and -w) over `size` members: 1 or 2
/// elements to and from each, sent from element 2p, received at element
/// 2(size - 1 - p); the displacements in bytes too, for MPI_Alltoallw.
struct AlltoallLayout {
  std::vector<int> counts;
  std::vector<int> send_displs;
  std::vector<int> receive_displs;
  std::vector<int> send_bytes;
  std::vector<int> receive_bytes;
  std::vector<MPI_Datatype> types;
  AlltoallLayout(int me, std::size_t size)
      : counts(size),
        send_displs(size),
        receive_displs(size),
        send_bytes(size),
        receive_bytes(size),
        types(size, MPI_UINT64_T) {
    constexpr auto kWord = static_cast<int>(sizeof(std::uint64_t));
    for (std::size_t p = 0; p < size; ++p) {
      counts[p] = 1 + static_cast<int>((static_cast<std::size_t>(me) + p) % 2);
      send_displs[p] = 2 * static_cast<int>(p);
      receive_displs[p] = 2 * static_cast<int>(size - 1 - p);
      send_bytes[p] = send_displs[p] * kWord;
      receive_bytes[p] = receive_displs[p] * kWord;
    }
  }
};

/// The protected state of a replay test's application that folds what
/// each collective gave into it: `kCells` words and a chain over every
/// value absorbed; and the steps this process executed (not protected).
class MixedCells {
 public:
  static constexpr std::size_t kCells = 8;

  explicit MixedCells(int rank) {
    for (std::size_t i = 0; i < kCells; ++i)
      _cells[i] = detail::mix64(static_cast<std::uint64_t>(rank) * kCells + i + 1);
  }

  void protect(Checkpoint& checkpoint) {
    checkpoint.protect("cells", _cells);
    checkpoint.protect("chain", _chain);
  }

  /// The cells, then the chain.
  [[nodiscard]] std::vector<std::uint64_t> state() const {
    std::vector<std::uint64_t> all = _cells;
    all.push_back(_chain[0]);
    return all;
  }
  [[nodiscard]] const std::vector<std::uint64_t>& executed() const { return _executed; }

 protected:
  void executing(std::uint64_t step) { _executed.push_back(step); }
  /// Dies for real (SIGKILL) if `kill` names this process (not a replacement), `step` and `point`.
  static void die_if(const Comm& comm, std::uint64_t step, const Kill& kill, KillPoint point) {
    if (!comm.is_replacement() && comm.rank().value() == kill.rank && step == kill.step && kill.point == point) {
      inject::kill_self(comm.original_rank());
    }
  }
  void absorb(std::uint64_t value) {
    _chain[0] = detail::mix64(_chain[0] ^ value);
    for (auto& cell : _cells) cell = detail::mix64(cell + value);
  }
  [[nodiscard]] std::uint64_t word(std::size_t i) const { return _cells[i % kCells]; }

 private:
  std::vector<std::uint64_t> _cells = std::vector<std::uint64_t>(kCells);
  std::vector<std::uint64_t> _chain{0};
  std::vector<std::uint64_t> _executed;
};

/// `App` (made by `make(rank)`) has protect(Checkpoint&), step(Comm&,
/// step, const Kill&), executed() and state(); `Kill` names the victim in
/// `rank` (negative: none) and is value-initialised for a run without one.
template <class App, class Kill, class Make>
void expect_replay_matches_failure_free(const Kill& kill, std::uint64_t steps, std::uint64_t checkpoint_every,
                                        Make&& make) {
  ASSERT_TRUE(msglog::active());
  Comm comm = Comm::world();
  Checkpoint checkpoint(comm);
  App app = make(comm.rank().value());
  app.protect(checkpoint);
  {
    Driver driver(comm, checkpoint, {.mode = RecoveryMode::kReplay, .cadence = {.every_steps = checkpoint_every}});
    driver.run(steps, [&](std::uint64_t step) { app.step(comm, step, kill); });
    if (!comm.is_replacement()) {
      std::vector<std::uint64_t> once(steps);
      std::iota(once.begin(), once.end(), 0);
      EXPECT_EQ(app.executed(), once) << "a survivor never runs a step twice";
      ASSERT_EQ(driver.recoveries().size(), kill.rank < 0 ? 0U : 1U);
      for (const Recovery& recovery : driver.recoveries()) {
        EXPECT_EQ(recovery.mode, RecoveryMode::kReplay);
        EXPECT_EQ(recovery.lost, std::vector<OriginalRank>{OriginalRank{kill.rank}});
      }
    }
  }
  App clean = make(comm.rank().value());
  for (std::uint64_t step = 0; step < steps; ++step) clean.step(comm, step, Kill{});
  EXPECT_EQ(app.state(), clean.state()) << "this process's state, bitwise";
}

}  // namespace reprise::tests
