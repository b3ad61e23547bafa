#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reprise/data_loss.hpp"
#include "reprise/error.hpp"

using namespace reprise;

namespace {

// The paper's formula written out: sum over j of (-1)^(j+1) C(g, j)
// C(p - j r, f - j r) / C(p, f), with exact integer binomials. Usable only
// where the alternating terms stay small, hence the small sizes below.
long double binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  long double c = 1;
  for (int i = 0; i < k; ++i) c = c * (n - i) / (i + 1);
  return c;
}

double inclusion_exclusion(int processes, int copies, int failures) {
  const int groups = processes / copies;
  long double sum = 0;
  for (int j = 1; j <= groups && j * copies <= failures; ++j) {
    const long double term =
        binomial(groups, j) * binomial(processes - j * copies, failures - j * copies) / binomial(processes, failures);
    sum += (j % 2 == 1) ? term : -term;
  }
  return static_cast<double>(sum);
}

// The loss probability for every f = 0..p by counting outright: the failure
// sets of size f sparing every group are the coefficient of x^f in
// ((1+x)^r - x^r)^(p/r), multiplied out in O(p^2) (positive terms only).
std::vector<double> counted_loss(int processes, int copies) {
  std::vector<long double> group(static_cast<std::size_t>(copies));
  for (int k = 0; k < copies; ++k) group[static_cast<std::size_t>(k)] = binomial(copies, k);
  std::vector<long double> counts{1};
  for (int g = 0; g < processes / copies; ++g) {
    std::vector<long double> next(counts.size() + group.size() - 1, 0);
    for (std::size_t a = 0; a < counts.size(); ++a) {
      for (std::size_t b = 0; b < group.size(); ++b) next[a + b] += counts[a] * group[b];
    }
    counts = std::move(next);
  }
  counts.resize(static_cast<std::size_t>(processes) + 1, 0);
  std::vector<double> loss;
  for (int f = 0; f <= processes; ++f) {
    loss.push_back(static_cast<double>(1 - counts[static_cast<std::size_t>(f)] / binomial(processes, f)));
  }
  return loss;
}

// Mean and standard deviation of the failures until loss, from the model's
// survival probabilities: E[T] = sum P(T > f), E[T^2] = sum (2f + 1) P(T > f).
struct Moments {
  double mean = 0;
  double sd = 0;
};
Moments model_moments(int units, int copies) {
  double mean = 0;
  double square = 0;
  for (int f = 0; f <= units; ++f) {
    const double survival = 1 - data_loss::probability(units, copies, f);
    mean += survival;
    square += (2.0 * f + 1) * survival;
  }
  return {mean, std::sqrt(std::max(0.0, square - mean * mean))};
}

// node_of_slot for N nodes of P processes, slots in node-major order.
std::vector<int> node_major(int nodes, int per_node) {
  std::vector<int> node;
  for (int n = 0; n < nodes; ++n) node.insert(node.end(), static_cast<std::size_t>(per_node), n);
  return node;
}

}  // namespace

TEST(DataLoss, EqualsThePapersInclusionExclusionSum) {
  for (int processes : {4, 8, 12, 24, 48}) {
    for (int copies : {1, 2, 3, 4}) {
      if (processes % copies != 0) continue;
      for (int failures = 0; failures <= processes; ++failures) {
        ASSERT_NEAR(data_loss::probability(processes, copies, failures),
                    inclusion_exclusion(processes, copies, failures), 1e-9)
            << "p=" << processes << " r=" << copies << " f=" << failures;
      }
    }
  }
}

TEST(DataLoss, EqualsCountingTheFailureSetsOutright) {
  for (int processes : {1, 2, 6, 12, 60, 120, 360, 720}) {
    for (int copies = 1; copies <= 6; ++copies) {
      if (processes % copies != 0) continue;
      const auto counted = counted_loss(processes, copies);
      for (int failures = 0; failures <= processes; ++failures) {
        ASSERT_NEAR(data_loss::probability(processes, copies, failures), counted[static_cast<std::size_t>(failures)],
                    1e-9)
            << "p=" << processes << " r=" << copies << " f=" << failures;
      }
    }
  }
}

