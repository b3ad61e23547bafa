#pragma once
// What the demos share: a fault plan every process agrees on, the time since
// a moment, and reporting the run's verdict to the launcher and the shell.

#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "reprise/reprise.hpp"

namespace demo {

/// The fault plan: REPRISE_FAULTS if set, otherwise `kills` random original
/// ranks at random steps below `steps`. Every process drew its own `seed`;
/// all use the largest, so all build the same plan. Returns that seed too.
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
  return plan;
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
