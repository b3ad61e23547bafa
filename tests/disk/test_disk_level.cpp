// The disk level under the loss of the whole job. Run by tests/disk/whole-job-loss:
// WriteThenLoseTheWholeJob checkpoints on 4 processes, writing every second
// version to disk, and every process is killed while writing version 8
// (after its image, before the manifest); RestartFromDisk is a new job, on
// 4, 3 or 6 processes, that restarts from the newest complete version the
// script left usable (REPRISE_TEST_DISK_EXPECT: a version, "corrupt" when
// every complete version was damaged, "none" for an empty directory) and
// checks every restored byte and every redistributed block. The other cases
// run alone, in one job: the checkpoint's view for other layers, Driver
// checkpoints reaching the disk, and refused input.

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <array>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/comm.hpp"
#include "reprise/disk_level.hpp"
#include "reprise/driver.hpp"
#include "reprise/error.hpp"
#include "reprise/image.hpp"
#include "reprise/inject.hpp"

using namespace reprise;
using reprise::detail::CheckpointInternals;

namespace {

constexpr std::uint64_t kBlocks = 60;  // over 4, 3 and 6 processes alike
constexpr std::size_t kBlockBytes = 24;
constexpr std::size_t kRows = 6;
constexpr std::size_t kColumns = 8;
constexpr std::uint64_t kLostAt = 8;  // the version being written when the job dies
constexpr std::uint64_t kWriteEvery = 2;

/// The blocks process `rank` of `processes` owns: an even split of kBlocks.
BlockRange owned(int rank, int processes) {
  const auto r = static_cast<std::uint64_t>(rank);
  const auto p = static_cast<std::uint64_t>(processes);
  return {BlockId{r * kBlocks / p}, BlockId{(r + 1) * kBlocks / p}};
}

std::byte block_byte(std::uint64_t id, std::size_t at, std::uint64_t version) {
  return static_cast<std::byte>(detail::mix64(id * 1000 + version * 7 + at) & 0xffU);
}

/// One process's application state: a typed 2-D array, a vector whose size
/// changes, an object through Save/Load, a plain counter, and its blocks.
struct State {
  std::vector<double> grid = std::vector<double>(kRows * kColumns);
  std::vector<std::int32_t> counts;
  std::string label;
  std::uint64_t step = 0;
  BlockRange mine;
  std::vector<std::byte> blocks;

  explicit State(BlockRange range) : mine(range), blocks(range.size() * kBlockBytes) {}

  void protect_in(Checkpoint& checkpoint) {
    checkpoint.protect_array("grid", std::span<double>(grid), {kRows, kColumns});
    checkpoint.protect("counts", counts);
    checkpoint.protect(
        "label",
        [this](std::vector<std::byte>& out) {
          const auto* text = reinterpret_cast<const std::byte*>(label.data());
          out.insert(out.end(), text, text + label.size());
        },
        [this](std::span<const std::byte> bytes) {
          label.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        });
    checkpoint.protect("step", step);
    checkpoint.protect_blocks("particles", kBlockBytes, mine, blocks);
  }

  void fill(OriginalRank rank, std::uint64_t version) {
    const auto seed = static_cast<std::uint64_t>(rank.value()) * 100000 + version;
    for (std::size_t i = 0; i < grid.size(); ++i)
      grid[i] = static_cast<double>(detail::mix64(seed + i) % 1000000) / 3.0;
    counts.resize(10 + static_cast<std::size_t>(rank.value()) + version);
    for (std::size_t i = 0; i < counts.size(); ++i)
      counts[i] = static_cast<std::int32_t>(detail::mix64(seed ^ (i << 20)));
    label = "rank " + std::to_string(rank.value()) + " at version " + std::to_string(version);
    step = version * 10;
    fill_blocks(version);
  }

