#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "reprise/error.hpp"
#include "reprise/inject.hpp"

using reprise::OriginalRank;
using reprise::UsageError;
using namespace reprise::inject;

TEST(Schedule, ParsesAndPrintsBack) {
  const auto schedule = Schedule::parse("5@20:hang,3@10,7@10:kill,2@30:crash");
  ASSERT_EQ(schedule.faults().size(), 4U);
  EXPECT_EQ(schedule.faults()[0], (Fault{.rank = OriginalRank{3}, .step = 10, .action = Action::kKill}));
  EXPECT_EQ(schedule.faults()[1], (Fault{.rank = OriginalRank{7}, .step = 10, .action = Action::kKill}));
  EXPECT_EQ(schedule.faults()[2], (Fault{.rank = OriginalRank{5}, .step = 20, .action = Action::kHang}));
  EXPECT_EQ(schedule.faults()[3], (Fault{.rank = OriginalRank{2}, .step = 30, .action = Action::kCrash}));
  EXPECT_EQ(schedule.to_string(), "3@10,7@10,5@20:hang,2@30:crash");
  EXPECT_EQ(Schedule::parse(schedule.to_string()).faults(), schedule.faults());
  EXPECT_TRUE(Schedule::parse("").faults().empty());
}

// A node fault names the node; its processes are found by bind_nodes (MPI,
// tested on the cluster: tests/cluster and the demos there).
TEST(Schedule, ParsesNodeFaultsAndPrintsThemBack) {
  const auto schedule = Schedule::parse("node2@30,3@10");
  ASSERT_EQ(schedule.faults().size(), 2U);
  EXPECT_EQ(schedule.faults()[0], (Fault{.rank = OriginalRank{3}, .step = 10, .action = Action::kKill}));
  EXPECT_EQ(schedule.faults()[1].node, 2);
  EXPECT_EQ(schedule.faults()[1].step, 30U);
  EXPECT_EQ(schedule.to_string(), "3@10,node2@30");
  EXPECT_EQ(Schedule::parse(schedule.to_string()).faults(), schedule.faults());
  EXPECT_NO_THROW(schedule.validate(4)) << "a node fault names no rank";
}

TEST(Schedule, FindsTheFaultAtAStep) {
  const auto schedule = Schedule::parse("3@10");
  EXPECT_TRUE(schedule.at(OriginalRank{3}, 10).has_value());
  EXPECT_FALSE(schedule.at(OriginalRank{3}, 11).has_value());
  EXPECT_FALSE(schedule.at(OriginalRank{2}, 10).has_value());
}

// The message quotes the text and exactly the bad entry, and says what is wrong with it.
TEST(Schedule, RejectsMalformedTextNamingTheBadEntry) {
  struct Case {
    const char* text;
    const char* entry;
    const char* why;
  };
  const Case cases[] = {
      {"3", "3", "no '@' between the rank and the step"},
      {"x@1", "x@1", "the rank \"x\" is not a whole number from 0 up"},
      {"-1@4", "-1@4", "the rank \"-1\" is not a whole number from 0 up"},
      {"@4", "@4", "the rank \"\" is not a whole number from 0 up"},
      {"99999999999@4", "99999999999@4", "the rank \"99999999999\" is too large"},
      {"3@", "3@", "the step \"\" is not a whole number from 0 up"},
      {"3@x,5@20", "3@x", "the step \"x\" is not a whole number from 0 up"},
      {"1@2,3@4x", "3@4x", "the step \"4x\" is not a whole number from 0 up"},
      {"3@-4", "3@-4", "the step \"-4\" is not a whole number from 0 up"},
      {"3@99999999999999999999", "3@99999999999999999999", "the step \"99999999999999999999\" is too large"},
      {"3@4:explode", "3@4:explode", "the action \"explode\" is not kill, hang or crash"},
      {"3@4,3@5", "3@5", "rank 3 already has a fault (a process dies once)"},
      {"node2", "node2", "no '@' between the node and the step"},
      {"nodex@3", "nodex@3", "the node \"x\" is not a whole number from 0 up"},
      {"node0@3", "node0@3", "nodes count from 1"},
      {"node2@x", "node2@x", "the step \"x\" is not a whole number from 0 up"},
      {"node2@4,node2@9", "node2@9", "node 2 already has a fault (a node dies once)"},
  };
  for (const Case& c : cases) {
    try {
      (void)Schedule::parse(c.text);
      ADD_FAILURE() << "accepted '" << c.text << "'";
    } catch (const UsageError& error) {
      const std::string expected = std::string("fault schedule \"") + c.text + "\": entry \"" + c.entry + "\": ";
      const std::string what = error.what();
      EXPECT_EQ(what.rfind(expected, 0), 0U) << what;
      EXPECT_NE(what.find(c.why), std::string::npos) << what;
      EXPECT_NE(what.find("; expected RANK@STEP[:hang|:crash] or nodeK@STEP, e.g. 3@10,5@20:hang,node2@30"),
                std::string::npos)
          << what;
      EXPECT_EQ(error.mpi_error_class(), MPI_ERR_ARG);
    }
  }
}

