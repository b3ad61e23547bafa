#pragma once
/// \file
/// How likely the store is to lose data for good: after f of p processes (or
/// of N nodes) failed, uniformly at random, some block may have lost all r
/// copies. The model answers that in closed form for up to millions of
/// processes; the simulators answer it by killing random processes or whole
/// nodes against a real `Placement`, so the two can be compared.

#include <cstdint>
#include <vector>

#include "reprise/placement.hpp"

namespace reprise::data_loss {

/// Most copies the model evaluates: one evaluation of `probability` costs
/// about r * (27 r + 7 sd) complex multiply-adds, sd being at most
/// (r - 1) sqrt(p / r) / 2: under 0.1 ms for r <= 4 at p = 10^6, 70 ms at
/// r = 1000.
inline constexpr int kMaxCopies = 1024;

/// Probability that some block lost all `copies` copies after `failures`
/// of `processes` failed, for the store's layout (copies of a block on r
/// slots floor(p/r) apart). Requires r to divide p: the slots then form
/// g = p/r disjoint groups, and this is the ReStore paper's inclusion-exclusion
/// sum over groups that died entirely. It is evaluated with positive terms
/// only, as the number of failure sets sparing every group, [x^f] ((1+x)^r -
/// x^r)^g, over C(p, f); the coefficient comes from an exponentially tilted
/// Fourier sum (docs/RELIABILITY.md, "Data loss in numbers"): within 5e-15
/// of exact counting up to p = 4092, and the same method for p up to 2^31 - 1.
/// `UsageError` on arguments out of range or r > `kMaxCopies`.
[[nodiscard]] double probability(int processes, int copies, int failures);

/// Expected number of random failures until the first irrecoverable loss
/// (same layout as `probability`): p * Gamma(1 + 1/r) * Gamma(g) /
/// Gamma(g + 1/r) with g = p/r groups, in closed form.
[[nodiscard]] double expected_failures_until_loss(int processes, int copies);

/// Probability of irrecoverable loss after `nodes_down` of `nodes` whole
/// nodes failed, for the layout the store makes from node-major slots with
/// `processes_per_node` processes on every node (p = N * P slots, slot s on
/// node floor(s / P)). When r divides N, the copies of the blocks of node n
/// lie on the r nodes n, n + N/r, ..., n + (r-1) N/r, so the nodes form N/r
/// disjoint groups and the answer is `probability(N, r, nodes_down)`, for
/// any P. Otherwise the groups overlap (or copies share a node) and there is
/// no closed form: `UsageError` saying so, and to use `simulate_nodes`.
[[nodiscard]] double node_probability(int nodes, int processes_per_node, int copies, int nodes_down);

/// Expected number of random whole-node failures until the first
/// irrecoverable loss, for the layout of `node_probability` (same checks).
[[nodiscard]] double expected_node_failures_until_loss(int nodes, int processes_per_node, int copies);

/// Outcome of `simulate` and `simulate_nodes`.
struct Simulation {
  /// loss_probability[f]: fraction of trials with data lost after f failures
  /// (f = 0 .. number of processes, or of nodes).
  std::vector<double> loss_probability;
  /// Mean number of failures until the first loss.
  double mean_failures_until_loss = 0;
};

/// Kills the slots of `placement` one by one in a random order, `trials`
/// times, and records when a block first lost all its copies. Costs
/// O(trials * p * r).
[[nodiscard]] Simulation simulate(const Placement& placement, int trials, std::uint64_t seed);

/// Like `simulate`, but the unit of failure is a node: `node_of_slot[s]` is
/// any key naming the node of slot s (one entry per slot of `placement`),
/// nodes die one by one in a random order, and a block is lost when every
/// node holding one of its copies is down. Takes the nodes from this list,
/// not from the placement's configuration, so that a layout made without
/// knowing the nodes can be checked against where its slots really ran.
[[nodiscard]] Simulation simulate_nodes(const Placement& placement, const std::vector<int>& node_of_slot, int trials,
                                        std::uint64_t seed);

}  // namespace reprise::data_loss
