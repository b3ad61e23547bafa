// Comm::migrate: processes hand their state to new processes started for
// them and leave; the new ones take their original ranks. Every handed-over
// byte is checked, and so is the communicator afterwards. The new processes
// run this program too: Comm::world() joins them to the migration, and
// migrated_in() tells them apart.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "failure_helpers.hpp"
#include "partial_failure.hpp"
#include "reprise/comm.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/inject.hpp"

namespace {

/// The split that orders a migration's new communicator, when a test arms it.
reprise::test::PartialFailure split_failure;

}  // namespace

/// When armed: every process completes the split, then one dies and those
/// armed to report it get its death as the result.
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  const int rc = PMPI_Comm_split(comm, color, key, newcomm);
  return split_failure.finish(rc, comm);
}

namespace reprise {
namespace {

/// The state original rank `rank` hands over: `bytes` bytes that differ per
/// rank and position.
std::vector<std::byte> state_of(OriginalRank rank, std::size_t bytes) {
  std::vector<std::byte> state(bytes);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(rank.value() + 1);
  for (auto& byte : state) {
    x ^= x << 13U;
    x ^= x >> 7U;
    x ^= x << 17U;
    byte = static_cast<std::byte>(x);
  }
  return state;
}

bool leaves(const std::vector<OriginalRank>& leaving, OriginalRank rank) {
  return std::find(leaving.begin(), leaving.end(), rank) != leaving.end();
}

/// Runs one migration of `leaving` (each handing `bytes_of(rank)` bytes
/// over) and checks it everywhere: the new processes received exactly
/// their predecessor's bytes, and every member of the result talks.
void migrate_and_check(const std::vector<OriginalRank>& leaving, std::size_t (*bytes_of)(OriginalRank)) {
  auto comm = Comm::world();
  if (comm.migrated_in()) {
    EXPECT_TRUE(comm.is_replacement());
    EXPECT_TRUE(leaves(leaving, comm.original_rank()));
    const auto handover = detail::CommInternals::take_handover(comm);
    const auto expected = state_of(comm.original_rank(), bytes_of(comm.original_rank()));
    ASSERT_EQ(handover.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), handover.span().begin()))
        << "original rank " << comm.original_rank().value() << " received other bytes than its predecessor had";
    EXPECT_EQ(detail::CommInternals::take_handover(comm).size(), 0U);
  } else {
    const auto epoch = comm.epoch();
    const auto mine = leaves(leaving, comm.original_rank())
                          ? state_of(comm.original_rank(), bytes_of(comm.original_rank()))
                          : std::vector<std::byte>{};
    auto moved = detail::CommInternals::migrate(comm, leaving, mine);
    if (leaves(leaving, comm.original_rank())) {
      EXPECT_FALSE(moved.has_value());
      detail::CommInternals::leave_after_migration(comm);
    }
    ASSERT_TRUE(moved.has_value());
    comm = std::move(*moved);
    EXPECT_EQ(comm.epoch(), epoch + 1);
    EXPECT_FALSE(comm.migrated_in());
  }
  EXPECT_EQ(comm.size(), comm.original_size());
  test::expect_working(comm);
  EXPECT_TRUE(comm.failures().empty());
}

std::size_t three_mib(OriginalRank) { return (std::size_t{3} << 20U) + 5; }
std::size_t uneven(OriginalRank rank) { return rank.value() == 0 ? (std::size_t{1} << 20U) + 7 : 0; }

}  // namespace

TEST(Migrate, OneProcess) { migrate_and_check({OriginalRank{1}}, three_mib); }

// Rank 0 (the root of the merged communicator) leaves too; one state is empty.
TEST(Migrate, TwoProcessesAtOnce) { migrate_and_check({OriginalRank{0}, OriginalRank{3}}, uneven); }

