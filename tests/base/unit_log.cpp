// The logger (src/base/log.hpp): the level REPRISE_LOG_LEVEL sets, the
// prefix naming the process, and the rank filter that writes a line every
// process would write once, by the lead, and at debug elsewhere. Each case
// runs in a child process of its own (a death test), where the level is read
// afresh from the environment it sets.

#include <gtest/gtest.h>

#include <cstdlib>

#include "log.hpp"

namespace {

namespace logging = reprise::logging;
using logging::Level;
using logging::Reach;

/// In the child: REPRISE_LOG_LEVEL set to `level` ("" unset), one line of each level about this process.
void each_level(const char* level) {
  if (*level != '\0') ::setenv("REPRISE_LOG_LEVEL", level, 1);
  logging::set_identity(3, true);
  logging::error("e %d", 1);
  logging::warning("w %s", "two");
  logging::info("i %d", 3);
  logging::debug("d %d", 4);
  std::_Exit(0);
}

TEST(Log, TheDefaultShowsInfoAndAboveEachLinePrefixedWithRankAndLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::unsetenv("REPRISE_LOG_LEVEL");
  EXPECT_EXIT(each_level(""), ::testing::ExitedWithCode(0),
              "^reprise\\[3\\] error: e 1\nreprise\\[3\\] warning: w two\nreprise\\[3\\] info: i 3\n$");
}

TEST(Log, EachLevelShowsItsLinesAndThoseAbove) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(each_level("error"), ::testing::ExitedWithCode(0), "^reprise\\[3\\] error: e 1\n$");
  EXPECT_EXIT(each_level("warning"), ::testing::ExitedWithCode(0),
              "^reprise\\[3\\] error: e 1\nreprise\\[3\\] warning: w two\n$");
  EXPECT_EXIT(each_level("debug"), ::testing::ExitedWithCode(0),
              "^reprise\\[3\\] error: e 1\nreprise\\[3\\] warning: w two\nreprise\\[3\\] info: i 3\n"
              "reprise\\[3\\] debug: d 4\n$");
}

TEST(Log, AProcessOfUnknownRankIsNamedWithoutOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto say = [] {
    ::unsetenv("REPRISE_LOG_LEVEL");
    logging::warning("before MPI");
    std::_Exit(0);
  };
  EXPECT_EXIT(say(), ::testing::ExitedWithCode(0), "^reprise warning: before MPI\n$");
}

/// In the child: a line every process would write, from a lead or not, at `level`.
void every_process(bool lead, const char* level) {
  ::setenv("REPRISE_LOG_LEVEL", level, 1);
  logging::set_identity(lead ? 0 : 2, lead);
  logging::say(Level::kWarning, Reach::kEveryProcess, "the same everywhere");
  logging::say(Level::kWarning, Reach::kThisProcess, "mine");
  std::_Exit(0);
}

TEST(Log, ALineEveryProcessWouldWriteIsWrittenByTheLeadAndElsewhereAtDebug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(every_process(true, "info"), ::testing::ExitedWithCode(0),
              "^reprise\\[0\\] warning: the same everywhere\nreprise\\[0\\] warning: mine\n$");
  EXPECT_EXIT(every_process(false, "info"), ::testing::ExitedWithCode(0), "^reprise\\[2\\] warning: mine\n$");
  EXPECT_EXIT(every_process(false, "debug"), ::testing::ExitedWithCode(0),
              "^reprise\\[2\\] debug: the same everywhere\nreprise\\[2\\] warning: mine\n$");
}

TEST(Log, ShownAnswersAsTheLinesAreWritten) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto check = [] {
    ::setenv("REPRISE_LOG_LEVEL", "warning", 1);
    logging::set_identity(1, false);
    const bool right = logging::shown(Level::kWarning) && !logging::shown(Level::kInfo) &&
                       !logging::shown(Level::kWarning, Reach::kEveryProcess) &&
                       logging::threshold() == Level::kWarning && logging::prefix(Level::kInfo) == "reprise[1] info: ";
    std::_Exit(right ? 0 : 1);
  };
  EXPECT_EXIT(check(), ::testing::ExitedWithCode(0), "^$");
}

// Refusing it is Environment's (scripts/check-settings): the logger must
// still write that refusal's line.
TEST(Log, ALevelTheSettingDoesNotTakeLeavesTheDefault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(each_level("loud"), ::testing::ExitedWithCode(0),
              "^reprise\\[3\\] error: e 1\nreprise\\[3\\] warning: w two\nreprise\\[3\\] info: i 3\n$");
}

}  // namespace