// At 4092 processes the Fourier sum takes the fewer points Bernstein's
// inequality allows (a few hundred) rather than the exact size (up to
// g (r-1) + 1); it must still agree.
TEST(DataLoss, EqualsCountingAtFourThousandProcesses) {
  for (int copies : {2, 3, 4}) {
    constexpr int kProcesses = 4092;  // divisible by 2, 3 and 4
    const auto counted = counted_loss(kProcesses, copies);
    for (int failures = 0; failures <= kProcesses; ++failures) {
      ASSERT_NEAR(data_loss::probability(kProcesses, copies, failures), counted[static_cast<std::size_t>(failures)],
                  1e-9)
          << "r=" << copies << " f=" << failures;
    }
  }
}

TEST(DataLoss, ClosedFormExpectationIsTheSumOfSurvivalProbabilities) {
  for (int processes : {1, 4, 12, 48, 360, 4092, 12000}) {
    for (int copies : {1, 2, 3, 4}) {
      if (processes % copies != 0 || copies > processes) continue;
      const double expected = data_loss::expected_failures_until_loss(processes, copies);
      EXPECT_NEAR(expected, model_moments(processes, copies).mean, 1e-9 * expected)
          << "p=" << processes << " r=" << copies;
    }
  }
  EXPECT_DOUBLE_EQ(data_loss::expected_failures_until_loss(7, 7), 7.0) << "every process must fail";
}

TEST(DataLoss, AMillionProcesses) {
  constexpr int kProcesses = 1'000'000;
  for (int copies : {2, 4, 5, 8}) {
    const int groups = kProcesses / copies;
    EXPECT_EQ(data_loss::probability(kProcesses, copies, copies - 1), 0.0);
    EXPECT_EQ(data_loss::probability(kProcesses, copies, groups * (copies - 1) + 1), 1.0);
    EXPECT_EQ(data_loss::probability(kProcesses, copies, groups * (copies - 1)), 1.0) << "r^g / C(p, f) underflows";
    // With r failures, loss needs them to be one whole group: g / C(p, r).
    double first = groups;
    for (int k = 0; k < copies; ++k) first = first * (k + 1) / (kProcesses - k);
    EXPECT_NEAR(data_loss::probability(kProcesses, copies, copies), first, 1e-12 + 1e-9 * first);
    double previous = 0;
    for (int failures = copies; failures <= kProcesses; failures = failures * 5 / 4 + 1) {
      const double p = data_loss::probability(kProcesses, copies, failures);
      ASSERT_GE(p, previous - 1e-13) << "r=" << copies << " f=" << failures;
      ASSERT_LE(p, 1.0);
      previous = p;
    }
  }
  // Around the expected number of failures, loss has become likely but not certain.
  const double expected = data_loss::expected_failures_until_loss(kProcesses, 2);
  const double at_mean = data_loss::probability(kProcesses, 2, static_cast<int>(expected));
  EXPECT_GT(at_mean, 0.3);
  EXPECT_LT(at_mean, 0.7);
}

// For r = 2 the count has a product form, [x^f] (1 + 2x)^g = 2^f C(g, f),
// so P(no loss | f) = prod over i < f of (p - 2i) / (p - i): an exact
// reference at a million processes, where the Fourier sum uses its window.
TEST(DataLoss, TwoCopiesAtAMillionProcessesMatchTheProductForm) {
  constexpr int kProcesses = 1'000'000;
  long double survival = 1;
  int next = 0;
  for (int f = 0; f <= kProcesses / 2; ++f) {
    if (f == next) {
      ASSERT_NEAR(data_loss::probability(kProcesses, 2, f), static_cast<double>(1 - survival), 1e-13) << "f=" << f;
      next = next < 20 ? next + 1 : next * 21 / 20;
    }
    survival *= static_cast<long double>(kProcesses - 2 * f) / (kProcesses - f);
  }
}

TEST(DataLoss, StaysAProbabilityForLargeJobs) {
  for (int processes : {1024, 4096}) {
    double previous = 0;
    for (int failures = 0; failures <= processes; failures += processes / 16) {
      const double p = data_loss::probability(processes, 2, failures);
      ASSERT_GE(p, previous - 1e-12) << "more failures never make loss less likely";
      ASSERT_LE(p, 1.0);
      previous = p;
    }
    EXPECT_DOUBLE_EQ(data_loss::probability(processes, 2, processes), 1.0);
  }
}

