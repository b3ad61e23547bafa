#include "reprise/data_loss.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <numeric>
#include <set>
#include <string>

#include "mix.hpp"
#include "reprise/error.hpp"

namespace reprise::data_loss {

namespace {

constexpr double kLogTwoPi = 1.8378770664093454836;  // log(2 pi)

void check(int processes, int copies) {
  if (processes < 1 || copies < 1 || copies > processes) {
    throw UsageError("data_loss: need 1 <= copies <= processes, got processes=" + std::to_string(processes) +
                     ", copies=" + std::to_string(copies));
  }
  if (processes % copies != 0) {
    throw UsageError("data_loss: the closed form needs copies to divide processes (" + std::to_string(processes) +
                     " % " + std::to_string(copies) + " != 0); use data_loss::simulate for this layout");
  }
  if (copies > kMaxCopies) {
    throw UsageError("data_loss: the closed form evaluates up to " + std::to_string(kMaxCopies) + " copies, got " +
                     std::to_string(copies) + "; use data_loss::simulate for more");
  }
}

// log(n!) minus Stirling's approximation (n + 1/2) log n - n + log(2 pi) / 2,
// for real n >= 1: directly where it is small enough not to cancel, else by
// its asymptotic series (the next term is below 1e-16 from n = 16 on).
double stirling_error(double n) {
  if (n < 16) return std::lgamma(n + 1) - (n + 0.5) * std::log(n) + n - 0.5 * kLogTwoPi;
  const double inv = 1 / n;
  const double inv2 = inv * inv;
  return inv * (1.0 / 12 - inv2 * (1.0 / 360 - inv2 * (1.0 / 1260 - inv2 * (1.0 / 1680 - inv2 / 1188))));
}

// x log(x / m) + m - x >= 0 without cancellation when x is close to m
// (a series in v = (x - m) / (x + m)); `log_m` is log(m).
double deviance(double x, double m, double log_m) {
  if (std::abs(x - m) < 0.1 * (x + m)) {
    const double v = (x - m) / (x + m);
    const double v2 = v * v;
    double sum = (x - m) * v;
    double power = 2 * x * v;  // 2 x v^(2j+1)
    for (int j = 1; j < 200; ++j) {
      power *= v2;
      const double next = sum + power / (2 * j + 1);
      if (next == sum) break;
      sum = next;
    }
    return sum;
  }
  return x * (std::log(x) - log_m) + m - x;
}

// log P(Binomial(n, q) = k) for 0 < k < n, from log q and log(1 - q), to
// about 1e-15 relative even when every factor is huge: Stirling's formula
// with its error terms, and the two deviances from the mean.
double log_binomial_pmf(double k, double n, double log_q, double log_not_q) {
  const double log_n = std::log(n);
  return stirling_error(n) - stirling_error(k) - stirling_error(n - k) -
         deviance(k, n * std::exp(log_q), log_n + log_q) - deviance(n - k, n * std::exp(log_not_q), log_n + log_not_q) +
         0.5 * (std::log(n / (k * (n - k))) - kLogTwoPi);
}

// log C(n, k) for 0 < k < n.
double log_choose(double n, double k) {
  return log_binomial_pmf(k, n, -std::numbers::ln2, -std::numbers::ln2) + n * std::numbers::ln2;
}

// log(1 - e^x) for x < 0, accurate at both ends.
double log_one_minus_exp(double x) {
  return x < -std::numbers::ln2 ? std::log1p(-std::exp(x)) : std::log(-std::expm1(x));
}

// The per-group distribution tilted by t = e^s: a_j proportional to C(r, j)
// t^j for j = 0 .. r-1 (how many of a group's r slots died, given that not
// all did, when each dies with probability t / (1 + t)).
std::vector<double> tilted_group(const std::vector<double>& log_binomials, double s) {
  std::vector<double> a(log_binomials.size());
  double top = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < a.size(); ++j) {
    a[j] = log_binomials[j] + static_cast<double>(j) * s;
    top = std::max(top, a[j]);
  }
  double total = 0;
  for (double& weight : a) total += weight = std::exp(weight - top);
  for (double& weight : a) weight /= total;
  return a;
}

double mean_of(const std::vector<double>& a) {
  double mean = 0;
  for (std::size_t j = 0; j < a.size(); ++j) mean += static_cast<double>(j) * a[j];
  return mean;
}

// log P(a_1 + ... + a_g = f) for g independent draws from `a` (support 0 ..
// r-1), by the inverse discrete Fourier transform on M points, which returns
// the sum of P(S = f + m M) over all integers m. M > max(f, g(r-1) - f) makes
// every m != 0 fall outside the support: exact. Fewer points do when the
// mean of S is f (the saddle point): by Bernstein's inequality, with V the
// variance of S and every draw within r-1 of its mean,
//   P(|S - f| >= M) <= 2 exp(-M^2 / (2 V + 2 (r-1) M / 3)),
// and M^2 >= 160 V + 160 (r-1) M / 3 keeps all aliases together below
// 2e^-80, against a result of order 1/sqrt(V). M is odd, so the terms pair
// up as complex conjugates and only half are computed.
double log_sum_probability(const std::vector<double>& a, long long groups, long long f) {
  const auto r = static_cast<long long>(a.size());
  const auto g = static_cast<double>(groups);
  double mean = 0;
  double square = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    mean += static_cast<double>(j) * a[j];
    square += static_cast<double>(j * j) * a[j];
  }
  const double variance = g * std::max(0.0, square - mean * mean);
  const double linear = 160.0 * static_cast<double>(r - 1) / 3;
  const auto enough = static_cast<long long>(std::ceil((linear + std::sqrt(linear * linear + 640 * variance)) / 2)) + 1;
  long long points = std::min(std::max(f, groups * (r - 1) - f) + 1, enough);
  if (points % 2 == 0) ++points;
  const double step = 2 * std::numbers::pi / static_cast<double>(points);
  double sum = 0;
  for (long long k = 1; k <= points / 2; ++k) {
    // phi = E[e^(i theta a)] = 1 + w, with w = sum_j a_j (e^(i j theta) - 1),
    // so that neither rounding in sum(a_j) nor cancellation near theta = 0 is
    // multiplied by g when raised to the power g. e^(i j theta) - 1 by the
    // recurrence d_(j+1) = u d_j + (u - 1), u = e^(i theta), with u - 1 =
    // -2 sin^2(theta/2) + i sin(theta): relative error about j * 1e-16.
    const double half_sine = std::sin(step * static_cast<double>(k) / 2);
    const double sine = std::sin(step * static_cast<double>(k));
    const std::complex<double> u_minus_one(-2 * half_sine * half_sine, sine);
    const std::complex<double> u = 1.0 + u_minus_one;
    std::complex<double> d = 0;
    std::complex<double> w = 0;
    for (std::size_t j = 1; j < a.size(); ++j) {
      d = u * d + u_minus_one;
      w += a[j] * d;
    }
    // g log(1 + w), its real part as log1p so that small |w| keeps its digits.
    const double log_magnitude = g * 0.5 * std::log1p(2 * w.real() + std::norm(w));
    if (log_magnitude < -745) continue;  // underflows to 0
    const double angle = g * std::atan2(w.imag(), 1 + w.real());
    // f k theta, reduced modulo 2 pi exactly in integers.
    const double shift = step * static_cast<double>((f % points) * k % points);
    sum += std::exp(log_magnitude) * std::cos(angle - shift);
  }
  const double probability = (1 + 2 * sum) / static_cast<double>(points);
  return std::log(std::max(probability, std::numeric_limits<double>::min()));
}