  void fill_blocks(std::uint64_t version) {
    for (std::uint64_t id = mine.begin.value; id < mine.end.value; ++id) {
      for (std::size_t at = 0; at < kBlockBytes; ++at) {
        blocks[(id - mine.begin.value) * kBlockBytes + at] = block_byte(id, at, version);
      }
    }
  }
};

/// Bytes of `blocks` (block ids `range`, back to back) that differ from version `version`'s.
std::size_t wrong_blocks(std::span<const std::byte> blocks, BlockRange range, std::uint64_t version) {
  std::size_t wrong = 0;
  for (std::uint64_t id = range.begin.value; id < range.end.value; ++id) {
    for (std::size_t at = 0; at < kBlockBytes; ++at) {
      wrong += blocks[(id - range.begin.value) * kBlockBytes + at] != block_byte(id, at, version) ? 1 : 0;
    }
  }
  return wrong;
}

/// Mismatches between `state` and what `fill(rank, version)` gives (blocks not included).
std::size_t differences(const State& state, OriginalRank rank, std::uint64_t version) {
  State expected(BlockRange{});
  expected.fill(rank, version);
  std::size_t wrong =
      std::memcmp(state.grid.data(), expected.grid.data(), state.grid.size() * sizeof(double)) != 0 ? 1 : 0;
  wrong += state.counts != expected.counts ? 1 : 0;
  wrong += state.label != expected.label ? 1 : 0;
  wrong += state.step != expected.step ? 1 : 0;
  return wrong;
}

/// The environment variable `name`, or `otherwise` if it is not set.
std::string setting(const char* name, const char* otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}

std::filesystem::path directory_from_env() {
  const char* directory = std::getenv("REPRISE_TEST_DISK_DIR");
  if (directory == nullptr) throw UsageError("set REPRISE_TEST_DISK_DIR (tests/disk/whole-job-loss does)");
  return directory;
}

/// The message of the `UsageError` that `disk.restart()` must raise.
std::string refusal_of_restart(DiskLevel& disk) {
  try {
    (void)disk.restart();
  } catch (const UsageError& error) {
    return error.what();
  }
  ADD_FAILURE() << "restart accepted what it should refuse";
  return {};
}

/// A fresh directory, the same on every process; removed at the end.
struct SharedTempDir {
  explicit SharedTempDir(Comm& comm) {
    std::vector<char> name;
    if (comm.rank() == Rank{0}) {
      std::string pattern = (std::filesystem::temp_directory_path() / "reprise-disk-XXXXXX").string();
      if (::mkdtemp(pattern.data()) == nullptr) throw IoError("mkdtemp failed", errno);
      name.assign(pattern.begin(), pattern.end());
    }
    comm.bcast(name, Rank{0});
    path = std::string(name.begin(), name.end());
    _comm = &comm;
  }
  ~SharedTempDir() {
    try {
      _comm->barrier();
    } catch (const Error&) {
    }
    if (_comm->rank() == Rank{0}) std::filesystem::remove_all(path);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  std::filesystem::path path;

 private:
  Comm* _comm = nullptr;
};

}  // namespace

// Job 1: versions 1..7 committed (2, 4, 6 written; keep 2 leaves 4 and 6),
// then every process dies after writing its image of version 8.
TEST(DiskLevel, WriteThenLoseTheWholeJob) {
  auto comm = Comm::world();
  State state(owned(comm.rank().value(), comm.size()));
  Checkpoint checkpoint(comm);
  state.protect_in(checkpoint);
  DiskLevel disk(comm, checkpoint, {.directory = directory_from_env(), .every = kWriteEvery, .keep = 2});
  inject::arm("disk_level.written", comm.original_rank(), inject::Action::kKill, kLostAt / kWriteEvery);
  for (std::uint64_t version = 1; version <= kLostAt; ++version) {
    state.fill(comm.original_rank(), version);
    std::uint64_t committed = 0;
    try {
      committed = checkpoint.checkpoint();
    } catch (const CommFailure&) {
      // The others died at the fault point while this process was still in
      // the write's first collective: it is lost with them, as in a crash of
      // the whole job, before its own image (docs/RELIABILITY.md, defect 43).
      if (version == kLostAt) inject::kill_self(comm.original_rank());
      throw;
    }
    ASSERT_EQ(committed, version);
    EXPECT_EQ(disk.last_written(), version - version % kWriteEvery);
  }
  ADD_FAILURE() << "the process outlived the write of version " << kLostAt;
}

// Job 2, on any number of processes.
TEST(DiskLevel, RestartFromDisk) {
  auto comm = Comm::world();
  const auto directory = directory_from_env();
  const std::string expect = setting("REPRISE_TEST_DISK_EXPECT", "6");
  const std::string damaged = setting("REPRISE_TEST_DISK_DAMAGED", "");
  const int me = comm.rank().value();
  const int q = comm.size();
  State state(owned(me, q));
  Checkpoint checkpoint(comm);
  state.protect_in(checkpoint);
  DiskLevel disk(comm, checkpoint, {.directory = directory, .every = kWriteEvery, .keep = 2});

  if (expect == "corrupt") {
    try {
      (void)disk.restart();
      ADD_FAILURE() << "restart accepted a directory whose complete versions are all damaged";
    } catch (const CorruptData& error) {
      const std::string what = error.what();
      EXPECT_NE(what.find("no complete version"), std::string::npos) << what;
      EXPECT_NE(what.find(damaged), std::string::npos) << what;
    }
    EXPECT_EQ(differences(state, OriginalRank{0}, 0) > 0, true) << "nothing was loaded";
    return;
  }
  const auto restart = disk.restart();
  if (expect == "none") {
    EXPECT_EQ(restart.outcome, RestartOutcome::kNoCheckpoint);
    EXPECT_EQ(restart.version, 0U);
    EXPECT_EQ(checkpoint.checkpoint(), 1U);
    return;
  }
  const auto version = std::stoull(expect);
  ASSERT_EQ(restart.version, version);
  EXPECT_EQ(restart.old_world_size, 4);
  ASSERT_EQ(restart.old_members.size(), 4U);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(restart.old_members[static_cast<std::size_t>(r)], OriginalRank{r});
  ASSERT_EQ(restart.blocks.size(), 1U);
  EXPECT_EQ(restart.blocks[0].name, "particles");
  EXPECT_EQ(restart.blocks[0].block_bytes, kBlockBytes);
  ASSERT_EQ(restart.blocks[0].held.size(), 4U);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(restart.blocks[0].held[static_cast<std::size_t>(r)].holder, OriginalRank{r});
    EXPECT_EQ(restart.blocks[0].held[static_cast<std::size_t>(r)].range, owned(r, 4));
  }
  if (version != 6) {
    ASSERT_FALSE(restart.notes.empty());
    EXPECT_NE(restart.notes.front().find("version 6"), std::string::npos) << restart.notes.front();
    EXPECT_NE(restart.notes.front().find(damaged), std::string::npos) << restart.notes.front();
  } else {
    EXPECT_TRUE(restart.notes.empty());
  }