TEST(DataLoss, SimpleCases) {
  EXPECT_EQ(data_loss::probability(10, 1, 0), 0.0);
  EXPECT_EQ(data_loss::probability(10, 1, 1), 1.0);
  EXPECT_DOUBLE_EQ(data_loss::expected_failures_until_loss(10, 1), 1.0);
  EXPECT_EQ(data_loss::probability(8, 4, 3), 0.0) << "fewer failures than copies never lose data";
  EXPECT_DOUBLE_EQ(data_loss::probability(4, 4, 4), 1.0);
  EXPECT_NEAR(data_loss::probability(4, 2, 2), 2.0 / 6.0, 1e-15) << "2 of the 6 failure pairs are a whole group";
}

// The paper's Fig. 3b: formula and simulation against the real placement agree.
TEST(DataLoss, FormulaMatchesSimulationOfTheRealPlacement) {
  constexpr int kProcesses = 48;
  for (int copies : {2, 3, 4}) {
    for (std::uint64_t per_range : {0ULL, 16ULL}) {
      const Placement placement({.blocks = kProcesses * 256,
                                 .slots = kProcesses,
                                 .copies = copies,
                                 .blocks_per_permuted_range = per_range,
                                 .seed = 5});
      const auto simulation = data_loss::simulate(placement, 20000, 77);
      double worst = 0;
      for (int f = 0; f <= kProcesses; ++f) {
        worst = std::max(worst, std::abs(simulation.loss_probability[static_cast<std::size_t>(f)] -
                                         data_loss::probability(kProcesses, copies, f)));
      }
      EXPECT_LT(worst, 0.015) << "r=" << copies << " permuted ranges of " << per_range;
      const double expected = data_loss::expected_failures_until_loss(kProcesses, copies);
      EXPECT_NEAR(simulation.mean_failures_until_loss, expected, 0.02 * expected) << "r=" << copies;
    }
  }
}

TEST(DataLoss, BadArgumentsAreRejected) {
  EXPECT_THROW((void)data_loss::probability(10, 3, 1), UsageError) << "3 does not divide 10";
  EXPECT_THROW((void)data_loss::probability(10, 0, 1), UsageError);
  EXPECT_THROW((void)data_loss::probability(10, 2, 11), UsageError);
  EXPECT_THROW((void)data_loss::probability(4096, 2048, 1), UsageError) << "beyond the closed form's copies";
  EXPECT_THROW((void)data_loss::expected_failures_until_loss(10, 11), UsageError);
  const Placement placement({.blocks = 10, .slots = 4, .copies = 2});
  EXPECT_THROW((void)data_loss::simulate(placement, 0, 1), UsageError);
  EXPECT_THROW((void)data_loss::simulate_nodes(placement, {0, 0, 1}, 10, 1), UsageError) << "one node per slot";
  EXPECT_THROW((void)data_loss::node_probability(0, 4, 2, 0), UsageError);
  EXPECT_THROW((void)data_loss::node_probability(4, 4, 2, 5), UsageError) << "more nodes down than nodes";
  EXPECT_THROW((void)data_loss::node_probability(1 << 16, 1 << 16, 2, 1), UsageError) << "p does not fit";
}