// The same original rank moves twice, the second time from the process
// that took it the first time, with nobody else in the job: afterwards the
// first process and the newest one exchange messages both ways.
TEST(Migrate, TheSameRankTwice) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  // How many moves of `leaving` this process has seen: 0 in the first
  // generation, 1 in the process that took over, 2 in its successor.
  const auto moves_seen = [&] { return std::count(comm.moves().begin(), comm.moves().end(), leaving); };
  if (comm.migrated_in()) {
    const auto handover = detail::CommInternals::take_handover(comm);
    const auto expected = state_of(leaving, three_mib(leaving));
    ASSERT_EQ(handover.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), handover.span().begin()));
  }
  while (moves_seen() < 2) {
    const bool mine = comm.original_rank() == leaving;
    const auto state = mine ? state_of(leaving, three_mib(leaving)) : std::vector<std::byte>{};
    auto moved = detail::CommInternals::migrate(comm, std::vector{leaving}, state);
    if (mine) detail::CommInternals::leave_after_migration(comm);
    ASSERT_TRUE(moved.has_value());
    comm = std::move(*moved);
  }
  test::expect_working(comm);
  std::vector<std::byte> payload(100, static_cast<std::byte>(comm.original_rank().value() + 1));
  std::vector<OutgoingMessage> outgoing;
  for (int rank = 0; rank < comm.size(); ++rank) outgoing.push_back({Rank{rank}, payload});
  const auto incoming = comm.sparse_all_to_all(outgoing);
  ASSERT_EQ(incoming.size(), static_cast<std::size_t>(comm.size()));
  for (const auto& message : incoming) {
    const auto from = comm.original_rank(message.source).value();
    EXPECT_EQ(message.payload, std::vector<std::byte>(100, static_cast<std::byte>(from + 1)));
  }
}

namespace {

/// A state in four pieces, two of them deferred (1 and 3): what original
/// rank `rank` hands over in the deferred-pieces tests.
struct DeferredState {
  std::vector<std::byte> whole;  // the four pieces back to back
  std::vector<std::span<const std::byte>> pieces;
  static constexpr std::size_t kSizes[4] = {100, (std::size_t{2} << 20U) + 3, 50, std::size_t{1} << 20U};
  static constexpr std::size_t kDeferred[2] = {1, 3};
  explicit DeferredState(OriginalRank rank) : whole(state_of(rank, kSizes[0] + kSizes[1] + kSizes[2] + kSizes[3])) {
    std::size_t at = 0;
    for (const std::size_t size : kSizes) {
      pieces.push_back(std::span<const std::byte>(whole).subspan(at, size));
      at += size;
    }
  }
  /// Moves `leaving`, which hands these pieces over (pieces 1 and 3 deferred).
  std::optional<Comm> migrate(Comm& comm, OriginalRank leaving) const {
    const bool mine = comm.original_rank() == leaving;
    return detail::CommInternals::migrate_gathered(
        comm, std::vector{leaving}, mine ? pieces : std::vector<std::span<const std::byte>>{}, {},
        mine ? std::span<const std::size_t>(kDeferred) : std::span<const std::size_t>());
  }
};

}  // namespace

// Deferred pieces stay with the leaving process until the new one receives
// them: one straight into memory of its own, one into the handover's
// buffer; the rest arrived with the handover. Every byte is checked.
TEST(Migrate, DeferredPiecesLandWhereTheNewProcessWants) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  const DeferredState expected(leaving);
  if (comm.migrated_in()) {
    auto handover = detail::CommInternals::take_handover(comm);
    ASSERT_EQ(handover.size(), expected.whole.size());
    const auto parts = handover.deferred();
    ASSERT_EQ(parts.size(), 2U);
    EXPECT_EQ(parts[0].offset, DeferredState::kSizes[0]);
    EXPECT_EQ(parts[0].size, DeferredState::kSizes[1]);
    EXPECT_EQ(parts[1].offset, expected.whole.size() - DeferredState::kSizes[3]);
    EXPECT_EQ(parts[1].size, DeferredState::kSizes[3]);
    std::vector<std::byte> own(DeferredState::kSizes[1]);
    std::vector<std::byte> wrong(DeferredState::kSizes[1] - 1);
    const std::vector<std::span<std::byte>> one_place{own};
    const std::vector<std::span<std::byte>> wrong_size{wrong, {}};
    EXPECT_THROW(handover.receive_deferred(one_place), UsageError);
    EXPECT_THROW(handover.receive_deferred(wrong_size), UsageError);
    const std::vector<std::span<std::byte>> places{own, {}};
    handover.receive_deferred(places);
    EXPECT_TRUE(handover.deferred().empty());
    // On one host the leaving process writes them into this one's memory;
    // between hosts (REPRISE_TEST_HOSTS above 1) they travel through MPI.
    const char* hosts = std::getenv("REPRISE_TEST_HOSTS");
    const bool one_host = hosts == nullptr || std::string_view(hosts) == "1";
    EXPECT_EQ(handover.pushed_bytes(), one_host ? DeferredState::kSizes[1] + DeferredState::kSizes[3] : 0);
    EXPECT_TRUE(std::equal(own.begin(), own.end(), expected.pieces[1].begin()));
    const auto bytes = handover.span();
    for (const std::size_t piece : {0, 2, 3}) {
      const auto at = static_cast<std::size_t>(expected.pieces[piece].data() - expected.whole.data());
      EXPECT_TRUE(std::equal(expected.pieces[piece].begin(), expected.pieces[piece].end(), bytes.begin() + at))
          << "piece " << piece << " differs";
    }
  } else {
    auto moved = expected.migrate(comm, leaving);
    if (comm.original_rank() == leaving) detail::CommInternals::leave_after_migration(comm);
    ASSERT_TRUE(moved.has_value());
    comm = std::move(*moved);
  }
  test::expect_working(comm);
}