// log P(no block lost after f failures), for g = p / r groups, when
// r <= f < g (r - 1). Each slot dying independently with probability q =
// t / (1 + t), no group is complete with probability (1 - q^r)^g; given
// that, the numbers dead per group are independent draws from
// `tilted_group`. Conditioning both sides on f deaths:
//   P(no loss | f) = (1 - q^r)^g P(S = f | no group complete) / P(Bin(p, q) = f)
// for every t > 0; t is the saddle point (E[S] = f), where both
// probabilities are of order 1/sd and so are computed to full precision.
double log_survival_inside(long long processes, long long copies, long long failures) {
  const long long groups = processes / copies;
  std::vector<double> log_binomials(static_cast<std::size_t>(copies));
  long double binomial = 1;  // C(r, j)
  for (long long j = 0; j < copies; ++j) {
    log_binomials[static_cast<std::size_t>(j)] = static_cast<double>(std::log(binomial));
    binomial = binomial * static_cast<long double>(copies - j) / static_cast<long double>(j + 1);
  }
  const double target = static_cast<double>(failures) / static_cast<double>(groups);
  double low = -1;
  double high = 1;
  while (mean_of(tilted_group(log_binomials, low)) > target) low *= 2;
  while (mean_of(tilted_group(log_binomials, high)) < target) high *= 2;
  for (int i = 0; i < 64; ++i) {
    const double middle = (low + high) / 2;
    (mean_of(tilted_group(log_binomials, middle)) < target ? low : high) = middle;
  }
  const double s = (low + high) / 2;
  const double log_q = -std::log1p(std::exp(-s));
  const double log_not_q = -std::log1p(std::exp(s));
  const double log_no_group_complete =
      static_cast<double>(groups) * log_one_minus_exp(static_cast<double>(copies) * log_q);
  return log_no_group_complete + log_sum_probability(tilted_group(log_binomials, s), groups, failures) -
         log_binomial_pmf(static_cast<double>(failures), static_cast<double>(processes), log_q, log_not_q);
}