  if (q == 4) {
    // Each process has its own state back, every byte.
    ASSERT_EQ(restart.outcome, RestartOutcome::kRestored);
    EXPECT_EQ(differences(state, comm.original_rank(), version), 0U);
    EXPECT_EQ(wrong_blocks(state.blocks, state.mine, version), 0U);
  } else {
    // Nothing loaded; the state of any old process and any blocks on demand.
    ASSERT_EQ(restart.outcome, RestartOutcome::kRedistribute);
    EXPECT_EQ(state.step, 0U) << "a restart on another count loads nothing by itself";
    const std::array<OriginalRank, 2> wanted{OriginalRank{me % 4}, OriginalRank{(me + 1) % 4}};
    const auto saved = disk.fetch(wanted);
    ASSERT_EQ(saved.size(), 2U);
    for (const auto old : wanted) {
      State expected(BlockRange{});
      expected.fill(old, version);
      const auto& piece = saved.at(old);
      EXPECT_EQ(piece.values<double>("grid"), expected.grid);
      EXPECT_EQ(piece.values<std::int32_t>("counts"), expected.counts);
      EXPECT_EQ(piece.values<std::uint64_t>("step").at(0), expected.step);
      const auto label = piece.bytes("label");
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(label.data()), label.size()), expected.label);
      EXPECT_EQ(wrong_blocks(piece.bytes("particles"), owned(old.value(), 4), version), 0U);
    }
    // This process's new share of the blocks, and a range across every old holder.
    const std::array<BlockRange, 1> mine{state.mine};
    disk.load_blocks("particles", mine, state.blocks);
    EXPECT_EQ(wrong_blocks(state.blocks, state.mine, version), 0U);
    const std::array<BlockRange, 2> across{BlockRange{BlockId{40}, BlockId{kBlocks}},
                                           BlockRange{BlockId{3}, BlockId{20}}};
    std::vector<std::byte> spread((kBlocks - 40 + 17) * kBlockBytes);
    disk.load_blocks("particles", across, spread);
    EXPECT_EQ(wrong_blocks(std::span(spread).first((kBlocks - 40) * kBlockBytes), across[0], version), 0U);
    EXPECT_EQ(wrong_blocks(std::span(spread).subspan((kBlocks - 40) * kBlockBytes), across[1], version), 0U);
    // Refused, nothing read: an unknown name, a wrong size, blocks nobody held, a rank not in the version.
    EXPECT_THROW(disk.load_blocks("grid", mine, state.blocks), UsageError);
    EXPECT_THROW(disk.load_blocks("particles", mine, std::span(state.blocks).first(kBlockBytes)), UsageError);
    const std::array<BlockRange, 1> beyond{BlockRange{BlockId{50}, BlockId{kBlocks + 1}}};
    std::vector<std::byte> eleven(11 * kBlockBytes);
    EXPECT_THROW(disk.load_blocks("particles", beyond, eleven), UsageError);
    const std::array<OriginalRank, 1> stranger{OriginalRank{4}};
    EXPECT_THROW((void)disk.fetch(stranger), UsageError);
    // Pieces taken over from one old process, checked before any is set.
    EXPECT_THROW(checkpoint.load_pieces(saved.at(wanted[0]), {"step", "nope"}), UsageError);
    EXPECT_EQ(state.step, 0U);
    checkpoint.load_pieces(saved.at(wanted[0]), {"step", "label"});
    State expected(BlockRange{});
    expected.fill(wanted[0], version);
    EXPECT_EQ(state.step, expected.step);
    EXPECT_EQ(state.label, expected.label);
    state.fill(comm.original_rank(), version);  // the application's redistribution
    state.fill_blocks(version);
  }

  // The checkpoint goes on from the version it restarted from, and the new
  // job's next disk version replaces the dead job's leftovers.
  EXPECT_EQ(checkpoint.checkpoint(), version + 1);
  EXPECT_THROW(CheckpointInternals::continue_from(checkpoint, 1), UsageError);
  state.fill(comm.original_rank(), version + 2);
  EXPECT_EQ(checkpoint.checkpoint(), version + 2);
  EXPECT_EQ(disk.last_written(), version + 2);
  if (comm.rank() == Rank{0}) {
    const auto versions = scan_disk_versions(directory);
    std::vector<std::uint64_t> complete;
    for (const auto& each : versions) {
      if (each.complete) complete.push_back(each.version);
    }
    ASSERT_FALSE(complete.empty());
    EXPECT_EQ(complete.back(), version + 2);
    EXPECT_LE(complete.size(), 2U + (version + 2 < kLostAt ? 1U : 0U)) << "kept 2 (and the dead job's newer ones)";
    for (const auto& each : versions) {
      if (each.version != version + 2) continue;
      EXPECT_EQ(each.world_size, q);
      EXPECT_EQ(each.files.size(), static_cast<std::size_t>(q)) << "no file of the dead job is left in the folder";
    }
    EXPECT_TRUE(verify_disk_version(directory, version + 2).empty());
  }
}

