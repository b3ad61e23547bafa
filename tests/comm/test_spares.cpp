// Spare processes (REPRISE_SPARES): started with the job, they wait until a
// respawn() takes them as replacements, with no MPI_Comm_spawn; once they
// are used up, respawn() spawns again. Real kills; run with 2 spares.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/inject.hpp"
#include "reprise/store.hpp"

using namespace reprise;
using reprise::test::expect_working;
using reprise::test::kill_and_detect;

namespace {

/// A spawned process has a world of its own (the replacements spawned
/// together); the job's first processes, spares included, share one of 6.
bool was_spawned() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world != 6;
}

/// This process's resident memory in MiB (VmRSS), -1 if unreadable.
long resident_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6)) >> 10;
  }
  return -1;
}

/// REPRISE_SPARE_WARM_MIB as a number (0 when unset).
long warm_mib() {
  const char* text = std::getenv("REPRISE_SPARE_WARM_MIB");
  return text == nullptr ? 0 : std::stol(text);
}

}  // namespace

TEST(Spares, RespawnTakesSparesBeforeItSpawns) {
  auto comm = Comm::world();  // the 2 spares wait in here until taken
  ASSERT_EQ(comm.original_size(), 4) << "run on 6 processes with REPRISE_SPARES=2";
  // Epoch e kills original rank e + 1; the replacements of epochs 1 and 2
  // are the two spares.
  while (comm.epoch() < 3) {
    const auto epoch = static_cast<int>(comm.epoch());
    if (epoch > 0) {
      expect_working(comm);
      if (comm.original_rank() == OriginalRank{epoch}) {
        EXPECT_TRUE(comm.is_replacement());
        EXPECT_FALSE(was_spawned()) << "the replacement of #" << epoch << " is spare number " << epoch;
        // With REPRISE_SPARE_WARM_MIB, the heap it touched while waiting stayed resident.
        EXPECT_GE(resident_mib(), warm_mib())
            << "a spare taken over kept less resident memory than it was told to warm";
      }
    }
    kill_and_detect(comm, {OriginalRank{epoch + 1}});
    comm = comm.respawn();
  }
  expect_working(comm);
  EXPECT_EQ(comm.size(), 4);
  EXPECT_EQ(comm.epoch(), 3U);
  if (comm.original_rank() == OriginalRank{3}) {
    EXPECT_TRUE(was_spawned()) << "no spare left: #3 was spawned";
  }
}

TEST(Spares, UnusedSparesLeaveAtTheEnd) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.original_size(), 4);
  EXPECT_EQ(comm.allreduce(1, MPI_SUM), 4) << "the spares are not members";
}

TEST(Spares, ASpawnedReplacementTakesPartInTheNextRespawn) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.original_size(), 4);
  // Epochs 1 and 2 use up the spares, epoch 3 spawns #3; then the spawned
  // process must recover with the others from the loss of #0, which is
  // spawned too (it must not look for spares of its own).
  while (comm.epoch() < 4) {
    const auto epoch = static_cast<int>(comm.epoch());
    kill_and_detect(comm, {OriginalRank{(epoch + 1) % 4}});
    comm = comm.respawn();
  }
  expect_working(comm);
  EXPECT_EQ(comm.size(), 4);
  if (comm.original_rank() == OriginalRank{0} || comm.original_rank() == OriginalRank{3}) {
    EXPECT_TRUE(was_spawned());
  }
}

TEST(Spares, UnusedSparesLeaveAfterAShrink) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.original_size(), 4);
  kill_and_detect(comm, {OriginalRank{2}});
  comm = comm.shrink();
  expect_working(comm);
  EXPECT_EQ(comm.size(), 3);
}

TEST(Spares, AProcessLostDuringTheHandOverCountsAsFailed) {
  auto comm = Comm::world();
  ASSERT_EQ(comm.original_size(), 4);
  // r = 3 on 4 processes: #0 and #2 never hold every copy of a block together.
  constexpr std::size_t kBlockBytes = 16;
  Store store(comm, {.copies = 3, .block_bytes = kBlockBytes});
  auto byte_of = [](std::uint64_t id, std::size_t b) { return static_cast<std::byte>((id * 31 + b) & 0xffU); };
  if (comm.epoch() == 0) {
    const auto first = static_cast<std::uint64_t>(comm.rank().value()) * 100;
    std::vector<std::byte> mine(100 * kBlockBytes);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = byte_of(first + i / kBlockBytes, i % kBlockBytes);
    store.submit({BlockId{first}, BlockId{first + 100}}, mine);
    // #0 dies while the spares are being handed #2's place: the round runs
    // again and both spares are taken.
    inject::arm("comm.take_from_pool", OriginalRank{0});
    kill_and_detect(comm, {OriginalRank{2}});
    comm = comm.respawn();
  }
  EXPECT_EQ(comm.failures(), (std::vector<OriginalRank>{OriginalRank{0}, OriginalRank{2}}));
  store.heal();
  std::vector<std::byte> all(400 * kBlockBytes);
  store.load(std::vector<BlockRange>{{BlockId{0}, BlockId{400}}}, all);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] != byte_of(i / kBlockBytes, i % kBlockBytes) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
}
