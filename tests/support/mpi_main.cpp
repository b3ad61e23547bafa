// GoogleTest main for MPI tests. Every process records its outcome for
// scripts/reprise-run; the first failed assertion records "failed" and
// ends the whole job at once, so that no other process waits forever.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "reprise/environment.hpp"
#include "reprise/inject.hpp"

namespace {

reprise::OriginalRank launch_rank() {
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return reprise::OriginalRank{-1};  // a replacement learns its rank later
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return reprise::OriginalRank{rank};
}

class AbortOnFailure : public testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(reprise::OriginalRank me) : _me(me) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    const std::string reason = std::string(result.file_name() ? result.file_name() : "?") + ":" +
                               std::to_string(result.line_number()) + ": " + result.summary();
    std::fprintf(stderr, "[process %d] FAILED %s\n", _me.value(), reason.c_str());
    std::fflush(stderr);
    reprise::inject::record_outcome(reprise::inject::Outcome::kFailed, _me, reason);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  reprise::OriginalRank _me;
};

/// `$REPRISE_TEST_ARM`, "point@rank": arms that fault point in every
/// process, including those started later by respawn or migrate (which a
/// test body cannot reach before they join).
void arm_from_environment() {
  const char* text = std::getenv("REPRISE_TEST_ARM");
  if (text == nullptr) return;
  const std::string spec(text);
  const auto at = spec.rfind('@');
  if (at == std::string::npos) {
    std::fprintf(stderr, "REPRISE_TEST_ARM='%s': expected point@rank\n", text);
    std::exit(2);
  }
  reprise::inject::arm(spec.substr(0, at), reprise::OriginalRank{std::stoi(spec.substr(at + 1))});
}

}  // namespace

int main(int argc, char** argv) {
  reprise::Environment environment(argc, argv);
  testing::InitGoogleTest(&argc, argv);
  arm_from_environment();
  const reprise::OriginalRank me = launch_rank();
  reprise::inject::record_outcome(reprise::inject::Outcome::kRunning, me);
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  if (me.value() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new AbortOnFailure(me));
  const int result = RUN_ALL_TESTS();
  reprise::inject::record_outcome(result == 0 ? reprise::inject::Outcome::kPassed : reprise::inject::Outcome::kFailed,
                                  me, result == 0 ? "" : "RUN_ALL_TESTS returned non-zero");
  environment.set_exit_status(result);
  return result;
}
