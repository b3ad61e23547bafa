// The preloaded heap, libreprise_heap.so: heap_preload_child runs with
// LD_PRELOAD set and checks what it can see from inside; here are the
// outcomes and messages. Allocation of every kind from two threads works;
// a list built on the heap and checkpointed twice is found again, as it was
// at the second checkpoint, by a new process after a SIGKILL (in every commit
// mode); checkpoints allocate nothing from the heap; a corrupt checkpoint, a
// heap from another address and a restore after allocating are refused with
// a message, the heap staying usable; a corrupt newest version restores the
// one before, saying so; a checkpoint after a restore writes only the pages
// written since; %r in REPRISE_HEAP_DIR gives each rank its own
// directory, and a second process on one directory is refused; bad settings
// are reported.
//
// The library and the child are never built with sanitizers (a malloc
// replacement cannot run under them), so this test runs in the sanitizer
// build too: only this launcher is instrumented there.

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr const char* kHeapMib = "64";
constexpr const char* kHeapAddress = "0x300000000000";
constexpr const char* kNodes = "10000";

/// A fresh directory, removed at the end.
struct TempDir {
  TempDir()
      : path(std::filesystem::temp_directory_path() /
             ("reprise-heap-" + std::to_string(::getpid()) + "-" + std::to_string(counter++))) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
  static inline int counter = 0;
};

/// How a child ended, and what it wrote on stdout and stderr.
struct Outcome {
  int exit_code = -1;  // -1 if it did not exit
  int signal = 0;      // the signal that ended it, if one did
  std::string output;
};

/// Runs heap_preload_child with `arguments`, this process's environment
/// without any REPRISE_HEAP_*, LD_PRELOAD or launcher rank, then `settings`
/// (NAME=value), preloading the library unless `preload` is false. Killed
/// after 45 s.
Outcome run_child(const std::vector<std::string>& arguments, const std::vector<std::string>& settings,
                  bool preload = true) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const bool ours = text.starts_with("REPRISE_HEAP_") || text.starts_with("LD_PRELOAD=");
    const bool rank = text.starts_with("OMPI_COMM_WORLD_RANK=") || text.starts_with("PMIX_RANK=") ||
                      text.starts_with("PMI_RANK=") || text.starts_with("SLURM_PROCID=");
    if (!ours && !rank) environment.push_back(text);
  }
  if (preload) environment.push_back(std::string("LD_PRELOAD=") + REPRISE_HEAP_LIBRARY);
  environment.insert(environment.end(), settings.begin(), settings.end());
  std::vector<std::string> words{REPRISE_HEAP_CHILD};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  std::vector<char*> envp;
  for (auto& word : words) argv.push_back(word.data());
  for (auto& entry : environment) envp.push_back(entry.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return {};
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(pipe_ends[1], STDOUT_FILENO);
    ::dup2(pipe_ends[1], STDERR_FILENO);
    ::close(pipe_ends[0]);
    ::close(pipe_ends[1]);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(pipe_ends[1]);
  Outcome outcome;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(45);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd ready{pipe_ends[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count())) <= 0) {
      ::kill(child, SIGKILL);
      outcome.output += "\n[test: the child took too long and was killed]";
      break;
    }
    char buffer[4096];
    const ssize_t got = ::read(pipe_ends[0], buffer, sizeof buffer);
    if (got <= 0) break;
    outcome.output.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
  return outcome;
}

/// The settings of a run on `dir`, with `changes` (NAME=value) added or
/// replacing them.
std::vector<std::string> settings_for(const TempDir& dir, const std::vector<std::string>& changes = {}) {
  std::vector<std::string> settings{std::string("REPRISE_HEAP_MIB=") + kHeapMib,
                                    std::string("REPRISE_HEAP_ADDRESS=") + kHeapAddress,
                                    "REPRISE_HEAP_DIR=" + dir.path.string()};
  for (const auto& change : changes) {
    const auto name = change.substr(0, change.find('=') + 1);
    std::erase_if(settings, [&name](const std::string& setting) { return setting.starts_with(name); });
    settings.push_back(change);
  }
  return settings;
}

/// Builds the list, checkpoints it twice and is killed.
void build_and_kill(const TempDir& dir, const std::string& mode) {
  const auto built = run_child({"build", kNodes}, settings_for(dir, {"REPRISE_HEAP_MODE=" + mode}));
  EXPECT_EQ(built.signal, SIGKILL) << built.output;
  EXPECT_NE(built.output.find("child: built"), std::string::npos) << built.output;
}

}  // namespace

TEST(HeapPreload, ServesEveryKindOfAllocationFromTwoThreads) {
  TempDir dir;
  const auto outcome = run_child({"stress"}, settings_for(dir));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("child: stress ok"), std::string::npos) << outcome.output;
}

class HeapPreloadModes : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Modes, HeapPreloadModes, ::testing::Values("sync", "address", "adaptive"),
                         [](const auto& mode) { return mode.param; });

