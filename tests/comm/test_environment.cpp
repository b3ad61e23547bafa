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
      EXPECT_NE(std::string(error.what()).find(std::string("REPRISE_FINALIZE_TIMEOUT=") + bad + " is not a number"),
                std::string::npos)
          << error.what();
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
  for (const char* bad : {"two", "-1", "2x", " 2", "1.5"}) {
    EXPECT_EQ(spares_verdict("REPRISE_SPARES", bad), std::string("REPRISE_SPARES=") + bad +
                                       " is not a number of spare processes (a whole number, 0 or more)");
  }
  for (const char* huge : {"4294967297", "2147483648", "99999999999999999999"}) {
    EXPECT_EQ(spares_verdict("REPRISE_SPARES", huge),
              std::string("REPRISE_SPARES=") + huge + " is too large: a job cannot have that many processes");
  }
}

TEST(Environment, ASpareWarmSizeThatIsNotAWholeNumberOfMiBIsRefused) {
  for (const char* bad : {"lots", "-1", "1.5", "64M", "1073741825", "99999999999999999999"}) {
    EXPECT_EQ(spares_verdict("REPRISE_SPARE_WARM_MIB", bad),
              std::string("REPRISE_SPARE_WARM_MIB=") + bad +
                  " is not a size in MiB (a whole number, 0 or more, below 2^30): how much heap memory each spare keeps "
                  "resident for the state it may take over");
  }
  EXPECT_EQ(spares_verdict("REPRISE_SPARE_WARM_MIB", "64"), "accepted");
}

}  // namespace
