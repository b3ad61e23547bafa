#pragma once
// What every GoogleTest main of an MPI test does for scripts/reprise-run:
// each process records its outcome; the first failed assertion records
// "failed" and ends the whole job at once, so that no other process waits
// forever. Shared by mpi_main.cpp and the message log's own main.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "reprise/inject.hpp"

namespace reprise::test {

/// This process's rank as the launcher knows it (-1 for a replacement, which learns its rank later).
inline OriginalRank launch_rank() {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return OriginalRank{-1};
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return OriginalRank{rank};
}

/// Records the first failed assertion and aborts the job.
class AbortOnFailure : public testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(OriginalRank me) : _me(me) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    const std::string reason = std::string(result.file_name() ? result.file_name() : "?") + ":" +
                               std::to_string(result.line_number()) + ": " + result.summary();
    std::fprintf(stderr, "[process %d] FAILED %s\n", _me.value(), reason.c_str());
    std::fflush(stderr);
    inject::record_outcome(inject::Outcome::kFailed, _me, reason);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  OriginalRank _me;
};

/// Records "running", keeps the result printer on process 0 only, and
/// installs AbortOnFailure.
inline void start_recording(OriginalRank me) {
  inject::record_outcome(inject::Outcome::kRunning, me);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (me.value() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new AbortOnFailure(me));
}

/// Records what RUN_ALL_TESTS returned.
inline void record_result(OriginalRank me, int result) {
  inject::record_outcome(result == 0 ? inject::Outcome::kPassed : inject::Outcome::kFailed, me,
                         result == 0 ? "" : "RUN_ALL_TESTS returned non-zero");
}

}  // namespace reprise::test