// Whole nodes: with N nodes of P slots in node-major order and r dividing N,
// the model is the process model on N nodes. Checked against killing whole
// nodes of the real placement (told the nodes, as the store does).
// Tolerance: each P(loss | k) of T trials is a binomial proportion with
// standard deviation sqrt(P (1 - P) / T); 5 of them, over at most 41 values
// per layout, is exceeded by chance with probability below 3e-5 (the seed is
// fixed anyway). The mean: 5 standard errors of the model's distribution.
TEST(DataLoss, NodeModelMatchesKillingNodesOfTheRealPlacement) {
  constexpr int kTrials = 20000;
  struct Layout {
    int nodes, per_node, copies;
  };
  for (const Layout layout :
       {Layout{4, 8, 2}, Layout{12, 4, 3}, Layout{16, 3, 4}, Layout{40, 2, 2}, Layout{24, 5, 3}, Layout{8, 1, 8}}) {
    const int processes = layout.nodes * layout.per_node;
    const auto nodes = node_major(layout.nodes, layout.per_node);
    const Placement placement({.blocks = static_cast<std::uint64_t>(processes) * 16,
                               .slots = processes,
                               .copies = layout.copies,
                               .blocks_per_permuted_range = 4,
                               .seed = 3,
                               .node_of_slot = nodes});
    const auto simulation = data_loss::simulate_nodes(placement, nodes, kTrials, 11);
    ASSERT_EQ(simulation.loss_probability.size(), static_cast<std::size_t>(layout.nodes) + 1);
    for (int k = 0; k <= layout.nodes; ++k) {
      const double model = data_loss::node_probability(layout.nodes, layout.per_node, layout.copies, k);
      EXPECT_NEAR(simulation.loss_probability[static_cast<std::size_t>(k)], model,
                  5 * std::sqrt(model * (1 - model) / kTrials) + 1e-12)
          << "N=" << layout.nodes << " P=" << layout.per_node << " r=" << layout.copies << " k=" << k;
    }
    const Moments moments = model_moments(layout.nodes, layout.copies);
    const double expected = data_loss::expected_node_failures_until_loss(layout.nodes, layout.per_node, layout.copies);
    EXPECT_NEAR(expected, moments.mean, 1e-9 * expected);
    EXPECT_NEAR(simulation.mean_failures_until_loss, expected, 5 * moments.sd / std::sqrt(kTrials) + 1e-12)
        << "N=" << layout.nodes << " P=" << layout.per_node << " r=" << layout.copies;
  }
}

TEST(DataLoss, NodeModelRefusesLayoutsWithoutDisjointNodeGroups) {
  EXPECT_THROW((void)data_loss::node_probability(5, 4, 2, 1), UsageError) << "2 does not divide 5 nodes";
  EXPECT_THROW((void)data_loss::node_probability(2, 8, 3, 1), UsageError) << "3 copies on 2 nodes";
  EXPECT_THROW((void)data_loss::expected_node_failures_until_loss(6, 4, 4), UsageError);
  EXPECT_NO_THROW((void)data_loss::node_probability(6, 4, 3, 1));
}

// Slots spread over the nodes round-robin (slot s on node s mod N), with a
// placement that was not told the nodes: copies s and s + p/r land on the
// same node, and the node simulator sees the loss at the first node failure.
// Told the nodes, the placement moves copies apart: no loss before r nodes.
TEST(DataLoss, NodeSimulatorFindsCopiesSharingANode) {
  constexpr int kNodes = 4;
  constexpr int kProcesses = 16;
  std::vector<int> round_robin;
  for (int s = 0; s < kProcesses; ++s) round_robin.push_back(s % kNodes);
  const Placement blind({.blocks = 64, .slots = kProcesses, .copies = 2});
  const auto shared = data_loss::simulate_nodes(blind, round_robin, 200, 5);
  EXPECT_EQ(shared.loss_probability[1], 1.0) << "one node failure takes both copies of some block";
  EXPECT_EQ(shared.mean_failures_until_loss, 1.0);
  const Placement told({.blocks = 64, .slots = kProcesses, .copies = 2, .node_of_slot = round_robin});
  const auto spread = data_loss::simulate_nodes(told, round_robin, 200, 5);
  EXPECT_EQ(spread.loss_probability[1], 0.0);
  EXPECT_GT(spread.loss_probability[2], 0.0);
  // 2 copies on 3 nodes of 2 slots: the copies of node 0 go to nodes 1 and
  // 2, the groups overlap, and loss is more likely than with disjoint groups.
  const auto three = node_major(3, 2);
  const Placement overlapping({.blocks = 60, .slots = 6, .copies = 2, .node_of_slot = three});
  const auto overlap = data_loss::simulate_nodes(overlapping, three, 2000, 9);
  EXPECT_EQ(overlap.loss_probability[1], 0.0);
  EXPECT_GT(overlap.loss_probability[2], 0.5);
}
