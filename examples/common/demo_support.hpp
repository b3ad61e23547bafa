#pragma once
// What the demos share: a fault plan every process agrees on, the time since
// a moment, and reporting the run's verdict to the launcher and the shell.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "reprise/reprise.hpp"

namespace demo {

/// The fault plan: REPRISE_FAULTS if set, otherwise `kills` random original
/// ranks at random steps below `steps`. Every process drew its own `seed`;
/// all use the largest, so all build the same plan. Returns that seed too.
/// `UsageError` if REPRISE_FAULTS names a rank the job does not have.
struct FaultPlan {
  reprise::inject::Schedule schedule;
  std::uint64_t seed = 0;
};

inline FaultPlan agreed_fault_plan(reprise::Comm& comm, std::uint64_t seed, std::uint64_t steps, int kills) {
  FaultPlan plan;
  plan.seed = comm.allreduce(static_cast<unsigned long long>(seed), MPI_MAX);
  plan.schedule = std::getenv("REPRISE_FAULTS") != nullptr
                      ? reprise::inject::Schedule::from_env()
                      : reprise::inject::Schedule::random_exact(plan.seed, comm.size(), steps, kills);
  plan.schedule.validate(comm.size());
  return plan;
}

/// What a demo starts from: its options and the agreed fault plan.
template <class Options>
struct Start {
  Options options;
  reprise::inject::Schedule schedule;
};

/// Records that this process runs, parses the options with `parse` (which
/// throws `UsageError` on bad flags) and agrees on the fault plan over
/// `steps_of(options)` steps. A replacement process (spawned during a
/// recovery, while the others are inside it) takes no part in that
/// agreement and gets no faults. On a usage error, process 0 prints it, every
/// process records it, and nothing is returned: exit with
/// `environment.exit_status()`.
template <class Options, class Parse, class Steps>
std::optional<Start<Options>> start(reprise::Comm& comm, reprise::Environment& environment, int argc, char** argv,
                                    Parse parse, Steps steps_of) {
  const auto me = comm.original_rank();
  reprise::inject::record_outcome(reprise::inject::Outcome::running, me);
  try {
    Start<Options> begun{parse(argc, argv), {}};
    if (comm.is_replacement()) return begun;
    auto plan = agreed_fault_plan(comm, begun.options.seed, steps_of(begun.options), begun.options.kills);
    begun.options.seed = plan.seed;
    begun.schedule = std::move(plan.schedule);
    return begun;
  } catch (const reprise::UsageError& error) {
    if (comm.rank().value() == 0) std::fprintf(stderr, "%s\n", error.what());
    reprise::inject::record_outcome(reprise::inject::Outcome::failed, me, error.what());
    environment.set_exit_status(2);
    return std::nullopt;
  }
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Records the verdict for the launcher and returns the exit status, which
/// the environment also uses if finalisation has to be abandoned.
inline int finish(reprise::Environment& environment, reprise::OriginalRank me, bool correct, const char* why_not,
                  int failure_status = 1) {
  reprise::inject::record_outcome(correct ? reprise::inject::Outcome::passed : reprise::inject::Outcome::failed, me,
                                  correct ? "" : why_not);
  environment.set_exit_status(correct ? 0 : failure_status);
  return environment.exit_status();
}

}  // namespace demo