// The second run computes the expected list on its own and compares every
// node, then allocates from the restored heap.
TEST_P(HeapPreloadModes, ANewProcessFindsTheListOfTheSecondCheckpointAfterASigkill) {
  TempDir dir;
  build_and_kill(dir, GetParam());
  const auto verified = run_child({"verify", kNodes}, settings_for(dir, {"REPRISE_HEAP_MODE=" + GetParam()}));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_NE(verified.output.find("child: verified"), std::string::npos) << verified.output;
}

// After a restore, a checkpoint writes only the pages written since, not
// the whole heap again: two runs that each restore, write one word and
// checkpoint add a version of a few pages each (a few MiB of list in the
// full version), and a new process then finds the list of the second
// checkpoint through the chain of all four.
TEST(HeapPreload, ACheckpointAfterARestoreWritesOnlyWhatChanged) {
  TempDir dir;
  build_and_kill(dir, "sync");
  const auto full = std::filesystem::file_size(dir.path / "v1.full.reprise-inc");
  EXPECT_GT(full, std::uintmax_t{1} << 20) << "the list fills the full version";
  constexpr std::uintmax_t kFewPages = 16 * 4096;  // the written page and the version's header, with room to spare
  for (const char* version : {"v3.reprise-inc", "v4.reprise-inc"}) {
    const auto touched = run_child({"touch", kNodes}, settings_for(dir, {"REPRISE_HEAP_MODE=sync"}));
    EXPECT_EQ(touched.exit_code, 0) << touched.output;
    EXPECT_NE(touched.output.find("child: touch ok"), std::string::npos) << touched.output;
    ASSERT_TRUE(std::filesystem::exists(dir.path / version)) << touched.output;
    EXPECT_LT(std::filesystem::file_size(dir.path / version), kFewPages)
        << version << " after a restore (the full version: " << full << " bytes)";
  }
  const auto verified = run_child({"verify", kNodes}, settings_for(dir));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_NE(verified.output.find("child: verified"), std::string::npos) << verified.output;
}

/// Builds and checkpoints the list, flips one byte in the middle of
/// `version`'s file, and runs the child in `mode` (with `kNodes`).
Outcome run_after_damage(const std::string& version, const std::string& mode) {
  TempDir dir;
  build_and_kill(dir, "adaptive");
  const auto path = dir.path / version;
  EXPECT_TRUE(std::filesystem::exists(path));
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    const char byte = static_cast<char>(file.peek());
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) / 2));
    file.put(static_cast<char>(byte ^ 0x5a));
  }
  return run_child({mode, kNodes}, settings_for(dir));
}

TEST(HeapPreload, ACorruptVersionIsRefusedAndTheHeapStaysUsable) {
  const auto outcome = run_after_damage("v1.full.reprise-inc", "refused");  // which version 2 builds on
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("reprise error: heap: reprise_heap_restore: "), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("v1.full.reprise-inc is corrupt"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("child: usable ok"), std::string::npos) << outcome.output;
}

