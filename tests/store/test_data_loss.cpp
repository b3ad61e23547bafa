#include <gtest/gtest.h>

#include <cmath>

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
  EXPECT_DOUBLE_EQ(data_loss::probability(4, 2, 2), 2.0 / 6.0) << "2 of the 6 failure pairs are a whole group";
}

// The paper's Fig. 3b: formula and simulation against the real placement agree.
TEST(DataLoss, FormulaMatchesSimulationOfTheRealPlacement) {
  constexpr int kProcesses = 48;
  for (int copies : {2, 3, 4}) {
    for (std::uint64_t per_range : {0ULL, 16ULL}) {
      const Placement placement({.blocks = kProcesses * 256, .slots = kProcesses, .copies = copies,
                                 .blocks_per_permuted_range = per_range, .seed = 5});
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
  EXPECT_THROW((void)data_loss::probability(8192, 2, 1), UsageError) << "beyond the closed form's range";
  const Placement placement({.blocks = 10, .slots = 4, .copies = 2});
  EXPECT_THROW((void)data_loss::simulate(placement, 0, 1), UsageError);
}
