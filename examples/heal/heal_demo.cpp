// The foundation demo: 8 processes compute a long sum step by step; two of
// them are killed for real (SIGKILL) at random steps. The survivors see the
// failure, heal the communicator by shrinking, redo the interrupted step on
// fewer processes, and finish with a result that one process then checks by
// computing the whole sum alone.
//
//   heal_demo [--steps N] [--items-per-step N] [--kills K] [--seed S]
//
// REPRISE_FAULTS="RANK@STEP,..." replaces the random schedule.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "../common/demo_support.hpp"
#include "reprise/reprise.hpp"

namespace {

struct Options {
  std::uint64_t steps = 400;
  std::uint64_t items_per_step = 2'000'000;
  int kills = 2;
  std::uint64_t seed = std::random_device{}();
};

Options parse(int argc, char** argv) {
  Options options;
  demo::parse_demo_flags(
      argc, argv,
      {"heal_demo",
       "A long sum computed step by step; processes are killed for real, the survivors shrink and redo\n"
       "the step, and one process checks the result alone. REPRISE_FAULTS=\"RANK@STEP,...\" replaces the\n"
       "random kills.",
       "steps"},
      options,
      {demo::number_flag("--steps", "steps", options.steps),
       demo::number_flag("--items-per-step", "numbers summed per step", options.items_per_step)});
  return options;
}

/// A hash of i (the splitmix64 finaliser): real work with no closed form.
std::uint64_t item(std::uint64_t i) {
  i = (i ^ (i >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  i = (i ^ (i >> 27U)) * 0x94d049bb133111ebULL;
  return i ^ (i >> 31U);
}

/// Sum of item(i) over [begin, end), modulo 2^64.
std::uint64_t sum_items(std::uint64_t begin, std::uint64_t end) {
  std::uint64_t sum = 0;
  for (std::uint64_t i = begin; i < end; ++i) sum += item(i);
  return sum;
}

int run_demo(demo::Demo<Options>& begun) {
  reprise::Comm& comm = begun.comm;
  const auto me = comm.original_rank();
  const Options& options = begun.options;
  const reprise::inject::Schedule& schedule = begun.schedule;
  const bool reporter = comm.rank().value() == 0;
  if (reporter) {
    std::printf("reprise demo: %d processes sum a hash of %llu items in %llu steps\n", comm.size(),
                static_cast<unsigned long long>(options.steps * options.items_per_step),
                static_cast<unsigned long long>(options.steps));
    std::printf("  fault plan (original rank@step, seed %llu): %s%s\n", static_cast<unsigned long long>(options.seed),
                schedule.to_string().c_str(),
                reprise::Comm::fault_tolerant() ? "" : "  [ULFM is OFF: a kill ends the job]");
    std::fflush(stdout);
  }

  const auto start = std::chrono::steady_clock::now();
  std::uint64_t total = 0;
  std::uint64_t step = 0;
  int recoveries = 0;
  while (step < options.steps) {
    schedule.apply(me, step, comm.is_replacement());
    // This step's items, split evenly over whoever is alive now.
    const std::uint64_t first = step * options.items_per_step;
    const auto share = [&](int rank) {
      return first +
             options.items_per_step * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(comm.size());
    };
    const std::uint64_t partial = sum_items(share(comm.rank().value()), share(comm.rank().value() + 1));
    // Commit the step only if every survivor got its sum: a uniform decision.
    std::uint64_t step_sum = 0;
    if (comm.attempt([&] { step_sum = comm.allreduce(static_cast<unsigned long>(partial), MPI_SUM); })) {
      total += step_sum;
      ++step;
      continue;
    }
    const auto heal_start = std::chrono::steady_clock::now();
    auto healed = comm.shrink();
    const double heal_ms = 1e3 * demo::seconds_since(heal_start);
    ++recoveries;
    if (healed.rank().value() == 0) {
      std::string lost;
      for (auto rank : healed.failed()) {
        if (!comm.rank_of(rank)) continue;  // reported in an earlier recovery
        lost += (lost.empty() ? "#" : ", #") + std::to_string(rank.value());
      }
      std::printf("  step %4llu: lost %s; %d survivors healed the communicator in %.1f ms and redo the step\n",
                  static_cast<unsigned long long>(step), lost.c_str(), healed.size(), heal_ms);
      std::fflush(stdout);
    }
    comm = std::move(healed);
  }
  const double elapsed = demo::seconds_since(start);
  // One process recomputes the whole sum alone, as a failure-free reference,
  // and tells the others whether the resilient run got it right.
  int correct = 0;
  if (comm.rank().value() == 0) {
    const std::uint64_t expected = sum_items(0, options.steps * options.items_per_step);
    correct = total == expected ? 1 : 0;
    std::printf("  result %016llx, computed again by one process: %016llx -> %s\n",
                static_cast<unsigned long long>(total), static_cast<unsigned long long>(expected),
                correct != 0 ? "CORRECT" : "WRONG");
    std::printf("  %d of %d processes finished after %d recoveries in %.2f s\n", comm.size(), comm.original_size(),
                recoveries, elapsed);
    std::fflush(stdout);
  }
  comm.bcast(correct, reprise::Rank{0});
  return demo::finish(begun.environment, me, correct != 0, "wrong result");
}

}  // namespace

int main(int argc, char** argv) {
  return demo::main_of<Options>(
      argc, argv, parse, [](const Options& o) { return o.steps; }, run_demo);
}
