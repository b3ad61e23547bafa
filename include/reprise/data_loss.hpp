#pragma once
/// \file
/// How likely the store is to lose data for good: after f of p processes
/// failed (uniformly at random), some block may have lost all r copies. The
/// model answers that in closed form; the simulator answers it by killing
/// random processes against a real `Placement`, so the two can be compared.

#include <cstdint>
#include <vector>

#include "reprise/placement.hpp"

namespace reprise::data_loss {

/// Probability that some block lost all `copies` copies after `failures`
/// of `processes` failed, for the store's layout (copies of a block on r
/// slots floor(p/r) apart). Requires r to divide p: the slots then form p/r
/// disjoint groups, and this is the ReStore paper's inclusion-exclusion sum
/// over groups that died entirely, evaluated by counting the failure sets that
/// spare every group (positive terms only, no cancellation), for up to 4096
/// processes. `UsageError` on arguments out of range.
[[nodiscard]] double probability(int processes, int copies, int failures);

/// Expected number of random failures until the first irrecoverable loss
/// (same assumptions as `probability`).
[[nodiscard]] double expected_failures_until_loss(int processes, int copies);

/// Outcome of `simulate`.
struct Simulation {
  /// loss_probability[f]: fraction of trials with data lost after f failures
  /// (f = 0 .. processes).
  std::vector<double> loss_probability;
  /// Mean number of failures until the first loss.
  double mean_failures_until_loss = 0;
};

/// Kills the slots of `placement` one by one in a random order, `trials`
/// times, and records when a block first lost all its copies.
[[nodiscard]] Simulation simulate(const Placement& placement, int trials, std::uint64_t seed);

}  // namespace reprise::data_loss
