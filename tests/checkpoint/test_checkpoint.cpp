// Double in-memory checkpoints under real failures: replacements get their
// predecessor's state back bit for bit, a failure during a checkpoint leaves
// the last committed version, losing a process and all its buddies raises
// DataLost naming them, and bad input is refused on every process.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "failure_helpers.hpp"
#include "mix.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/comm.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"

using namespace reprise;
using reprise::detail::CheckpointInternals;
using reprise::test::expect_failure_reported;
using reprise::test::kill_and_detect;

namespace {

/// One process's application state: a fixed buffer, a vector whose size
/// changes with the version, and an object saved through a serializer.
struct State {
  std::vector<std::byte> grid = std::vector<std::byte>(10000);
  std::vector<double> values;
  struct Meta {
    int iteration = 0;
    std::string label;
  } meta;

  void fill(OriginalRank rank, std::uint64_t version) {
    const auto seed = static_cast<std::uint64_t>(rank.value()) * 1000 + version;
    for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<std::byte>(detail::mix64(seed + i) & 0xffU);
    values.resize(100 + static_cast<std::size_t>(rank.value()) * 7 + version * 3);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<double>(detail::mix64(seed ^ i) % 100000) / 7.0;
    meta = {static_cast<int>(version * 10), "rank " + std::to_string(rank.value()) + " v" + std::to_string(version)};
  }

  /// Mismatching bytes and fields against what `fill(rank, version)` gives.
  [[nodiscard]] std::size_t differences(OriginalRank rank, std::uint64_t version) const {
    State expected;
    expected.fill(rank, version);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < grid.size(); ++i) wrong += grid[i] != expected.grid[i] ? 1 : 0;
    if (values.size() != expected.values.size()) return wrong + 1000000;
    wrong += static_cast<std::size_t>(
        std::memcmp(values.data(), expected.values.data(), values.size() * sizeof(double)) != 0);
    wrong += meta.iteration != expected.meta.iteration ? 1 : 0;
    wrong += meta.label != expected.meta.label ? 1 : 0;
    return wrong;
  }

  void protect_in(Checkpoint& checkpoint) {
    checkpoint.protect("grid", std::span<std::byte>(grid));
    checkpoint.protect("values", values);
    checkpoint.protect(
        "meta",
        [this](std::vector<std::byte>& out) {
          const auto* first = reinterpret_cast<const std::byte*>(&meta.iteration);
          out.insert(out.end(), first, first + sizeof meta.iteration);
          const auto* text = reinterpret_cast<const std::byte*>(meta.label.data());
          out.insert(out.end(), text, text + meta.label.size());
        },
        [this](std::span<const std::byte> bytes) {
          std::memcpy(&meta.iteration, bytes.data(), sizeof meta.iteration);
          meta.label.assign(reinterpret_cast<const char*>(bytes.data()) + sizeof meta.iteration,
                            bytes.size() - sizeof meta.iteration);
        });
  }
};

/// A communicator, a state, and a two-copy checkpoint protecting it.
struct Protected {
  Comm comm = Comm::world();
  State state;
  Checkpoint checkpoint{comm};
  Protected() { state.protect_in(checkpoint); }
};

}  // namespace

TEST(Checkpoint, RestoreRollsBackWithoutFailures) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm, {.copies = std::min(2, comm.size())});
  state.protect_in(checkpoint);
  state.fill(comm.original_rank(), 1);
  EXPECT_EQ(checkpoint.checkpoint(), 1U);
  // Its own state and, with two copies, a buddy's: each has a 10000-byte grid.
  EXPECT_GE(checkpoint.held_bytes(), state.grid.size() * static_cast<std::size_t>(std::min(2, comm.size())));
  state.fill(comm.original_rank(), 2);
  EXPECT_EQ(checkpoint.checkpoint(), 2U);
  state.fill(comm.original_rank(), 3);
  checkpoint.restore();
  EXPECT_EQ(state.differences(comm.original_rank(), 2), 0U);
  EXPECT_EQ(checkpoint.version(), 3U) << "restore ends with a fresh checkpoint";
}

