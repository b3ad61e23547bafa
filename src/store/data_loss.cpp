#include "reprise/data_loss.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "mix.hpp"
#include "reprise/error.hpp"

namespace reprise::data_loss {

namespace {

constexpr int kMaxProcesses = 4096;  // one evaluation costs O(p^2 / 2) multiply-adds

void check(int processes, int copies) {
  if (processes > kMaxProcesses) {
    throw UsageError("data_loss: the closed form handles up to " + std::to_string(kMaxProcesses) +
                     " processes; use data_loss::simulate for " + std::to_string(processes));
  }
  if (processes < 1 || copies < 1 || copies > processes) {
    throw UsageError("data_loss: need 1 <= copies <= processes, got processes=" + std::to_string(processes) +
                     ", copies=" + std::to_string(copies));
  }
  if (processes % copies != 0) {
    throw UsageError("data_loss: the closed form needs copies to divide processes (" + std::to_string(processes) +
                     " % " + std::to_string(copies) + " != 0); use data_loss::simulate for this layout");
  }
}

// Probability of no loss after f failures, for every f = 0..p. The paper's
// inclusion-exclusion sum over groups that died entirely alternates between
// terms far larger than the result and loses all precision at a few hundred
// processes; the same quantity is counted here with positive terms only: the
// failure sets of size f that leave a survivor in each of the p/r groups are
// the coefficient of x^f in ((1+x)^r - x^r)^(p/r), divided by C(p, f).
std::vector<long double> survival_by_failures(int processes, int copies) {
  std::vector<long double> group(static_cast<std::size_t>(copies), 0);
  long double binomial = 1;  // C(r, k)
  for (int k = 0; k < copies; ++k) {
    group[static_cast<std::size_t>(k)] = binomial;
    binomial = binomial * (copies - k) / (k + 1);
  }
  std::vector<long double> counts{1};
  for (int g = 0; g < processes / copies; ++g) {
    std::vector<long double> next(counts.size() + group.size() - 1, 0);
    for (std::size_t a = 0; a < counts.size(); ++a) {
      for (std::size_t b = 0; b < group.size(); ++b) next[a + b] += counts[a] * group[b];
    }
    counts = std::move(next);
  }
  counts.resize(static_cast<std::size_t>(processes) + 1, 0);
  long double all = 1;  // C(p, f)
  for (int f = 0; f <= processes; ++f) {
    counts[static_cast<std::size_t>(f)] /= all;
    all = all * (processes - f) / (f + 1);
  }
  return counts;
}

}  // namespace

double probability(int processes, int copies, int failures) {
  check(processes, copies);
  if (failures < 0 || failures > processes) {
    throw UsageError("data_loss::probability: failures must be in [0, " + std::to_string(processes) + "], got " +
                     std::to_string(failures));
  }
  const auto survival = survival_by_failures(processes, copies);
  return static_cast<double>(std::clamp(1 - survival[static_cast<std::size_t>(failures)], 0.0L, 1.0L));
}

double expected_failures_until_loss(int processes, int copies) {
  check(processes, copies);
  // E[T] = sum over f >= 0 of P(T > f), and T > f means no loss after f failures.
  long double expected = 0;
  for (const long double survival : survival_by_failures(processes, copies)) expected += survival;
  return static_cast<double>(expected);
}

Simulation simulate(const Placement& placement, int trials, std::uint64_t seed) {
  if (trials < 1) throw UsageError("data_loss::simulate: needs at least one trial");
  const int slots = placement.config().slots;
  // The distinct sets of slots that hold the same blocks: data is lost when
  // every slot of one such set has failed.
  std::set<std::vector<Slot>> holder_sets;
  for (const auto& piece : placement.pieces({BlockId{0}, BlockId{placement.config().blocks}})) {
    auto holders = piece.holders;
    std::sort(holders.begin(), holders.end());
    holder_sets.insert(std::move(holders));
  }
  std::vector<int> losses_at(static_cast<std::size_t>(slots) + 1, 0);  // trials whose first loss is at f
  std::vector<int> order(static_cast<std::size_t>(slots));
  std::vector<int> failure_time(static_cast<std::size_t>(slots));
  std::uint64_t state = seed;
  double total_failures = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[detail::splitmix64(state) % i]);
    }
    for (int f = 0; f < slots; ++f) failure_time[static_cast<std::size_t>(order[static_cast<std::size_t>(f)])] = f + 1;
    int first_loss = slots;
    for (const auto& set : holder_sets) {
      int dies = 0;
      for (const Slot slot : set) dies = std::max(dies, failure_time[static_cast<std::size_t>(slot.value())]);
      first_loss = std::min(first_loss, dies);
    }
    ++losses_at[static_cast<std::size_t>(first_loss)];
    total_failures += first_loss;
  }
  Simulation result;
  result.loss_probability.resize(static_cast<std::size_t>(slots) + 1);
  int lost = 0;
  for (int f = 0; f <= slots; ++f) {
    lost += losses_at[static_cast<std::size_t>(f)];
    result.loss_probability[static_cast<std::size_t>(f)] = static_cast<double>(lost) / trials;
  }
  result.mean_failures_until_loss = total_failures / trials;
  return result;
}

}  // namespace reprise::data_loss