namespace {

/// The leaving process dies at fault point `point`, after the move and
/// before the new process has every deferred piece: the new process cannot
/// take its place and gives up, and the others find its rank failed and
/// shrink.
void kill_the_leaving_process_at(const char* point) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  const DeferredState expected(leaving);
  if (comm.migrated_in()) {
    auto handover = detail::CommInternals::take_handover(comm);
    std::vector<std::byte> own(DeferredState::kSizes[1]);
    const std::vector<std::span<std::byte>> places{own, {}};
    handover.receive_deferred(places);
    ADD_FAILURE() << "the parts of a process killed at " << point << " arrived";
    return;
  }
  inject::arm(point, leaving);
  auto moved = expected.migrate(comm, leaving);
  ASSERT_TRUE(moved.has_value());
  comm = std::move(*moved);
  test::expect_failure_reported(comm, {leaving}, [&] { test::expect_working(comm); });
  comm = comm.shrink();
  EXPECT_FALSE(comm.rank_of(leaving).has_value());
  test::expect_working(comm);
}

}  // namespace

// Killed before it sent anything of its deferred pieces.
TEST(Migrate, TheLeavingProcessKilledBeforeItsDeferredPiecesArrived) {
  kill_the_leaving_process_at("comm.migrate.deferred");
}

// Killed on one host after it wrote its first deferred piece into the new
// process's memory, before it said so.
TEST(Migrate, TheLeavingProcessKilledWhileItWritesItsDeferredPieces) {
  kill_the_leaving_process_at("comm.migrate.pushed");
}

TEST(Migrate, DifferentListsAreAUsageErrorEverywhere) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> leaving{OriginalRank{comm.rank().value() == 0 ? 1 : 2}};
  EXPECT_THROW((void)detail::CommInternals::migrate(comm, leaving, {}), UsageError);
  const std::vector<OriginalRank> unknown{OriginalRank{comm.original_size()}};
  EXPECT_THROW((void)detail::CommInternals::migrate(comm, unknown, {}), UsageError);
  EXPECT_THROW((void)detail::CommInternals::migrate(comm, std::vector<OriginalRank>{}, {}), UsageError);
  test::expect_working(comm);
}

namespace {

/// `victim` dies at fault point `point` of a move of `leaving`: every
/// member raises, including the leaving ones (still members, their state
/// intact), the new processes give up (or no spare was taken), and the
/// survivors shrink and move those of `leaving` that are left again.
void killed_during_a_migration(const char* point, const std::vector<OriginalRank>& leaving, OriginalRank victim) {
  std::vector<OriginalRank> left;
  std::copy_if(leaving.begin(), leaving.end(), std::back_inserter(left), [&](OriginalRank r) { return r != victim; });
  auto comm = Comm::world();
  if (!comm.migrated_in()) {
    inject::arm(point, victim);
    const auto me = comm.original_rank();
    const auto mine = leaves(leaving, me) ? state_of(me, three_mib(me)) : std::vector<std::byte>{};
    test::expect_failure_reported(comm, {victim}, [&] { (void)detail::CommInternals::migrate(comm, leaving, mine); });
    comm = comm.shrink();
    EXPECT_EQ(comm.failures(), (std::vector<OriginalRank>{victim}));
    auto moved = detail::CommInternals::migrate(comm, left, mine);
    if (leaves(left, me)) detail::CommInternals::leave_after_migration(comm);
    ASSERT_TRUE(moved.has_value());
    comm = std::move(*moved);
  } else {
    EXPECT_TRUE(leaves(left, comm.original_rank()));
    const auto handover = detail::CommInternals::take_handover(comm);
    const auto expected = state_of(comm.original_rank(), three_mib(comm.original_rank()));
    ASSERT_EQ(handover.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), handover.span().begin()));
  }
  EXPECT_EQ(comm.size(), comm.original_size() - 1);
  test::expect_working(comm);
}

}  // namespace