TEST(Checkpoint, ReplacementsGetTheirStateBackBitwise) {
  Protected p;
  auto& [comm, state, checkpoint] = p;
  const OriginalRank first{1};
  const OriginalRank second{2};  // a survivor: a replacement must not fail again (Open MPI 5.0)
  if (comm.epoch() == 0) {
    state.fill(comm.original_rank(), 1);
    checkpoint.checkpoint();
    state.fill(comm.original_rank(), 2);  // work after the checkpoint, lost by the rollback
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  if (comm.epoch() == 1) {
    checkpoint.restore();
    EXPECT_EQ(state.differences(comm.original_rank(), 1), 0U) << "after the first recovery";
    state.fill(comm.original_rank(), 5);
    kill_and_detect(comm, {second});
    comm = comm.respawn();
  }
  checkpoint.restore();
  EXPECT_EQ(state.differences(comm.original_rank(), 1), 0U) << "after the second recovery";
  EXPECT_EQ(checkpoint.version(), 3U);
}

TEST(Checkpoint, KillDuringACheckpointKeepsTheLastVersion) {
  Protected p;
  auto& [comm, state, checkpoint] = p;
  const OriginalRank victim{1};
  if (comm.epoch() == 0) {
    state.fill(comm.original_rank(), 1);
    checkpoint.checkpoint();
    state.fill(comm.original_rank(), 2);
    inject::arm("comm.sparse_all_to_all", victim);  // dies while version 2 is being sent
    expect_failure_reported(comm, {victim}, [&] { checkpoint.checkpoint(); });
    EXPECT_EQ(checkpoint.version(), 1U) << "the failed checkpoint is not committed";
    comm = comm.respawn();
  }
  checkpoint.restore();
  EXPECT_EQ(state.differences(comm.original_rank(), 1), 0U);
  EXPECT_EQ(checkpoint.version(), 2U);
}

TEST(Checkpoint, LosingAProcessAndItsBuddyRaisesDataLost) {
  Protected p;
  auto& [comm, state, checkpoint] = p;
  ASSERT_EQ(comm.size(), 4);
  // One node, two copies: the buddy of slot s is slot s + 2.
  const std::vector<OriginalRank> victims{OriginalRank{1}, OriginalRank{3}};
  if (comm.epoch() == 0) {
    state.fill(comm.original_rank(), 1);
    checkpoint.checkpoint();
    kill_and_detect(comm, victims);
    comm = comm.respawn();
  }
  try {
    checkpoint.restore();
    ADD_FAILURE() << "no DataLost";
  } catch (const DataLost& error) {
    const std::vector<BlockRange> expected{{BlockId{1}, BlockId{2}}, {BlockId{3}, BlockId{4}}};
    EXPECT_EQ(error.lost(), expected) << error.what();
    EXPECT_NE(std::string(error.what()).find("1, 3"), std::string::npos) << error.what();
    EXPECT_EQ(error.lost_processes(), victims) << error.what();
  }
}

TEST(Checkpoint, AfterAShrinkTheDepartedStateIsFetched) {
  Protected p;
  auto& [comm, state, checkpoint] = p;
  const OriginalRank victim{1};
  state.fill(comm.original_rank(), 1);
  checkpoint.checkpoint();
  state.fill(comm.original_rank(), 2);
  kill_and_detect(comm, {victim});
  comm = comm.shrink();
  checkpoint.restore();
  EXPECT_EQ(state.differences(comm.original_rank(), 1), 0U) << "the survivors rolled back";
  ASSERT_EQ(checkpoint.departed(), std::vector<OriginalRank>{victim});
  // The last survivor takes over the victim's state.
  const bool heir = comm.rank().value() == comm.size() - 1;
  std::vector<OriginalRank> wanted;
  if (heir) wanted.push_back(victim);
  const auto fetched = checkpoint.fetch(wanted);
  ASSERT_EQ(fetched.size(), wanted.size());
  if (heir) {
    State expected;
    expected.fill(victim, 1);
    const auto& saved = fetched.at(victim);
    const auto grid = saved.bytes("grid");
    ASSERT_EQ(grid.size(), expected.grid.size());
    EXPECT_EQ(std::memcmp(grid.data(), expected.grid.data(), grid.size()), 0);
    EXPECT_EQ(saved.values<double>("values"), expected.values);
    EXPECT_THROW((void)saved.bytes("no such piece"), UsageError);
  }
  const std::vector<OriginalRank> stranger{OriginalRank{99}};
  EXPECT_THROW((void)checkpoint.fetch(stranger), UsageError) << "a rank that was not in the checkpoint";
  EXPECT_EQ(checkpoint.checkpoint(), 2U) << "checkpoints go on with the survivors";
  EXPECT_TRUE(checkpoint.departed().empty());
}

TEST(Checkpoint, BadInputIsRefusedEverywhere) {
  auto comm = Comm::world();
  EXPECT_THROW(Checkpoint(comm, {.copies = 0}), UsageError);
  {
    Checkpoint too_many(comm, {.copies = comm.size() + 1});
    EXPECT_THROW(too_many.checkpoint(), UsageError);
  }
  State state;
  Checkpoint checkpoint(comm, {.copies = 1});
  state.protect_in(checkpoint);
  EXPECT_THROW(checkpoint.protect("grid", std::span<std::byte>(state.grid)), UsageError) << "a name twice";
  EXPECT_THROW(checkpoint.restore(), UsageError) << "nothing to restore yet";
  if (comm.size() > 1) {
    // One process registers one more piece of state than the others.
    std::vector<int> extra(3, 7);
    if (comm.rank().value() == comm.size() - 1) checkpoint.protect("extra", extra);
    try {
      checkpoint.checkpoint();
      ADD_FAILURE() << "different registrations were accepted";
    } catch (const UsageError& error) {
      EXPECT_NE(std::string(error.what()).find("same names"), std::string::npos) << error.what();
    }
    EXPECT_EQ(checkpoint.version(), 0U);
  }
}

TEST(Checkpoint, LoadInPlaceFillsTheRegisteredMemoryOnceAndRefusesWrongSizes) {
  Protected p;
  State source;
  source.fill(p.comm.original_rank(), 5);
  std::vector<std::byte> meta;
  State saved = p.state;  // what a refused load must leave
  // Sizes that do not fit: the buffer's is fixed, the vector's a whole number of doubles.
  const auto never = [](std::size_t, std::span<std::byte>) { ADD_FAILURE() << "filled after a refused size"; };
  const std::vector<std::size_t> short_grid{source.grid.size() - 1, source.values.size() * sizeof(double), 4};
  EXPECT_THROW(CheckpointInternals::load_in_place(p.checkpoint, short_grid, never), UsageError);
  const std::vector<std::size_t> odd_values{source.grid.size(), 13, 4};
  EXPECT_THROW(CheckpointInternals::load_in_place(p.checkpoint, odd_values, never), UsageError);
  EXPECT_THROW(CheckpointInternals::load_in_place(p.checkpoint, std::vector<std::size_t>{1, 2}, never), UsageError);
  EXPECT_EQ(p.state.grid, saved.grid);
  EXPECT_EQ(p.state.values, saved.values);

  // The source's own serialized meta, then every piece filled where it lives.
  State serializer = source;
  Checkpoint other(p.comm);
  serializer.protect_in(other);
  CheckpointInternals::visit_current(other, [&](const CheckpointInternals::CurrentPiece& piece) {
    if (piece.index == 2) meta.assign(piece.bytes.begin(), piece.bytes.end());
  });
  const std::vector<std::size_t> sizes{source.grid.size(), source.values.size() * sizeof(double), meta.size()};
  std::vector<std::size_t> filled;
  CheckpointInternals::load_in_place(p.checkpoint, sizes, [&](std::size_t index, std::span<std::byte> memory) {
    filled.push_back(index);
    ASSERT_EQ(memory.size(), sizes[index]);
    if (index == 0) {
      EXPECT_EQ(memory.data(), p.state.grid.data()) << "the buffer is filled where it lives";
      std::memcpy(memory.data(), source.grid.data(), memory.size());
    } else if (index == 1) {
      EXPECT_EQ(static_cast<void*>(memory.data()), static_cast<void*>(p.state.values.data()))
          << "the vector is resized and filled where it lives";
      std::memcpy(memory.data(), source.values.data(), memory.size());
    } else {
      std::memcpy(memory.data(), meta.data(), memory.size());
    }
  });
  EXPECT_EQ(filled, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(p.state.differences(p.comm.original_rank(), 5), 0U);
}

// A process taking over another's committed version (what a migration's new
// process does): it has the version and layout, holds no copies, and
// malformed layouts or a second commit are refused.
TEST(Checkpoint, ContinuingAnotherProcessesCommitNeedsAWellFormedLayout) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm, {.copies = std::min(2, comm.size())});
  state.protect_in(checkpoint);
  EXPECT_TRUE(CheckpointInternals::committed_layout(checkpoint).empty()) << "no commit yet";
  checkpoint.checkpoint();
  const auto layout = CheckpointInternals::committed_layout(checkpoint);
  ASSERT_FALSE(layout.empty());
  EXPECT_EQ(layout[0], 1U);
  {
    Checkpoint taker(comm);
    EXPECT_THROW(CheckpointInternals::continue_commit(taker, {}), CorruptData);
    EXPECT_THROW(CheckpointInternals::continue_commit(taker, std::span(layout).first(layout.size() - 1)), CorruptData)
        << "truncated";
    auto longer = layout;
    longer.push_back(0);
    EXPECT_THROW(CheckpointInternals::continue_commit(taker, longer), CorruptData) << "a word too many";
    EXPECT_FALSE(taker.has_commit()) << "nothing taken from a refused layout";
    CheckpointInternals::continue_commit(taker, layout);
    EXPECT_TRUE(taker.has_commit());
    EXPECT_EQ(taker.version(), 1U);
    EXPECT_EQ(taker.held_bytes(), 0U) << "it holds none of the version's copies";
    EXPECT_EQ(CheckpointInternals::committed_layout(taker), layout);
    EXPECT_THROW(CheckpointInternals::continue_commit(taker, layout), UsageError) << "a commit already";
  }
  EXPECT_THROW(CheckpointInternals::continue_commit(checkpoint, layout), UsageError) << "a commit already";
}

