// Incremental checkpoints in other processes' memory, under real failures:
// a replacement gets the memory of the process it replaces back bit for bit
// (and again after a second failure, from a mirror given to the first
// replacement), a failure during a publish keeps the version before, losing a
// process and its mirror raises DataLost naming it, a failure that only
// some processes see while the images are located fails the restore on all
// of them alike, and bad input is refused on every process.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <memory>

#include "failure_helpers.hpp"
#include "mix.hpp"
#include "partial_failure.hpp"
#include "reprise/comm.hpp"
#include "reprise/error.hpp"
#include "reprise/incremental.hpp"
#include "reprise/inject.hpp"
#include "reprise/memory_sink.hpp"
#include "reprise/protected_memory.hpp"

using namespace reprise;
using reprise::test::expect_failure_reported;
using reprise::test::kill_and_detect;

namespace {

constexpr std::size_t kPages = 24;

/// The byte at `offset` of `rank`'s memory as of `version`: version v
/// rewrites every v-th page (version 1 writes all of them), so later
/// versions are true increments.
std::byte expected_byte(OriginalRank rank, std::uint64_t version, std::size_t offset) {
  const std::size_t page = offset / page_size();
  std::uint64_t last = 1;
  for (std::uint64_t v = 2; v <= version; ++v) {
    if (page % v == 0) last = v;
  }
  return static_cast<std::byte>(
      detail::mix64(static_cast<std::uint64_t>(rank.value()) * 1000003 + last * 7919 + offset) & 0xffU);
}

/// Protected memory of one process with an incremental checkpoint kept in
/// the memory of the others.
struct Process {
  Comm comm = Comm::world();
  /// `extra_page_if_replacement`: a replacement protects one page more than
  /// the process it replaces did.
  explicit Process(bool extra_page_if_replacement = false)
      : bytes((kPages + (extra_page_if_replacement && comm.is_replacement() ? 1 : 0)) * page_size()),
        data(static_cast<std::byte*>(protected_alloc(bytes))),
        checkpoint(std::make_unique<MemorySink>(comm, 2),
                   IncrementalConfig{CommitMode::kAsyncAdaptive, 4 * page_size()}) {
    checkpoint.protect({data, bytes});
  }
  ~Process() { protected_free(data); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void write_version(std::uint64_t version) {
    for (std::size_t offset = 0; offset < bytes; ++offset) {
      if ((offset / page_size()) % version == 0 || version == 1) {
        data[offset] = expected_byte(comm.original_rank(), version, offset);
      }
    }
  }
  /// Bytes that differ from `version`.
  [[nodiscard]] std::size_t differences(std::uint64_t version) const {
    std::size_t wrong = 0;
    for (std::size_t offset = 0; offset < bytes; ++offset) {
      wrong += data[offset] != expected_byte(comm.original_rank(), version, offset) ? 1 : 0;
    }
    return wrong;
  }

  std::size_t bytes;
  std::byte* data;
  IncrementalCheckpoint checkpoint;
};

/// The next `MPI_Allgatherv` reprise calls, when a test arms it.
reprise::test::PartialFailure allgatherv_failure;

}  // namespace

/// The allgatherv reprise calls: when armed, a failure only some see.
int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  const int rc = PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  return allgatherv_failure.finish(rc, comm);
}

TEST(IncrementalMemory, ReplacementsGetTheirMemoryBackBitwise) {
  Process s;
  // One node, two copies: process 0 is mirrored by process 2 (the buddy of
  // slot s is slot s + 2). Once 2 is replaced, the mirror of 0 exists only
  // because the restore gave one to the replacement.
  const OriginalRank first{2};
  const OriginalRank second{0};
  if (s.comm.epoch() == 0) {
    s.write_version(1);
    EXPECT_EQ(s.checkpoint.checkpoint(), 1U);
    s.write_version(2);  // races the commit of version 1
    EXPECT_EQ(s.checkpoint.checkpoint(), 2U);
    EXPECT_EQ(s.checkpoint.wait().pages_committed, kPages / 2) << "version 2 changed every other page";
    s.write_version(3);  // work after the last checkpoint, lost by the rollback
    kill_and_detect(s.comm, {first});
    s.comm = s.comm.respawn();
  }
  if (s.comm.epoch() == 1) {
    s.checkpoint.restore();
    EXPECT_EQ(s.differences(2), 0U) << "original rank " << s.comm.original_rank() << " after the first recovery";
    EXPECT_EQ(s.checkpoint.version(), 2U);
    s.write_version(3);
    EXPECT_EQ(s.checkpoint.checkpoint(), 3U);
    (void)s.checkpoint.wait();
    s.write_version(4);
    kill_and_detect(s.comm, {second});
    s.comm = s.comm.respawn();
  }
  s.checkpoint.restore();
  EXPECT_EQ(s.differences(3), 0U) << "original rank " << s.comm.original_rank() << " after the second recovery";
  EXPECT_EQ(s.checkpoint.version(), 3U);
}