// A directory written by another program (other registrations) is refused,
// naming both, and nothing is loaded.
TEST(DiskLevel, ADifferentProgramIsRefused) {
  auto comm = Comm::world();
  std::vector<double> grid(kRows * kColumns, 0.5);
  std::vector<float> other(3, 1.0F);
  Checkpoint checkpoint(comm);
  checkpoint.protect_array("grid", std::span<double>(grid), {kRows, kColumns});
  checkpoint.protect("other", other);
  DiskLevel disk(comm, checkpoint, {.directory = directory_from_env(), .every = kWriteEvery});
  const auto what = refusal_of_restart(disk);
  EXPECT_NE(what.find("'particles'"), std::string::npos) << what;
  EXPECT_NE(what.find("'other' (float32)"), std::string::npos) << what;
  EXPECT_NE(what.find("nothing was loaded"), std::string::npos) << what;
  EXPECT_EQ(grid[7], 0.5);
}

// Same names and types but a buffer of another size: every process refuses
// (each checks its state before any loads), nothing is loaded.
TEST(DiskLevel, AnotherSizeIsRefusedEverywhere) {
  auto comm = Comm::world();
  std::vector<double> grid(kRows * (kColumns + 1), 0.25);
  std::vector<std::int32_t> counts;
  std::vector<std::byte> label;
  std::uint64_t step = 0;
  const auto mine = owned(comm.rank().value(), comm.size());
  std::vector<std::byte> blocks(mine.size() * kBlockBytes);
  Checkpoint checkpoint(comm);
  checkpoint.protect_array("grid", std::span<double>(grid), {kRows, kColumns + 1});
  checkpoint.protect("counts", counts);
  checkpoint.protect("label", label);
  checkpoint.protect("step", step);
  checkpoint.protect_blocks("particles", kBlockBytes, mine, blocks);
  DiskLevel disk(comm, checkpoint, {.directory = directory_from_env(), .every = kWriteEvery});
  const auto what = refusal_of_restart(disk);
  EXPECT_NE(what.find("buffer 'grid' is 432 bytes but its saved state holds 384"), std::string::npos) << what;
  EXPECT_EQ(grid[5], 0.25);
  EXPECT_TRUE(counts.empty());
  EXPECT_EQ(step, 0U);
  EXPECT_FALSE(checkpoint.has_commit());
}

