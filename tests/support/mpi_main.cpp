// GoogleTest main for MPI tests. Every process records its outcome for
// scripts/reprise-run (test_outcome.hpp).

#include <gtest/gtest.h>
#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "reprise/environment.hpp"
#include "reprise/inject.hpp"
#include "test_outcome.hpp"

namespace {

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

/// `$REPRISE_TEST_KILL_IN_INIT=MS`: the first process that MPI_Comm_spawn
/// starts in the job (a marker file in `$REPRISE_OUTCOME_DIR` says which)
/// kills itself MS milliseconds into its MPI_Init, so that the spawn it
/// belongs to never ends. Open MPI sets OMPI_PARENT_PORT in spawned processes.
void kill_first_spawned_in_init() {
  const char* delay = std::getenv("REPRISE_TEST_KILL_IN_INIT");
  const char* dir = std::getenv("REPRISE_OUTCOME_DIR");
  if (delay == nullptr || dir == nullptr || std::getenv("OMPI_PARENT_PORT") == nullptr) return;
  const std::string marker = std::string(dir) + "/killed-in-init";
  const int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) return;
  ::close(fd);
  std::thread([milliseconds = std::stoi(delay)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
    reprise::inject::kill_self(reprise::OriginalRank{-1});
  }).detach();
}

/// `$REPRISE_TEST_THREAD_LEVEL=single`: MPI_THREAD_SINGLE asked for, for
/// the paths a program takes when MPI grants no threads; else the default.
int thread_level_asked() {
  const char* level = std::getenv("REPRISE_TEST_THREAD_LEVEL");
  if (level == nullptr) return MPI_THREAD_MULTIPLE;
  if (std::string(level) != "single") {
    std::fprintf(stderr, "REPRISE_TEST_THREAD_LEVEL='%s': expected single\n", level);
    std::exit(2);
  }
  return MPI_THREAD_SINGLE;
}

}  // namespace

int main(int argc, char** argv) {
  kill_first_spawned_in_init();
  const int thread_level = thread_level_asked();
  reprise::Environment environment(argc, argv, thread_level);
  if (thread_level == MPI_THREAD_SINGLE && environment.thread_level() != MPI_THREAD_SINGLE) {
    std::fprintf(stderr, "REPRISE_TEST_THREAD_LEVEL=single: MPI granted thread level %d instead\n",
                 environment.thread_level());
    environment.set_exit_status(2);
    return 2;
  }
  testing::InitGoogleTest(&argc, argv);
  arm_from_environment();
  const reprise::OriginalRank me = reprise::test::launch_rank();
  reprise::test::start_recording(me);
  const int result = RUN_ALL_TESTS();
  reprise::test::record_result(me, result);
  environment.set_exit_status(result);
  return result;
}
