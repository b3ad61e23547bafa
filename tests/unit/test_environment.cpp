// Environment refuses a finalisation timeout it cannot read before it
// initialises MPI, instead of waiting forever at the end of the run.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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

}  // namespace