TEST(Schedule, ErrorsInTheEnvironmentNameTheVariable) {
  ::setenv("REPRISE_TEST_FAULTS", "3@x,5@20", 1);
  try {
    (void)Schedule::from_env("REPRISE_TEST_FAULTS");
    ADD_FAILURE() << "accepted 3@x";
  } catch (const UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "REPRISE_TEST_FAULTS=\"3@x,5@20\": entry \"3@x\": the step \"x\" is not a whole number from 0 up; "
                 "expected RANK@STEP[:hang|:crash] or nodeK@STEP, e.g. 3@10,5@20:hang,node2@30");
  }
  ::unsetenv("REPRISE_TEST_FAULTS");
}

TEST(Schedule, AFaultForARankTheJobLacksIsRefused) {
  ::setenv("REPRISE_TEST_FAULTS", "1@10,9@30", 1);
  const auto schedule = Schedule::from_env("REPRISE_TEST_FAULTS");
  ::unsetenv("REPRISE_TEST_FAULTS");
  EXPECT_NO_THROW(schedule.validate(10));
  try {
    schedule.validate(4);
    ADD_FAILURE() << "a fault for rank 9 of 4 processes was accepted";
  } catch (const UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "REPRISE_TEST_FAULTS=\"1@10,9@30\": rank 9 does not exist: the job has 4 processes, original "
                 "ranks 0 to 3");
  }
  EXPECT_THROW(Schedule::random_exact(1, 8, 100, 3).validate(4), UsageError);
  EXPECT_NO_THROW(Schedule::random_exact(1, 8, 100, 3).validate(8));
}

TEST(Schedule, RandomIsDeterministicAndHasTheExpectedFraction) {
  EXPECT_EQ(Schedule::random(42, 64, 100, 0.3).faults(), Schedule::random(42, 64, 100, 0.3).faults());
  EXPECT_NE(Schedule::random(42, 64, 100, 0.3).faults(), Schedule::random(43, 64, 100, 0.3).faults());
  std::size_t failed = 0;
  constexpr int kRanks = 20000;
  const auto schedule = Schedule::random(7, kRanks, 50, 0.25);
  for (const auto& fault : schedule.faults()) {
    EXPECT_GE(fault.step, 1U);
    EXPECT_LT(fault.step, 50U);
    ++failed;
  }
  EXPECT_NEAR(static_cast<double>(failed) / kRanks, 0.25, 0.02);
  EXPECT_TRUE(Schedule::random(7, 100, 50, 0.0).faults().empty());
  EXPECT_EQ(Schedule::random(7, 100, 50, 1.0).faults().size(), 100U);
  EXPECT_THROW((void)Schedule::random(7, 100, 50, 1.5), UsageError);
  EXPECT_THROW((void)Schedule::random(7, 100, 1, 0.5), UsageError);
}

TEST(Schedule, RandomExactPicksDistinctRanksAndSteps) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const auto schedule = Schedule::random_exact(seed, 8, 30, 2, 1);
    ASSERT_EQ(schedule.faults().size(), 2U);
    std::set<int> ranks;
    std::set<std::uint64_t> steps;
    for (const auto& fault : schedule.faults()) {
      EXPECT_GE(fault.rank.value(), 1);
      EXPECT_LT(fault.rank.value(), 8);
      EXPECT_GE(fault.step, 1U);
      EXPECT_LT(fault.step, 30U);
      ranks.insert(fault.rank.value());
      steps.insert(fault.step);
    }
    EXPECT_EQ(ranks.size(), 2U);
    EXPECT_EQ(steps.size(), 2U);
  }
  EXPECT_THROW((void)Schedule::random_exact(1, 4, 30, 4, 1), UsageError);
  EXPECT_THROW((void)Schedule::random_exact(1, 4, 3, 3, 0), UsageError);
}

namespace {

// Runs `body` in a child process and returns its wait status.
template <class F>
int in_child(F body, std::chrono::milliseconds let_run = std::chrono::milliseconds(0)) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  if (let_run.count() > 0) {
    std::this_thread::sleep_for(let_run);
    EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the child should still be running";
    ::kill(pid, SIGTERM);  // a hung process ignores this
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the hung child should ignore SIGTERM";
    ::kill(pid, SIGKILL);
  }
  ::waitpid(pid, &status, 0);
  return status;
}

std::string read_outcome(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::string line;
    std::getline(in, line);
    return line;
  }
  return "";
}

