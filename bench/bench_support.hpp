#pragma once
// What the benchmarks share: timing collective steps (as long as the slowest
// process took), medians, and a memcpy baseline step.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "reprise/comm.hpp"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Times one run of `step` on all processes: as long as the slowest took.
template <class Step>
double time_once(reprise::Comm& comm, Step&& step) {
  comm.barrier();
  const auto start = Clock::now();
  step();
  return comm.allreduce(seconds(start), MPI_MAX);
}

/// Runs every step once per repeat, in turn, and returns each step's median.
/// Interleaving gives all steps (and the memcpy baseline among them) the
/// same share of a noisy machine, so their ratios are fair.
inline std::vector<double> time_interleaved(reprise::Comm& comm, int repeats, const std::vector<std::function<void()>>& steps) {
  std::vector<std::vector<double>> times(steps.size());
  for (int i = 0; i < repeats; ++i) {
    for (std::size_t s = 0; s < steps.size(); ++s) times[s].push_back(time_once(comm, steps[s]));
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(std::move(t)));
  return medians;
}

/// A memcpy of `bytes` bytes on every process, as a step to time.
struct Memcpy {
  explicit Memcpy(std::size_t bytes) : from(bytes, std::byte{1}), to(bytes) {}
  void operator()() { std::memcpy(to.data(), from.data(), from.size()); }
  std::vector<std::byte> from;
  std::vector<std::byte> to;
};

}  // namespace bench
