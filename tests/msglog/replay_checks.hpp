#pragma once
// What the replay tests of one application check alike: its steps under
// the Driver in replay mode with one process killed, then the same steps
// again without a failure and without the Driver (the log passes the calls
// straight to Open MPI); both must leave every process in the same state.

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/driver.hpp"
#include "reprise/msglog.hpp"

namespace reprise::tests {

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