struct OutcomeDir {
  std::filesystem::path path;
  OutcomeDir() {
    char pattern[] = "/tmp/reprise-outcome-XXXXXX";
    path = ::mkdtemp(pattern);
    ::setenv("REPRISE_OUTCOME_DIR", path.c_str(), 1);
  }
  ~OutcomeDir() {
    ::unsetenv("REPRISE_OUTCOME_DIR");
    std::filesystem::remove_all(path);
  }
};

}  // namespace

TEST(Inject, KillSelfDiesOfSigkillAndRecordsIt) {
  OutcomeDir outcomes;
  const int status = in_child([] { kill_self(OriginalRank{4}); });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(read_outcome(outcomes.path), "killed 4");
}

// Every process of the node dies, each recorded as killed, the caller last.
TEST(Inject, KillNodeKillsEveryProcessOfTheNodeAndRecordsThem) {
  OutcomeDir outcomes;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const int status = in_child([&] {
    const pid_t mate = ::fork();
    if (mate == 0) {
      for (;;) ::pause();
    }
    const int written = static_cast<int>(mate);
    (void)!::write(pipe_fds[1], &written, sizeof written);
    const std::vector<NodeMember> node{{OriginalRank{1}, static_cast<int>(mate)}, {OriginalRank{2}, ::getpid()}};
    kill_node(node, OriginalRank{2});
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  int mate = 0;
  ASSERT_EQ(::read(pipe_fds[0], &mate, sizeof mate), static_cast<ssize_t>(sizeof mate));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  std::ifstream record(outcomes.path / std::to_string(mate));
  std::string line;
  std::getline(record, line);
  EXPECT_EQ(line, "killed 1 with its node");
  // The node-mate is dead (gone, or a zombie until init reaps it; it is no
  // child of this test): SIGKILL was sent before its killer died.
  // Dying takes the kernel a moment after kill() returned: look again for a while.
  std::string state;
  bool dead = false;
  for (int look = 0; look < 500 && !dead; ++look) {
    std::ifstream stat("/proc/" + std::to_string(mate) + "/stat");
    std::string pid_field, name;
    dead = !(stat >> pid_field >> name >> state) || state == "Z";
    if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(dead) << "the node-mate " << mate << " is in state " << state;
}

TEST(Inject, HangStopsRespondingWithoutExiting) {
  OutcomeDir outcomes;
  const int status = in_child([] { hang(OriginalRank{2}); }, std::chrono::milliseconds(200));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(read_outcome(outcomes.path), "hung 2");
}

// A fault planned for a process that applied the schedule and outlived it
// (its step never came) is reported once, by that process, when the
// schedule goes away; another process's faults, a replacement and a copy
// that applied nothing say nothing.
TEST(Schedule, AFaultThatNeverFiredIsReported) {
  testing::internal::CaptureStderr();
  {
    const auto schedule = Schedule::parse("3@500,1@2");
    for (std::uint64_t step = 0; step < 60; ++step) schedule.apply(OriginalRank{3}, step, false);
  }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("the fault 3@500 of fault schedule \"3@500,1@2\" never fired: process #3 applied the "
                      "schedule up to step 59 only"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("never fired"), said.rfind("never fired")) << "one line: 1@2 is another process's: " << said;
  testing::internal::CaptureStderr();
  {
    const auto schedule = Schedule::parse("3@5");
    schedule.apply(OriginalRank{3}, 4, true);  // a replacement: nothing planned for it
    const Schedule copy = schedule;
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Inject, ScheduleApplyKillsOnlyTheOriginalProcessAtItsStep) {
  const auto schedule = Schedule::parse("3@5");
  EXPECT_EQ(in_child([&] { schedule.apply(OriginalRank{3}, 4, false); }), 0);
  EXPECT_EQ(in_child([&] { schedule.apply(OriginalRank{2}, 5, false); }), 0);
  EXPECT_EQ(in_child([&] { schedule.apply(OriginalRank{3}, 5, true); }), 0) << "replacements are spared";
  const int status = in_child([&] { schedule.apply(OriginalRank{3}, 5, false); });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(Inject, FaultPointFiresOnceForItsVictim) {
  const int status = in_child([] {
    arm("test.point", OriginalRank{1});
    fault_point("test.point", OriginalRank{0});   // not the victim
    fault_point("other.point", OriginalRank{1});  // not the point
    disarm_all();
    fault_point("test.point", OriginalRank{1});  // disarmed
    arm("test.point", OriginalRank{1});
    fault_point("test.point", OriginalRank{1});
    ::_exit(3);  // not reached
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(Inject, RecordOutcomeWritesOneLine) {
  OutcomeDir outcomes;
  record_outcome(Outcome::kRunning, OriginalRank{9});
  EXPECT_EQ(read_outcome(outcomes.path), "running 9");
  record_outcome(Outcome::kFailed, OriginalRank{9}, "bad\nthing");
  EXPECT_EQ(read_outcome(outcomes.path), "failed 9 bad thing");
}