TEST(HeapPreload, ACorruptNewestVersionRestoresTheOneBeforeAndSaysSo) {
  const auto outcome = run_after_damage("v2.reprise-inc", "first");
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("restored version 1 from directory"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("v2.reprise-inc is corrupt"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("child: first ok"), std::string::npos) << outcome.output;
}

// %r in REPRISE_HEAP_DIR is the rank the launcher gave the process, so the
// processes of a job never write one chain; without a rank it is refused.
TEST(HeapPreload, EachRankGetsADirectoryOfItsOwn) {
  TempDir dir;
  const std::string ranked = "REPRISE_HEAP_DIR=" + (dir.path / "rank%r").string();
  auto outcome = run_child({"own-allocations"}, settings_for(dir, {ranked, "OMPI_COMM_WORLD_RANK=3"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path / "rank3" / "v2.reprise-inc")) << outcome.output;
  outcome = run_child({"own-allocations"}, settings_for(dir, {ranked, "PMIX_RANK=5"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path / "rank5" / "v2.reprise-inc")) << outcome.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "rank%r"));

  outcome = run_child({"no-dir"}, settings_for(dir, {ranked}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("contains %r, but no launcher set this process's rank"), std::string::npos)
      << outcome.output;
  outcome = run_child({"no-dir"}, settings_for(dir, {"REPRISE_HEAP_DIR=" + (dir.path / "%d").string()}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("that is neither %r (the process's rank) nor %%"), std::string::npos) << outcome.output;
}

// REPRISE_HEAP_KEEP_VERSIONS=1: the second checkpoint merges both versions
// into one full version, and a new process restores from it.
TEST(HeapPreload, KeepVersionsMergesTheHeapsVersions) {
  TempDir dir;
  const auto outcome = run_child({"own-allocations"}, settings_for(dir, {"REPRISE_HEAP_KEEP_VERSIONS=1"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path / "v2.full.reprise-inc")) << outcome.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v1.full.reprise-inc")) << outcome.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path / "v2.reprise-inc")) << outcome.output;
}

// A second process on the same directory is refused while the first holds
// it, instead of interleaving two chains.
TEST(HeapPreload, TwoProcessesNeverWriteOneDirectory) {
  TempDir dir;
  const auto outcome = run_child({"two-writers"}, settings_for(dir));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("reprise_heap_checkpoint: reprise::DirectorySink: directory '" + dir.path.string() +
                                "' is in use by another process (pid "),
            std::string::npos)
      << outcome.output;
  EXPECT_NE(outcome.output.find("child: no-dir ok"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("child: two-writers ok"), std::string::npos) << outcome.output;
}

TEST(HeapPreload, AHeapFromAnotherAddressIsRefusedAndTheHeapEmptied) {
  TempDir dir;
  build_and_kill(dir, "sync");
  const auto outcome = run_child({"refused", kNodes}, settings_for(dir, {"REPRISE_HEAP_ADDRESS=0x310000000000"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find(std::string("run with REPRISE_HEAP_ADDRESS=") + kHeapAddress), std::string::npos)
      << outcome.output;
  EXPECT_NE(outcome.output.find("child: usable ok"), std::string::npos) << outcome.output;
}

TEST(HeapPreload, ARestoreAfterAnAllocationIsRefused) {
  TempDir dir;
  build_and_kill(dir, "sync");
  const auto outcome = run_child({"late-restore"}, settings_for(dir));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("1 block(s) were allocated from the heap before the restore"), std::string::npos)
      << outcome.output;
}

TEST(HeapPreload, AFirstRunRestoresNothingAndSaysNothing) {
  TempDir dir;
  const auto outcome = run_child({"fresh-start"}, settings_for(dir));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("child: fresh-start ok"), std::string::npos) << outcome.output;
  EXPECT_EQ(outcome.output.find("reprise_heap_restore"), std::string::npos) << outcome.output;
}

TEST_P(HeapPreloadModes, CheckpointsAllocateNothingFromTheHeap) {
  TempDir dir;
  const auto outcome = run_child({"own-allocations"}, settings_for(dir, {"REPRISE_HEAP_MODE=" + GetParam()}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("child: own-allocations ok"), std::string::npos) << outcome.output;
}

TEST(HeapPreload, MissingOrBadSettingsAreReported) {
  TempDir dir;
  auto outcome = run_child(
      {"no-dir"}, {std::string("REPRISE_HEAP_MIB=") + kHeapMib, std::string("REPRISE_HEAP_ADDRESS=") + kHeapAddress});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("reprise error: heap: reprise_heap_checkpoint: REPRISE_HEAP_DIR is not set"),
            std::string::npos)
      << outcome.output;
  // The logger's line: in a job, it names the process by its rank.
  outcome = run_child({"no-dir"}, {std::string("REPRISE_HEAP_MIB=") + kHeapMib,
                                   std::string("REPRISE_HEAP_ADDRESS=") + kHeapAddress, "OMPI_COMM_WORLD_RANK=3"});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("reprise[3] error: heap: reprise_heap_checkpoint: REPRISE_HEAP_DIR is not set"),
            std::string::npos)
      << outcome.output;

  outcome = run_child({"stress"}, settings_for(dir, {"REPRISE_HEAP_ADDRESS=0x300000000123"}));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_EQ(
      outcome.output.find("reprise error: REPRISE_HEAP_ADDRESS=0x300000000123, from the environment, is refused: it "
                          "takes a hexadecimal address such as 0x200000000000, a multiple of the page size"),
      0U)
      << outcome.output;

  outcome = run_child({"stress"}, settings_for(dir, {"REPRISE_HEAP_MIB=0"}));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_EQ(outcome.output, "reprise error: REPRISE_HEAP_MIB=0, from the environment, is refused: it takes a whole "
                            "number of MiB from 1 to 1048576\n");

  outcome = run_child({"stress"}, settings_for(dir, {"REPRISE_HEAP_ADDRESS=0xfffffffffffff000"}));
  EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
  EXPECT_EQ(outcome.output.find("reprise error: heap: cannot map the heap (64 MiB at 0xfffffffffffff000): "), 0U)
      << outcome.output;

  outcome = run_child({"no-dir"}, settings_for(dir, {"REPRISE_HEAP_KEEP_VERSIONS=many"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("REPRISE_HEAP_KEEP_VERSIONS=many, from the environment, is refused: it takes a "
                                "whole number, 0 or more"),
            std::string::npos)
      << outcome.output;

  outcome = run_child({"no-dir"}, settings_for(dir, {"REPRISE_HEAP_MODE=fast"}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("REPRISE_HEAP_MODE=fast, from the environment, is refused: it takes sync, address or "
                                "adaptive"),
            std::string::npos)
      << outcome.output;
}

TEST(HeapPreload, WithoutTheLibraryTheApiIsAbsentAndTheProgramRuns) {
  const auto outcome = run_child({"absent"}, {}, false);
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("child: absent ok"), std::string::npos) << outcome.output;
}
