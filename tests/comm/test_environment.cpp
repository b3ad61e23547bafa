// Environment refuses a finalisation timeout it cannot read before it
// initialises MPI, instead of waiting forever at the end of the run.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "reprise/comm.hpp"
#include "reprise/environment.hpp"
#include "reprise/error.hpp"

namespace {

TEST(Environment, ABadFinalizeTimeoutIsRefusedBeforeMpiStarts) {
  int argc = 1;
  char name[] = "unit_environment";
  char* args[] = {name, nullptr};
  char** argv = args;
  for (const char* bad : {"five", "5s", "-1", "86401", "99999999999999999999"}) {
    ::setenv("REPRISE_FINALIZE_TIMEOUT", bad, 1);
    try {
      const reprise::Environment environment(argc, argv);
      ADD_FAILURE() << "REPRISE_FINALIZE_TIMEOUT=" << bad << " was accepted";
    } catch (const reprise::UsageError& error) {
      EXPECT_EQ(std::string(error.what()), std::string("REPRISE_FINALIZE_TIMEOUT=") + bad +
                                               ", from the environment, is refused: it takes a whole number of "
                                               "seconds from 0 to 86400");
    }
  }
  ::unsetenv("REPRISE_FINALIZE_TIMEOUT");
}

// What a process started alone says when Comm::world() reads `variable`=`value`
// (a setting of the spare processes): the UsageError's text, or "accepted".
// In a child process, since MPI starts only once per process.
std::string spares_verdict(const char* variable, const char* value) {
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return "no pipe";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_ends[0]);
    ::setenv(variable, value, 1);
    std::string verdict = "accepted";
    int argc = 1;
    char name[] = "unit_environment";
    char* args[] = {name, nullptr};
    char** argv = args;
    try {
      reprise::Environment environment(argc, argv);
      (void)reprise::Comm::world();
    } catch (const reprise::UsageError& error) {
      verdict = error.what();
    }
    (void)!::write(pipe_ends[1], verdict.data(), verdict.size());
    std::_Exit(0);
  }
  ::close(pipe_ends[1]);
  std::string verdict;
  char buffer[256];
  for (ssize_t got = 0; (got = ::read(pipe_ends[0], buffer, sizeof buffer)) > 0;) {
    verdict.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return verdict;
}

TEST(Environment, ASpareCountThatIsNotANumberOrTooLargeIsRefused) {
  for (const char* bad : {"two", "-1", "2x", " 2", "1.5", "4294967297", "2147483648", "99999999999999999999"}) {
    EXPECT_EQ(spares_verdict("REPRISE_SPARES", bad),
              std::string("REPRISE_SPARES=") + bad +
                  ", from the environment, is refused: it takes a whole number from 0 to 2147483647");
  }
}

TEST(Environment, ASpareWarmSizeThatIsNotAWholeNumberOfMiBIsRefused) {
  for (const char* bad : {"lots", "-1", "1.5", "64M", "1073741825", "99999999999999999999"}) {
    EXPECT_EQ(spares_verdict("REPRISE_SPARE_WARM_MIB", bad),
              std::string("REPRISE_SPARE_WARM_MIB=") + bad +
                  ", from the environment, is refused: it takes a whole number of MiB from 0 to 1073741824");
  }
  EXPECT_EQ(spares_verdict("REPRISE_SPARE_WARM_MIB", "64"), "accepted");
}

}  // namespace