// Where the committed copies are if some processes moved away: carried by
// the leaving ones, whether one moves or all do. A process taking over another's
// version with the copies it held holds exactly those; copies of other
// owners are refused, and nothing is taken.
TEST(Checkpoint, CopiesGoWithTheProcessesThatHoldThemWhenEveryHolderMoves) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm, {.copies = std::min(2, comm.size())});
  state.protect_in(checkpoint);
  std::vector<OriginalRank> everyone;
  for (int rank = 0; rank < comm.size(); ++rank) everyone.emplace_back(rank);
  EXPECT_EQ(CheckpointInternals::copies_on_move(checkpoint, everyone), CheckpointInternals::CopiesOnMove::kRetaken)
      << "nothing committed yet";
  checkpoint.checkpoint();
  EXPECT_EQ(CheckpointInternals::copies_on_move(checkpoint, everyone), CheckpointInternals::CopiesOnMove::kCarried);
  const std::vector<OriginalRank> first{OriginalRank{0}};
  EXPECT_EQ(CheckpointInternals::copies_on_move(checkpoint, first), CheckpointInternals::CopiesOnMove::kCarried);
  const auto held = CheckpointInternals::held_copies(checkpoint);
  ASSERT_EQ(held.size(), static_cast<std::size_t>(std::min(2, comm.size())));
  std::size_t held_bytes = 0;
  std::map<OriginalRank, std::vector<std::byte>> copies;
  for (const auto& copy : held) {
    held_bytes += copy.state.size();
    copies[copy.owner].assign(copy.state.begin(), copy.state.end());
  }
  EXPECT_EQ(held_bytes, checkpoint.held_bytes());
  EXPECT_TRUE(copies.contains(comm.original_rank())) << "its own state's copy is among them";
  const auto layout = CheckpointInternals::committed_layout(checkpoint);
  Checkpoint taker(comm, {.copies = std::min(2, comm.size())});
  auto wrong = copies;
  wrong[OriginalRank{comm.size()}] = {};  // a rank that is not in the layout
  EXPECT_THROW(CheckpointInternals::continue_commit(taker, layout, wrong), CorruptData);
  if (copies.size() > 1) {
    wrong = copies;
    wrong.erase(wrong.begin());
    EXPECT_THROW(CheckpointInternals::continue_commit(taker, layout, wrong), CorruptData) << "a copy missing";
  }
  EXPECT_FALSE(taker.has_commit()) << "nothing taken from refused copies";
  CheckpointInternals::continue_commit(taker, layout, copies);
  EXPECT_TRUE(taker.has_commit());
  EXPECT_EQ(taker.held_bytes(), held_bytes) << "it holds what the other held";
  ASSERT_EQ(CheckpointInternals::held_copies(taker).size(), held.size());
  for (std::size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(CheckpointInternals::held_copies(taker)[i].owner, held[i].owner);
    const auto taken = CheckpointInternals::held_copies(taker)[i].state;
    EXPECT_TRUE(std::equal(held[i].state.begin(), held[i].state.end(), taken.begin(), taken.end()));
  }
}

