#pragma once
// What the benchmarks share: timing collective steps (as long as the slowest
// process took), medians, and a memcpy baseline step.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/environment.hpp"
#include "reprise/inject.hpp"

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
inline std::vector<double> time_interleaved(reprise::Comm& comm, int repeats,
                                            const std::vector<std::function<void()>>& steps) {
  std::vector<std::vector<double>> times(steps.size());
  for (int i = 0; i < repeats; ++i) {
    for (std::size_t s = 0; s < steps.size(); ++s) times[s].push_back(time_once(comm, steps[s]));
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(std::move(t)));
  return medians;
}

/// The page visiting orders of the protected-memory benchmarks.
inline const std::vector<std::string> kPageOrders{"asc", "random", "desc"};

/// The page indices 0..pages-1 in the visiting order `name` (random: one
/// fixed permutation per `seed`).
inline std::vector<std::size_t> page_order(const std::string& name, std::size_t pages, std::uint64_t seed) {
  std::vector<std::size_t> order(pages);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (name == "desc") std::reverse(order.begin(), order.end());
  if (name == "random") std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

/// A command line a benchmark cannot run with (exit status 2).
struct BadOption : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The value of `flag` as a number of at least `least`; BadOption if it is not.
template <class Number>
Number number(const std::string& flag, const std::string& value, Number least) {
  Number parsed{};
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (error != std::errc() || end != value.data() + value.size() || !(parsed >= least) || !std::isfinite(parsed)) {
    std::ostringstream message;
    message << flag << " wants a number >= " << least << ", not '" << value << "'";
    throw BadOption(message.str());
  }
  return parsed;
}

/// The comma-separated items of `value` (a flag's list).
inline std::vector<std::string> items(const std::string& value) {
  std::vector<std::string> result;
  std::stringstream list(value);
  for (std::string item; std::getline(list, item, ',');) result.push_back(item);
  return result;
}

/// Calls `take(flag, value)` for each `--flag value` pair of the command
/// line; BadOption for a flag with no value.
template <class Take>
void for_each_flag(int argc, char** argv, Take take) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw BadOption(flag + " needs a value (or is unknown)");
    take(flag, std::string(argv[++i]));
  }
}

/// The main of a one-process benchmark: `--help` prints `usage`; a
/// BadOption from `parse(argc, argv)` prints it with `usage` and exits 2;
/// any other exception from `run(options)` is printed and exits 1.
template <class Parse, class Run>
int run_main(const char* name, const char* usage, int argc, char** argv, Parse parse, Run run) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage, stdout);
    return 0;
  }
  try {
    const auto options = parse(argc, argv);
    try {
      run(options);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s\n", error.what());
      return 1;
    }
  } catch (const BadOption& error) {
    std::fprintf(stderr, "%s: %s\n%s", name, error.what(), usage);
    return 2;
  }
  return 0;
}

/// The main of an MPI benchmark: MPI started, the process recorded as
/// running for the launcher, then `run_main` with `run(comm, options)`; the
/// status it returns is also the one a watched finalisation exits with.
template <class Parse, class Run>
int run_mpi_main(const char* name, const char* usage, int argc, char** argv, Parse parse, Run run) {
  reprise::Environment environment(argc, argv);
  auto comm = reprise::Comm::world();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, comm.original_rank());
  const int status = run_main(name, usage, argc, argv, parse, [&](const auto& options) { run(comm, options); });
  environment.set_exit_status(status);
  return status;
}

/// A memcpy of `bytes` bytes on every process, as a step to time.
struct Memcpy {
  explicit Memcpy(std::size_t bytes) : from(bytes, std::byte{1}), to(bytes) {}
  void operator()() { std::memcpy(to.data(), from.data(), from.size()); }
  std::vector<std::byte> from;
  std::vector<std::byte> to;
};

}  // namespace bench