TEST(IncrementalMemory, AFailureDuringAPublishKeepsTheVersionBefore) {
  Process s;
  const OriginalRank victim{1};
  if (s.comm.epoch() == 0) {
    s.write_version(1);
    (void)s.checkpoint.checkpoint();
    (void)s.checkpoint.wait();
    s.write_version(2);
    (void)s.checkpoint.checkpoint();
    inject::arm("comm.sparse_all_to_all", victim);  // dies while version 2 is sent to the mirrors
    expect_failure_reported(s.comm, {victim}, [&] { (void)s.checkpoint.wait(); });
    EXPECT_EQ(s.checkpoint.version(), 1U) << "the failed version is not kept";
    s.comm = s.comm.respawn();
  }
  s.checkpoint.restore();
  EXPECT_EQ(s.differences(1), 0U) << "original rank " << s.comm.original_rank();
  EXPECT_EQ(s.checkpoint.version(), 1U);
}

TEST(IncrementalMemory, AFailureOnlySomeSeeWhileImagesAreLocatedFailsTheRestoreEverywhere) {
  Process s;
  const OriginalRank victim{3};
  const OriginalRank unlucky{1};
  if (s.comm.epoch() == 0) {
    s.write_version(1);
    (void)s.checkpoint.checkpoint();
    (void)s.checkpoint.wait();
    s.write_version(2);
    allgatherv_failure.arm(s.comm, victim, unlucky);
    // Processes 0 and 2 find who holds which image; process 1 learns of the
    // death there. If it went on to recover alone, the others would wait
    // forever in the agreement that ends the exchange of images.
    expect_failure_reported(s.comm, {victim}, [&] { s.checkpoint.restore(); });
    s.comm = s.comm.respawn();
  }
  s.checkpoint.restore();
  EXPECT_EQ(s.differences(1), 0U) << "original rank " << s.comm.original_rank();
  EXPECT_EQ(s.checkpoint.version(), 1U);
}

TEST(IncrementalMemory, LosingAProcessAndItsMirrorRaisesDataLost) {
  Process s;
  ASSERT_EQ(s.comm.size(), 4);
  // One node, two copies: process r is mirrored by r + 2 (mod 4), so 1 and 3
  // hold each other's only copies.
  const std::vector<OriginalRank> victims{OriginalRank{1}, OriginalRank{3}};
  if (s.comm.epoch() == 0) {
    s.write_version(1);
    (void)s.checkpoint.checkpoint();
    (void)s.checkpoint.wait();
    kill_and_detect(s.comm, victims);
    s.comm = s.comm.respawn();
  }
  try {
    s.checkpoint.restore();
    ADD_FAILURE() << "no DataLost";
  } catch (const DataLost& error) {
    // A caller that revokes on any error (as Driver::run does) must not
    // turn the loss into a revoke on processes still inside the restore.
    s.comm.revoke();
    const std::vector<BlockRange> expected{{BlockId{1}, BlockId{2}}, {BlockId{3}, BlockId{4}}};
    EXPECT_EQ(error.lost(), expected) << error.what();
    EXPECT_EQ(error.lost_processes(), victims) << error.what();
    EXPECT_NE(std::string(error.what()).find("original rank(s) 1, 3 "), std::string::npos) << error.what();
  }
}

TEST(IncrementalMemory, AReplacementWithOtherRegionsIsRefusedEverywhere) {
  const OriginalRank victim{1};
  Process s(true);
  const bool replacement = s.comm.is_replacement();
  if (s.comm.epoch() == 0) {
    s.write_version(1);
    (void)s.checkpoint.checkpoint();
    (void)s.checkpoint.wait();
    s.write_version(2);
    kill_and_detect(s.comm, {victim});
    s.comm = s.comm.respawn();
  }
  try {
    s.checkpoint.restore();
    ADD_FAILURE() << "a region of another size was accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("same regions"), std::string::npos) << error.what();
  }
  if (!replacement) {
    EXPECT_EQ(s.differences(2), 0U) << "nothing was restored";
  }
}

TEST(IncrementalMemory, BadInputIsRefused) {
  auto comm = Comm::world();
  EXPECT_THROW(MemorySink(comm, 1), UsageError) << "a single copy is no mirror";
  EXPECT_THROW(MemorySink(comm, comm.size() + 1), UsageError) << "more copies than processes";
  Process s;
  EXPECT_THROW(s.checkpoint.restore(), UsageError) << "nothing published yet";
}