// Copies still on their way (a migration lands them while the new process
// runs): the checkpoint takes them at the first call that looks at them,
// drops them if they did not all arrive (or are not the owners named), and
// calls for them even when it refuses the owners, so that they land before
// their memory goes.
TEST(Checkpoint, CopiesStillArrivingAreTakenWhenFirstNeededAndDroppedIfIncomplete) {
  auto comm = Comm::world();
  State state;
  Checkpoint checkpoint(comm, {.copies = std::min(2, comm.size())});
  state.protect_in(checkpoint);
  checkpoint.checkpoint();
  std::map<OriginalRank, std::vector<std::byte>> copies;
  std::vector<OriginalRank> owners;
  for (const auto& copy : CheckpointInternals::held_copies(checkpoint)) {
    copies[copy.owner].assign(copy.state.begin(), copy.state.end());
    owners.push_back(copy.owner);
  }
  const auto layout = CheckpointInternals::committed_layout(checkpoint);
  const CheckpointConfig config{.copies = std::min(2, comm.size())};
  // Intact: nothing is asked for until a call looks at the copies.
  int calls = 0;
  Checkpoint taker(comm, config);
  using Copies = std::map<OriginalRank, std::vector<std::byte>>;
  CheckpointInternals::continue_commit(taker, layout, owners, [&]() -> std::optional<Copies> {
    ++calls;
    return copies;
  });
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(taker.has_commit());
  ASSERT_EQ(CheckpointInternals::held_copies(taker).size(), owners.size());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(taker.held_bytes(), checkpoint.held_bytes());
  EXPECT_EQ(calls, 1) << "asked for once";
  // Incomplete, or another owner's: dropped.
  Checkpoint lost(comm, config);
  CheckpointInternals::continue_commit(lost, layout, owners, [] { return std::optional<Copies>(); });
  EXPECT_TRUE(CheckpointInternals::held_copies(lost).empty());
  EXPECT_TRUE(CheckpointInternals::committed_state(lost).empty());
  auto others = copies;
  others.erase(others.begin());
  others[OriginalRank{comm.size()}] = {};
  Checkpoint mixed(comm, config);
  CheckpointInternals::continue_commit(mixed, layout, owners, [&] { return std::optional(others); });
  EXPECT_EQ(mixed.held_bytes(), 0U);
  // Owners refused: CorruptData, and the copies were asked for all the same.
  calls = 0;
  Checkpoint refused(comm, config);
  auto wrong = owners;
  wrong.emplace_back(comm.size());
  EXPECT_THROW(
      CheckpointInternals::continue_commit(refused, layout, wrong,
                                           [&]() -> std::optional<std::map<OriginalRank, std::vector<std::byte>>> {
                                             ++calls;
                                             return copies;
                                           }),
      CorruptData);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(refused.has_commit());
}