// On another process count, a program that takes nothing of the saved
// state is refused at its first checkpoint instead of starting again from
// the beginning; taking its blocks then lets it go on. Without a Driver,
// load_progress has no step count to take.
TEST(DiskLevel, ANewCountThatTakesNothingIsRefusedAtItsCheckpoint) {
  auto comm = Comm::world();
  State state(owned(comm.rank().value(), comm.size()));
  Checkpoint checkpoint(comm);
  state.protect_in(checkpoint);
  DiskLevel disk(comm, checkpoint, {.directory = directory_from_env(), .every = kWriteEvery, .keep = 2});
  const auto restart = disk.restart();
  ASSERT_EQ(restart.outcome, RestartOutcome::kRedistribute);
  try {
    (void)checkpoint.checkpoint();
    ADD_FAILURE() << "a checkpoint went on from a restart that took none of the saved state";
  } catch (const UsageError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("took none of its state"), std::string::npos) << what;
    EXPECT_NE(what.find("version " + std::to_string(restart.version)), std::string::npos) << what;
  }
  EXPECT_THROW(disk.load_progress(), UsageError);
  const std::array<BlockRange, 1> mine{state.mine};
  disk.load_blocks("particles", mine, state.blocks);
  EXPECT_EQ(wrong_blocks(state.blocks, state.mine, restart.version), 0U);
  EXPECT_GT(checkpoint.checkpoint(), restart.version);
}