// P(no block lost after f failures), with the ends where it is known exactly.
double survival(int processes, int copies, int failures) {
  const long long groups = processes / copies;
  const long long most = groups * (copies - 1);  // every group one short of complete
  if (failures < copies) return 1;
  if (failures > most) return 0;
  if (failures == most) {  // r ways per group to leave one survivor
    return std::exp(static_cast<double>(groups) * std::log(static_cast<double>(copies)) -
                    log_choose(processes, failures));
  }
  return std::min(1.0, std::exp(log_survival_inside(processes, copies, failures)));
}

// log Gamma(g + a) - log Gamma(g) for g >= 1 and 0 < a <= 1, without the
// cancellation of two large lgamma values.
double log_gamma_ratio(double g, double a) {
  if (g < 17) return std::lgamma(g + a) - std::lgamma(g);
  // log Gamma(x + 1) = (x + 1/2) log x - x + log(2 pi) / 2 + stirling_error(x)
  const double x = g - 1;
  return (x + 0.5) * std::log1p(a / x) + a * std::log(x + a) - a + stirling_error(x + a) - stirling_error(x);
}

// The nodes of a node-major layout form disjoint groups of r (the condition
// of `node_probability`), or `UsageError` saying why not.
void check_node_groups(int nodes, int processes_per_node, int copies) {
  if (nodes < 1 || processes_per_node < 1 || copies < 1) {
    throw UsageError(
        "data_loss: nodes, processes per node and copies must be at least 1, got nodes=" + std::to_string(nodes) +
        ", processes per node=" + std::to_string(processes_per_node) + ", copies=" + std::to_string(copies));
  }
  const long long processes = static_cast<long long>(nodes) * processes_per_node;
  if (processes > std::numeric_limits<int>::max()) {
    throw UsageError("data_loss: " + std::to_string(processes) +
                     " processes are more than a layout holds; use fewer nodes");
  }
  if (copies > processes) {
    throw UsageError("data_loss: " + std::to_string(copies) +
                     " copies need at least that many processes, but there are " + std::to_string(processes) +
                     "; lower the copies");
  }
  if (copies > nodes) {
    throw UsageError("data_loss: " + std::to_string(copies) + " copies on " + std::to_string(nodes) +
                     " nodes put two copies of a block on one node, so the nodes do not form disjoint groups; use "
                     "data_loss::simulate_nodes for this layout");
  }
  if (nodes % copies != 0) {
    throw UsageError(
        "data_loss: " + std::to_string(nodes) + " nodes are not a multiple of " + std::to_string(copies) +
        " copies, so the copies of one node's blocks go to overlapping sets of nodes and there is no closed "
        "form; use data_loss::simulate_nodes for this layout");
  }
}