TEST(Checkpoint, AReplacementWithAnotherBufferSizeIsRefused) {
  auto comm = Comm::world();
  const OriginalRank victim{1};
  // The replacement computes its buffer size wrongly (one byte short).
  std::vector<std::byte> grid(comm.is_replacement() ? 9999 : 10000, std::byte{0});
  Checkpoint checkpoint(comm);
  checkpoint.protect("grid", std::span<std::byte>(grid));
  if (comm.epoch() == 0) {
    for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = static_cast<std::byte>(i & 0xffU);
    checkpoint.checkpoint();
    kill_and_detect(comm, {victim});
    comm = comm.respawn();
  }
  try {
    checkpoint.restore();
    ADD_FAILURE() << "restore accepted a buffer of another size";
  } catch (const UsageError& error) {
    const std::string expected = comm.is_replacement() ? "'grid' is 9999 bytes but its saved state holds 10000"
                                                       : "another process could not apply its state";
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
  if (comm.is_replacement()) {
    EXPECT_EQ(grid[5], std::byte{0}) << "the replacement's buffer was not touched";
  }
  EXPECT_EQ(checkpoint.version(), 1U) << "the committed checkpoint is kept for another try";
}

TEST(Checkpoint, CalledByOnlySomeProcessesIsAnErrorNotAHang) {
  auto comm = Comm::world();
  std::vector<int> values(100, comm.rank().value());
  Checkpoint checkpoint(comm, {.copies = 2, .join_timeout_seconds = 0.5});
  checkpoint.protect("values", values);
  const bool skips = comm.rank().value() == comm.size() - 1;
  if (!skips) {
    try {
      checkpoint.checkpoint();
      ADD_FAILURE() << "checkpoint() returned without every process";
    } catch (const Timeout& error) {
      EXPECT_EQ(error.mpi_error_class(), MPI_ERR_OTHER);
      // The first caller to give up says so; the others learn it from the revoke.
      EXPECT_NE(std::string(error.what()).find("only some processes"), std::string::npos) << error.what();
    }
  } else {
    // This process skips the checkpoint; by the time it communicates again,
    // the others have revoked the communicator.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_THROW(comm.barrier(), Revoked);
  }
  EXPECT_EQ(checkpoint.version(), 0U);
}

TEST(YoungDaly, IntervalFollowsTheFormula) {
  EXPECT_NEAR(young_daly_interval(3600, 2), std::sqrt(2 * 2 * 3600.0) - 2, 1e-9);
  EXPECT_DOUBLE_EQ(young_daly_interval(10, 6), 10) << "a checkpoint above half the MTBF: once per MTBF";
  EXPECT_THROW((void)young_daly_interval(0, 1), UsageError);
  EXPECT_THROW((void)young_daly_interval(100, -1), UsageError);
}

TEST(Checkpoint, AKillWhileOthersWaitInCheckpointIsAFailureNotATimeout) {
  auto comm = Comm::world();
  std::vector<int> values(100, comm.rank().value());
  Checkpoint checkpoint(comm, {.copies = 2});
  checkpoint.protect("values", values);
  checkpoint.checkpoint();
  // The others wait for the victim in checkpoint(); the first to hear of
  // the failure revokes, and the rest may see the revoke before the notice.
  const OriginalRank victim{comm.size() - 1};
  inject::arm("checkpoint.join", victim);
  expect_failure_reported(comm, {victim}, [&] { checkpoint.checkpoint(); });
  comm = comm.shrink();
  EXPECT_EQ(checkpoint.version(), 1U);
}