// One process cannot write its image (a file size limit: EFBIG): every
// process raises, the version gets no manifest, the older one stays, the
// version is committed in memory all the same, and the next write works
// (and removes the incomplete one).
TEST(DiskLevel, AFailedWriteOnOneProcessIsAnErrorOnEveryProcess) {
  auto comm = Comm::world();
  SharedTempDir directory(comm);
  std::vector<std::uint64_t> values(5000);
  Checkpoint checkpoint(comm);
  checkpoint.protect("values", values);
  DiskLevel disk(comm, checkpoint, {.directory = directory.path});
  const OriginalRank victim{comm.size() - 1};
  values.assign(values.size(), 1);
  ASSERT_EQ(checkpoint.checkpoint(), 1U);
  rlimit unlimited{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &unlimited), 0);
  if (comm.original_rank() == victim) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{4096, unlimited.rlim_max};
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  values.assign(values.size(), 2);
  try {
    (void)checkpoint.checkpoint();
    ADD_FAILURE() << "a failed write went unnoticed";
  } catch (const IoError& error) {
    const std::string what = error.what();
    EXPECT_EQ(error.system_error(), EFBIG) << what;
    EXPECT_NE(what.find("rank" + std::to_string(victim.value()) + ".h5"), std::string::npos) << what;
    EXPECT_NE(what.find("File too large"), std::string::npos) << what;
    if (comm.original_rank() != victim) {
      EXPECT_NE(what.find("older complete versions are kept"), std::string::npos) << what;
    }
  }
  if (comm.original_rank() == victim) {
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &unlimited), 0);
  }
  EXPECT_EQ(checkpoint.version(), 2U) << "committed in memory all the same";
  EXPECT_EQ(disk.last_written(), 1U);
  comm.barrier();
  auto versions = scan_disk_versions(directory.path);
  ASSERT_EQ(versions.size(), 2U);
  EXPECT_TRUE(versions[0].complete);
  EXPECT_FALSE(versions[1].manifest);
  comm.barrier();
  values.assign(values.size(), 3);
  ASSERT_EQ(checkpoint.checkpoint(), 3U);
  EXPECT_EQ(disk.last_written(), 3U);
  versions = scan_disk_versions(directory.path);
  ASSERT_EQ(versions.size(), 2U) << "keep 2: versions 1 and 3; the incomplete 2 is gone";
  EXPECT_EQ(versions[0].version, 1U);
  EXPECT_EQ(versions[1].version, 3U);
  checkpoint.restore();
  EXPECT_EQ(values[17], 3U);
}

// What other layers build on: registrations with their types and shapes,
// capture and load_state (all checks, nothing changed on error), the commit
// hook, and continuing a version's numbering.
TEST(DiskLevel, TheCheckpointShowsOtherLayersWhatTheyNeed) {
  auto comm = Comm::world();
  State state(owned(comm.rank().value(), comm.size()));
  struct Pair {
    int a;
    float b;
  };
  std::vector<Pair> pairs(3);
  std::vector<float> floats(5, 2.0F);
  Checkpoint checkpoint(comm);
  state.protect_in(checkpoint);
  checkpoint.protect("pairs", pairs);
  checkpoint.protect("floats", floats);
  std::array<std::uint16_t, 6> small{};
  EXPECT_THROW(checkpoint.protect_array("small", std::span<std::uint16_t>(small), {4, 2}), UsageError);
  std::vector<std::byte> odd(10);
  EXPECT_THROW(checkpoint.protect_blocks("odd", 4, BlockRange{BlockId{0}, BlockId{3}}, odd), UsageError);

  const auto registrations = CheckpointInternals::registrations(checkpoint);
  ASSERT_EQ(registrations.size(), 7U);
  EXPECT_EQ(registrations[0].name, "grid");
  EXPECT_EQ(registrations[0].shape.type, ElementType::kFloat64);
  EXPECT_EQ(registrations[0].shape.extents, (std::vector<std::uint64_t>{kRows, kColumns}));
  EXPECT_EQ(registrations[0].fixed_bytes, kRows * kColumns * sizeof(double));
  EXPECT_EQ(registrations[1].shape.type, ElementType::kInt32);
  EXPECT_EQ(registrations[1].fixed_bytes, 0U);
  EXPECT_EQ(registrations[2].shape.type, ElementType::kBytes);
  EXPECT_EQ(registrations[3].shape.type, ElementType::kUint64) << "a scalar keeps its type";
  ASSERT_TRUE(registrations[4].blocks.has_value());
  EXPECT_EQ(registrations[4].blocks->range, state.mine);
  EXPECT_EQ(registrations[4].shape.extents, (std::vector<std::uint64_t>{state.mine.size(), kBlockBytes}));
  EXPECT_EQ(registrations[5].shape.type, ElementType::kBytes) << "a vector of structs is bytes";
  EXPECT_EQ(registrations[6].shape.type, ElementType::kFloat32);

  std::vector<std::uint64_t> seen;
  const auto hook = CheckpointInternals::on_commit(checkpoint, [&](std::uint64_t version) { seen.push_back(version); });
  EXPECT_TRUE(CheckpointInternals::committed_state(checkpoint).empty());
  CheckpointInternals::continue_from(checkpoint, 41);
  EXPECT_FALSE(checkpoint.has_commit());
  EXPECT_THROW(checkpoint.restore(), UsageError) << "continuing a number is not a version to roll back to";
  state.fill(comm.original_rank(), 3);
  EXPECT_EQ(checkpoint.checkpoint(), 42U);
  EXPECT_TRUE(checkpoint.has_commit());
  CheckpointInternals::remove_commit_hook(checkpoint, hook);
  EXPECT_EQ(checkpoint.checkpoint(), 43U);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{42}));
  const auto committed_span = CheckpointInternals::committed_state(checkpoint);
  const auto committed = std::vector<std::byte>(committed_span.begin(), committed_span.end());
  EXPECT_EQ(committed, CheckpointInternals::capture(checkpoint));
  EXPECT_EQ(CheckpointInternals::split_state(checkpoint, committed).size(), 7U);

  // load_state puts a captured state back; a wrong one changes nothing.
  state.fill(comm.original_rank(), 9);
  auto wrong = committed;
  wrong.resize(wrong.size() - 1);
  EXPECT_THROW(CheckpointInternals::load_state(checkpoint, wrong), CorruptData);
  auto pieces = CheckpointInternals::split_state(checkpoint, committed);
  const std::vector<std::byte> short_grid(8);
  pieces[0] = short_grid;
  const auto joined = CheckpointInternals::join_state(checkpoint, pieces);
  EXPECT_THROW(CheckpointInternals::load_state(checkpoint, joined), UsageError);
  EXPECT_EQ(differences(state, comm.original_rank(), 9), 0U) << "a refused state changed nothing";
  CheckpointInternals::load_state(checkpoint, committed);
  EXPECT_EQ(differences(state, comm.original_rank(), 3), 0U);
  EXPECT_THROW(CheckpointInternals::continue_from(checkpoint, 7), UsageError);
}

