// Real failures (SIGKILL) under ULFM: survivors are told, heal by shrinking
// or respawning, also when more processes die during the recovery itself.
// Each case runs alone in its own job (see CASES in CMakeLists.txt).

#include <gtest/gtest.h>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

using namespace reprise;
using reprise::test::expect_failure_reported;
using reprise::test::expect_working;
using reprise::test::kill_and_detect;

namespace {

/// Every original rank but `lost`, ascending.
std::vector<OriginalRank> all_but(int size, const std::vector<OriginalRank>& lost) {
  std::vector<OriginalRank> ranks;
  for (int r = 0; r < size; ++r) {
    if (std::find(lost.begin(), lost.end(), OriginalRank{r}) == lost.end()) ranks.emplace_back(r);
  }
  return ranks;
}

void expect_shrunk_without(Comm& before, Comm& after, const std::vector<OriginalRank>& lost) {
  EXPECT_EQ(after.size(), before.size() - static_cast<int>(lost.size()));
  EXPECT_EQ(after.original_size(), before.original_size());
  EXPECT_EQ(after.original_rank(), before.original_rank()) << "a survivor keeps its original rank";
  EXPECT_EQ(after.members(), all_but(before.original_size(), lost));
  EXPECT_EQ(after.missing(), lost);
  EXPECT_EQ(after.failed(), lost);
  for (auto rank : lost) EXPECT_FALSE(after.rank_of(rank).has_value());
  expect_working(after);
}

void expect_full_size(Comm& comm, const std::vector<OriginalRank>& failed_so_far) {
  EXPECT_EQ(comm.size(), comm.original_size());
  EXPECT_EQ(comm.rank().value(), comm.original_rank().value()) << "healed communicator is ordered by original rank";
  EXPECT_TRUE(comm.missing().empty());
  EXPECT_EQ(comm.failed(), failed_so_far);
  expect_working(comm);
}

}  // namespace

TEST(Failures, OneKill) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{1}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
}

TEST(Failures, TwoKillsAtOnce) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{1}, OriginalRank{comm.size() - 1}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
}

TEST(Failures, KillRankZero) {
  auto comm = Comm::world();
  const std::vector<OriginalRank> victims{OriginalRank{0}};
  kill_and_detect(comm, victims);
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, victims);
  EXPECT_EQ(healed.original_rank(Rank{0}), OriginalRank{1});
}

namespace {

/// Every member sends 1 KiB + (receiver's rank) bytes, each byte its original
/// rank, to every member, and checks every byte it receives.
void exchange_and_check(Comm& c) {
  std::vector<std::vector<std::byte>> payloads;
  std::vector<OutgoingMessage> out;
  for (int to = 0; to < c.size(); ++to) {
    payloads.emplace_back(1024 + static_cast<std::size_t>(to), static_cast<std::byte>(c.original_rank().value()));
  }
  for (int to = 0; to < c.size(); ++to) out.push_back({Rank{to}, payloads[static_cast<std::size_t>(to)]});
  const auto in = c.sparse_all_to_all(out);
  ASSERT_EQ(in.size(), static_cast<std::size_t>(c.size()));
  for (const auto& message : in) {
    const auto from = c.original_rank(message.source);
    ASSERT_EQ(message.payload.size(), 1024 + static_cast<std::size_t>(c.rank().value()));
    for (auto byte : message.payload) ASSERT_EQ(byte, static_cast<std::byte>(from.value()));
  }
}

/// Original rank 2 dies at fault point `point` of an exchange: every
/// survivor must raise, and the healed communicator then exchanges correctly.
void kill_in_exchange(const char* point) {
  auto comm = Comm::world();
  const OriginalRank victim{2};
  inject::arm(point, victim);
  expect_failure_reported(comm, {victim}, [&] {
    comm.barrier();
    exchange_and_check(comm);
  });
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {victim});
  exchange_and_check(healed);
}

}  // namespace

// The victim dies with its sends posted, before its barrier.
TEST(Failures, KillDuringExchange) { kill_in_exchange("comm.sparse_all_to_all"); }

// The victim dies after its own barrier completed: others may have completed
// theirs too, and only the final agreement makes them all raise.
TEST(Failures, KillAfterExchange) { kill_in_exchange("comm.sparse_all_to_all.done"); }

TEST(Failures, KillDuringShrink) {
  auto comm = Comm::world();
  inject::arm("comm.shrink", OriginalRank{2});  // dies inside the recovery
  kill_and_detect(comm, {OriginalRank{1}});
  auto healed = comm.shrink();
  expect_shrunk_without(comm, healed, {OriginalRank{1}, OriginalRank{2}});
}

TEST(Failures, RespawnTwice) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{comm.original_size() - 1};
  // Replacements start here too: Comm::world() joined them to the survivors,
  // and failed() tells them which stage the survivors are at.
  if (comm.failed().empty()) {
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  if (comm.failed().size() == 1) {
    expect_full_size(comm, {first});
    EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first);
    kill_and_detect(comm, {second});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
  EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first || comm.original_rank() == second);
}

TEST(Failures, KillDuringRespawn) {
  auto comm = Comm::world();
  const OriginalRank first{1};
  const OriginalRank second{2};
  if (!comm.is_replacement()) {
    inject::arm("comm.respawn", second);  // dies inside the recovery, before the spawn
    kill_and_detect(comm, {first});
    comm = comm.respawn();
  }
  expect_full_size(comm, {first, second});
  EXPECT_EQ(comm.is_replacement(), comm.original_rank() == first || comm.original_rank() == second);
}

TEST(Failures, SendsToAProcessThatDiesDoNotAbortAReplacement) {
  // A spawned replacement talks to the others over TCP. When a process it is
  // sending large messages to dies, the replacement must carry on.
  auto comm = Comm::world();
  if (comm.epoch() == 0) {
    kill_and_detect(comm, {OriginalRank{1}});
    comm = comm.respawn();
  }
  const OriginalRank victim{2};
  inject::arm("comm.sparse_all_to_all", victim);
  std::vector<std::byte> payload(8U << 20U, std::byte{7});
  std::vector<OutgoingMessage> outgoing;
  for (int r = 0; r < comm.size(); ++r) outgoing.push_back({Rank{r}, payload});
  expect_failure_reported(comm, {victim}, [&] { (void)comm.sparse_all_to_all(outgoing); });
  comm = comm.shrink();
  for (int round = 0; round < 3; ++round) {
    outgoing.clear();
    for (int r = 0; r < comm.size(); ++r) outgoing.push_back({Rank{r}, payload});
    const auto received = comm.sparse_all_to_all(outgoing);
    EXPECT_EQ(received.size(), static_cast<std::size_t>(comm.size()));
  }
  expect_working(comm);
}