TEST(Migrate, ABystanderKilledDuringAMigration) {
  killed_during_a_migration("comm.migrate.handover", {OriginalRank{1}}, OriginalRank{2});
}

// Two processes move, and one of them dies once the merge with the new
// processes worked, before the agreement on it (chaos seed 237: #2 and #3
// move by spawn, #2 is killed as it leaves): the new processes belong to
// another job of the runtime, which tells only the dead process's own job
// of its death. The agreement fails everywhere, the new processes leave,
// and #3 moves again with its state.
TEST(Migrate, ALeavingProcessKilledRightAfterTheMergeWithTheNewProcesses) {
  killed_during_a_migration("comm.respawn.merged", {OriginalRank{2}, OriginalRank{3}}, OriginalRank{2});
}

// With spares: a bystander dies as the spares learn of the move (before the
// pool's broadcast of who leaves, where it relays that broadcast to a
// spare). The spare never learns the round was a migration; it must still
// end the round as the others do (a chaos seed hung there: the spare started
// another round while the others renewed the pool).
TEST(Migrate, ABystanderKilledAsTheSparesAreToldOfAMigration) {
  killed_during_a_migration("comm.take_from_pool", {OriginalRank{3}}, OriginalRank{1});
}

// The leaving process dies during the handover: the others raise,
// shrink, and go on without it (nothing to migrate any more).
TEST(Migrate, TheLeavingProcessKilledDuringAMigration) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  ASSERT_FALSE(comm.migrated_in()) << "the new process must have given up";
  inject::arm("comm.migrate.handover", leaving);
  test::expect_failure_reported(comm, {leaving},
                                [&] { (void)detail::CommInternals::migrate(comm, std::vector{leaving}, {}); });
  comm = comm.shrink();
  EXPECT_EQ(comm.members().size(), static_cast<std::size_t>(comm.original_size() - 1));
  test::expect_working(comm);
}

// The leaving process dies as the split that orders the new communicator
// ends, and only the processes taking its rank learn of it there: the split
// ended well on the others (chaos seed 995 hung so, the parents in the
// duplicate of a communicator the new processes had given up). Every parent
// raises, the new process gives up (a spare waits on), and the others
// shrink and go on.
TEST(Migrate, TheLeavingProcessKilledAsTheSplitEndsWhereOnlyItsSuccessorSeesIt) {
  using Role = test::PartialFailure::Role;
  const OriginalRank leaving{1};
  // Before Comm::world(), where a new process joins and a spare waits: a
  // spare's first split makes the pool of active processes.
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  const char* spares = std::getenv("REPRISE_SPARES");
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const bool spare = parent == MPI_COMM_NULL && spares != nullptr && world_rank >= world_size - std::atoi(spares);
  if (parent != MPI_COMM_NULL || spare) split_failure.arm_alone(Role::kReportFailure, OriginalRank{-1}, spare ? 2 : 1);
  auto comm = Comm::world();
  ASSERT_FALSE(comm.migrated_in()) << "the new process must have given up";
  split_failure.arm_alone(comm.original_rank() == leaving ? Role::kDie : Role::kGoOn, comm.original_rank());
  const auto mine = comm.original_rank() == leaving ? state_of(leaving, three_mib(leaving)) : std::vector<std::byte>{};
  test::expect_failure_reported(comm, {leaving},
                                [&] { (void)detail::CommInternals::migrate(comm, std::vector{leaving}, mine); });
  comm = comm.shrink();
  EXPECT_EQ(comm.members().size(), static_cast<std::size_t>(comm.original_size() - 1));
  EXPECT_FALSE(comm.rank_of(leaving).has_value());
  test::expect_working(comm);
}

// The new process dies before it received the state (REPRISE_TEST_ARM arms
// it there, see mpi_main.cpp): every parent raises, including the leaving
// one, which is still a member and survives the shrink with its state.
TEST(Migrate, TheNewProcessKilledDuringAMigration) {
  const OriginalRank leaving{1};
  auto comm = Comm::world();
  ASSERT_FALSE(comm.migrated_in()) << "the new process must have died";
  const auto mine = comm.original_rank() == leaving ? state_of(leaving, three_mib(leaving)) : std::vector<std::byte>{};
  test::expect_failure_reported(comm, {},
                                [&] { (void)detail::CommInternals::migrate(comm, std::vector{leaving}, mine); });
  comm = comm.shrink();
  EXPECT_EQ(comm.size(), comm.original_size());
  EXPECT_TRUE(comm.rank_of(leaving).has_value());
  test::expect_working(comm);
}

}  // namespace reprise