// Driver checkpoints reach the disk through the commit hook.
TEST(DiskLevel, DriverCheckpointsReachTheDisk) {
  auto comm = Comm::world();
  SharedTempDir directory(comm);
  std::vector<double> values(100, 0.0);
  Checkpoint checkpoint(comm);
  checkpoint.protect("values", values);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kShrink, .cadence = {.every_steps = 2}});
  DiskLevel disk(comm, checkpoint, {.directory = directory.path, .every = 3, .keep = 1});
  driver.run(12, [&](std::uint64_t step) {
    for (auto& value : values) value += static_cast<double>(step);
  });
  ASSERT_GE(checkpoint.version(), 6U);
  EXPECT_EQ(disk.last_written(), checkpoint.version() - checkpoint.version() % 3);
  comm.barrier();
  const auto versions = scan_disk_versions(directory.path);
  ASSERT_EQ(versions.size(), 1U) << "keep = 1";
  EXPECT_TRUE(versions[0].complete) << versions[0].problem;
  EXPECT_EQ(versions[0].version, disk.last_written());
  EXPECT_EQ(versions[0].files.size(), static_cast<std::size_t>(comm.size()));
  EXPECT_TRUE(verify_disk_version(directory.path, versions[0].version).empty());
}

// A Driver's step reaches the disk: the manifest (scan_disk_versions) and
// every image (the root attribute step) hold the step of the version's
// checkpoint. Run by tests/disk/readable-on-disk, which then reads the
// directory (REPRISE_TEST_DISK_DIR) with json, h5py and reprise-images.
TEST(DiskLevel, TheDriversStepReachesTheDisk) {
  auto comm = Comm::world();
  const auto directory = directory_from_env();
  std::vector<double> values(100, 0.0);
  Checkpoint checkpoint(comm);
  checkpoint.protect("values", values);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kShrink, .cadence = {.every_steps = 3}});
  DiskLevel disk(comm, checkpoint, {.directory = directory, .every = 2, .keep = 2});
  std::map<std::uint64_t, std::uint64_t> steps;  // version -> the driver's step at its commit
  const auto hook =
      CheckpointInternals::on_commit(checkpoint, [&](std::uint64_t version) { steps[version] = driver.step(); });
  driver.run(20, [&](std::uint64_t step) {
    for (auto& value : values) value += static_cast<double>(step);
  });
  CheckpointInternals::remove_commit_hook(checkpoint, hook);
  comm.barrier();
  const auto versions = scan_disk_versions(directory);
  ASSERT_EQ(versions.size(), 2U) << "keep = 2";
  for (const auto& version : versions) {
    ASSERT_TRUE(version.complete) << version.problem;
    ASSERT_TRUE(version.step.has_value()) << "v" << version.version;
    EXPECT_EQ(*version.step, steps.at(version.version)) << "v" << version.version;
    EXPECT_GT(*version.step, 0U) << "v" << version.version;
    const auto image = Image::read_file(version.files.at(static_cast<std::size_t>(comm.rank().value())).path);
    ASSERT_TRUE(image.info().step.has_value());
    EXPECT_EQ(*image.info().step, *version.step) << "v" << version.version;
  }
  EXPECT_NE(*versions[0].step, *versions[1].step);
}

