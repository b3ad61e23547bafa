// Ownership: the table of who computes on which block ranges, kept alike on
// every process. Processes are killed for real, one after the other; after
// each shrink the departed processes' ranges (adopted ones included) are
// split evenly over the survivors, and the table still covers every block
// exactly once, the same on every process.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"
#include "reprise/ownership.hpp"

using namespace reprise;

namespace {

constexpr std::uint64_t kBlocksPerProcess = 1000;

BlockRange range_of(OriginalRank rank) {
  const auto first = static_cast<std::uint64_t>(rank.value()) * kBlocksPerProcess;
  return {BlockId{first}, BlockId{first + kBlocksPerProcess}};
}

/// Every block of the job is in exactly one entry, whose owner is a member.
void expect_covers_every_block_once(const Comm& comm, const Ownership& owners) {
  std::vector<Ownership::Entry> entries = owners.entries();
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.range.begin.value < b.range.begin.value; });
  std::uint64_t next = 0;
  for (const auto& entry : entries) {
    EXPECT_EQ(entry.range.begin.value, next) << "a gap or an overlap";
    EXPECT_TRUE(comm.rank_of(entry.owner).has_value()) << "owned by departed " << entry.owner;
    next = entry.range.end.value;
  }
  EXPECT_EQ(next, kBlocksPerProcess * static_cast<std::uint64_t>(comm.original_size()));
}

}  // namespace

TEST(Ownership, DepartedRangesAreSplitEvenlyAfterEachShrink) {
  Comm comm = Comm::world();
  Ownership owners(comm, range_of);
  expect_covers_every_block_once(comm, owners);
  EXPECT_EQ(owners.owned_by(comm.original_rank()), std::vector<BlockRange>{range_of(comm.original_rank())});
  EXPECT_TRUE(owners.adopt_departed(comm).empty()) << "nobody departed yet";

  for (const OriginalRank victim : {OriginalRank{1}, OriginalRank{2}}) {
    test::kill_and_detect(comm, {victim});
    comm = comm.shrink();
    const auto before = owners.owned_by(victim);
    std::uint64_t departed = 0;
    for (const auto& range : before) departed += range.size();
    const auto mine = owners.adopt_departed(comm);
    std::uint64_t got = 0;
    for (const auto& range : mine) got += range.size();
    // Each departed range is cut into size() pieces that differ by at most a block.
    const auto n = static_cast<std::uint64_t>(comm.size());
    EXPECT_GE(got + before.size(), departed / n);
    EXPECT_LE(got, departed / n + before.size());
    EXPECT_EQ(comm.allreduce(got, MPI_SUM), departed) << "every departed block went to exactly one survivor";
    EXPECT_TRUE(owners.owned_by(victim).empty());
    expect_covers_every_block_once(comm, owners);
    // The same table everywhere: a fingerprint of the entries agrees.
    std::uint64_t fingerprint = 0;
    for (const auto& entry : owners.entries()) {
      fingerprint =
          fingerprint * 1000003 + entry.range.begin.value * 31 + static_cast<std::uint64_t>(entry.owner.value());
    }
    EXPECT_EQ(comm.allreduce(fingerprint, MPI_MAX), comm.allreduce(fingerprint, MPI_MIN));
  }
}