// Kills the failure units (slots or nodes) in a random order, `trials`
// times; `unit_of_slot[s]` is the unit of slot s, 0 .. units-1.
Simulation simulate_units(const Placement& placement, const std::vector<int>& unit_of_slot, int units, int trials,
                          std::uint64_t seed, const std::string& where) {
  if (trials < 1) throw UsageError(where + ": needs at least one trial, got " + std::to_string(trials));
  // The distinct sets of units that hold the same blocks: data is lost when
  // every unit of one such set has failed.
  std::set<std::vector<int>> holder_sets;
  for (const auto& piece : placement.pieces({BlockId{0}, BlockId{placement.config().blocks}})) {
    std::vector<int> holders;
    for (const Slot slot : piece.holders) holders.push_back(unit_of_slot[static_cast<std::size_t>(slot.value())]);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    holder_sets.insert(std::move(holders));
  }
  std::vector<int> losses_at(static_cast<std::size_t>(units) + 1, 0);  // trials whose first loss is at f
  std::vector<int> order(static_cast<std::size_t>(units));
  std::vector<int> failure_time(static_cast<std::size_t>(units));
  std::uint64_t state = seed;
  double total_failures = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::iota(order.begin(), order.end(), 0);
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[detail::splitmix64(state) % i]);
    }
    for (int f = 0; f < units; ++f) failure_time[static_cast<std::size_t>(order[static_cast<std::size_t>(f)])] = f + 1;
    int first_loss = units;
    for (const auto& set : holder_sets) {
      int dies = 0;
      for (const int unit : set) dies = std::max(dies, failure_time[static_cast<std::size_t>(unit)]);
      first_loss = std::min(first_loss, dies);
    }
    ++losses_at[static_cast<std::size_t>(first_loss)];
    total_failures += first_loss;
  }
  Simulation result;
  result.loss_probability.resize(static_cast<std::size_t>(units) + 1);
  int lost = 0;
  for (int f = 0; f <= units; ++f) {
    lost += losses_at[static_cast<std::size_t>(f)];
    result.loss_probability[static_cast<std::size_t>(f)] = static_cast<double>(lost) / trials;
  }
  result.mean_failures_until_loss = total_failures / trials;
  return result;
}

}  // namespace

double probability(int processes, int copies, int failures) {
  check(processes, copies);
  if (failures < 0 || failures > processes) {
    throw UsageError("data_loss::probability: failures must be in [0, " + std::to_string(processes) + "], got " +
                     std::to_string(failures));
  }
  return 1 - survival(processes, copies, failures);
}

double expected_failures_until_loss(int processes, int copies) {
  check(processes, copies);
  // The kill order is that of independent exponential death times. A
  // process's death counts iff no group was complete before it: for death
  // time v (uniform after the change of variables), every other group must
  // still have a survivor, with probability (1 - v^r)^(g-1). So E[F] = p *
  // integral_0^1 (1 - v^r)^(g-1) dv = p Gamma(1 + 1/r) Gamma(g) / Gamma(g + 1/r).
  if (copies == 1) return 1;  // the first failure loses data
  const int groups = processes / copies;
  if (groups == 1) return processes;  // every process must fail
  const double a = 1.0 / copies;
  return processes * std::exp(std::lgamma(1 + a) - log_gamma_ratio(groups, a));
}

double node_probability(int nodes, int processes_per_node, int copies, int nodes_down) {
  check_node_groups(nodes, processes_per_node, copies);
  if (nodes_down < 0 || nodes_down > nodes) {
    throw UsageError("data_loss::node_probability: nodes down must be in [0, " + std::to_string(nodes) + "], got " +
                     std::to_string(nodes_down));
  }
  return probability(nodes, copies, nodes_down);
}

double expected_node_failures_until_loss(int nodes, int processes_per_node, int copies) {
  check_node_groups(nodes, processes_per_node, copies);
  return expected_failures_until_loss(nodes, copies);
}

Simulation simulate(const Placement& placement, int trials, std::uint64_t seed) {
  const int slots = placement.config().slots;
  std::vector<int> unit_of_slot(static_cast<std::size_t>(slots));
  std::iota(unit_of_slot.begin(), unit_of_slot.end(), 0);
  return simulate_units(placement, unit_of_slot, slots, trials, seed, "data_loss::simulate");
}

Simulation simulate_nodes(const Placement& placement, const std::vector<int>& node_of_slot, int trials,
                          std::uint64_t seed) {
  const int slots = placement.config().slots;
  if (node_of_slot.size() != static_cast<std::size_t>(slots)) {
    throw UsageError("data_loss::simulate_nodes: the node list names " + std::to_string(node_of_slot.size()) +
                     " slots, but the placement has " + std::to_string(slots) + "; give one node per slot");
  }
  std::vector<int> keys = node_of_slot;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<int> unit_of_slot(static_cast<std::size_t>(slots));
  for (std::size_t s = 0; s < unit_of_slot.size(); ++s) {
    unit_of_slot[s] = static_cast<int>(std::lower_bound(keys.begin(), keys.end(), node_of_slot[s]) - keys.begin());
  }
  return simulate_units(placement, unit_of_slot, static_cast<int>(keys.size()), trials, seed,
                        "data_loss::simulate_nodes");
}

}  // namespace reprise::data_loss