// A process killed while a Driver runs with a disk level is respawned: the
// replacement, running the same start-up code, skips the restart (its state
// comes from memory) and the versions after the recovery reach the disk too.
TEST(DiskLevel, ARespawnedProcessSkipsTheRestart) {
  auto comm = Comm::world();
  const auto directory = directory_from_env();
  if (!comm.is_replacement()) {
    if (comm.rank() == Rank{0}) std::filesystem::remove_all(directory);
    comm.barrier();
  }
  const OriginalRank victim{1};
  const auto me = static_cast<std::uint64_t>(comm.original_rank().value());
  std::vector<std::uint64_t> values(300);
  Checkpoint checkpoint(comm);
  checkpoint.protect("values", values);
  Driver driver(comm, checkpoint, {.mode = RecoveryMode::kRespawn, .cadence = {.every_steps = 2}});
  DiskLevel disk(comm, checkpoint, {.directory = directory, .every = 2});
  EXPECT_EQ(disk.restart().outcome, RestartOutcome::kNoCheckpoint);
  driver.run(20, [&](std::uint64_t step) {
    if (comm.epoch() == 0 && comm.original_rank() == victim && step == 9) inject::kill_self(victim);
    for (std::uint64_t i = 0; i < values.size(); ++i) values[i] += step * (i + 1 + me * 7);
  });
  for (std::uint64_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], 190 * (i + 1 + me * 7)) << "value " << i;
  EXPECT_EQ(disk.last_written(), checkpoint.version() - checkpoint.version() % 2);
  comm.barrier();
  if (comm.rank() == Rank{0}) {
    const auto versions = scan_disk_versions(directory);
    ASSERT_FALSE(versions.empty());
    EXPECT_TRUE(versions.back().complete) << versions.back().problem;
    EXPECT_EQ(versions.back().version, disk.last_written());
    EXPECT_EQ(versions.back().files.size(), static_cast<std::size_t>(comm.size()));
    EXPECT_TRUE(verify_disk_version(directory, versions.back().version).empty());
  }
}

// A directory that cannot be made is an IoError naming it and the reason.
TEST(DiskLevel, AnUnusableDirectoryIsAnIoErrorNamingIt) {
  auto comm = Comm::world();
  SharedTempDir directory(comm);
  const auto file = directory.path / "a-file";
  if (comm.rank() == Rank{0}) std::ofstream(file) << "not a folder";
  comm.barrier();
  Checkpoint checkpoint(comm);
  try {
    DiskLevel disk(comm, checkpoint, {.directory = file / "checkpoints"});
    ADD_FAILURE() << "a directory under a file was accepted";
  } catch (const IoError& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find((file / "checkpoints").string()), std::string::npos) << what;
    EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
    EXPECT_EQ(error.system_error(), ENOTDIR);
  }
  EXPECT_THROW(DiskLevel(comm, checkpoint, {.directory = directory.path, .every = 0}), UsageError);
  DiskLevel disk(comm, checkpoint, {.directory = directory.path / "fresh"});
  EXPECT_THROW((void)disk.fetch({}), UsageError) << "nothing restarted";
  EXPECT_EQ(disk.restart().outcome, RestartOutcome::kNoCheckpoint);
}
