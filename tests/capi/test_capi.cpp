// The C interface (include/reprise/reprise.h): statuses and last errors, the
// driver recovering a killed process from a C step function (killed by the
// step, or by the driver carrying out REPRISE_FAULTS), a step's own
// error ending the run everywhere, and the store's data-loss report. Real
// kills (SIGKILL); every recovered value checked.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "reprise/inject.hpp"
#include "reprise/rank.hpp"
#include "reprise/reprise.h"

namespace {

struct World {
  reprise_comm* comm = nullptr;
  World() { EXPECT_EQ(reprise_comm_world(&comm), REPRISE_OK) << reprise_last_error(); }
  ~World() { reprise_comm_free(comm); }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
};

// An element type the C interface must refuse (what a C caller can pass).
const auto kNotAnElementType = static_cast<reprise_element_type>(static_cast<int>(REPRISE_FLOAT64) + 2);

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// Every step adds the sum of the original ranks to `total` (an allreduce on
// the communicator of now) and `step` to `trail`; process `victim` dies
// before step `kill_at` (once: its replacement does not).
struct Sums {
  reprise_comm* comm = nullptr;
  int victim = -1;
  std::uint64_t kill_at = 0;
  std::int64_t total = 0;
  std::array<double, 3> trail{};
};

int add_sums(std::uint64_t step, void* user) {
  auto& sums = *static_cast<Sums*>(user);
  const int me = reprise_comm_original_rank(sums.comm);
  if (me == sums.victim && step == sums.kill_at && reprise_comm_is_replacement(sums.comm) == 0) {
    reprise::inject::kill_self(reprise::OriginalRank{me});
  }
  std::int64_t sum = me;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT64_T, MPI_SUM, reprise_comm_mpi(sums.comm));
  const int status = reprise_comm_check(sums.comm, rc, "MPI_Allreduce");
  if (status != REPRISE_OK) return status;
  sums.total += sum;
  for (auto& value : sums.trail) value += static_cast<double>(step);
  return REPRISE_OK;
}

}  // namespace

TEST(CInterface, ANullHandleOrWrongArgumentIsRefusedInOneLine) {
  EXPECT_EQ(reprise_checkpoint_protect(nullptr, "x", nullptr, 0), REPRISE_ERR_USAGE);
  EXPECT_TRUE(starts_with(reprise_last_error(), "reprise_checkpoint_protect: checkpoint is NULL")) << reprise_last_error();
  EXPECT_EQ(reprise_last_error_mpi_class(), MPI_ERR_ARG);
  World world;
  reprise_checkpoint* checkpoint = nullptr;
  ASSERT_EQ(reprise_checkpoint_create(world.comm, nullptr, &checkpoint), REPRISE_OK) << reprise_last_error();
  double values[4] = {};
  EXPECT_EQ(reprise_checkpoint_protect_array(checkpoint, "v", values, kNotAnElementType, 4),
            REPRISE_ERR_USAGE);
  EXPECT_NE(std::string(reprise_last_error()).find("element type 12 is not"), std::string::npos) << reprise_last_error();
  EXPECT_EQ(reprise_checkpoint_protect_array(checkpoint, "v", values, REPRISE_FLOAT64, 4), REPRISE_OK);
  EXPECT_EQ(reprise_checkpoint_protect(checkpoint, "v", values, sizeof values), REPRISE_ERR_USAGE);
  EXPECT_NE(std::string(reprise_last_error()).find("registered twice"), std::string::npos) << reprise_last_error();
  EXPECT_EQ(reprise_checkpoint_protect(checkpoint, nullptr, values, sizeof values), REPRISE_ERR_USAGE);
  reprise_store* store = nullptr;
  EXPECT_EQ(reprise_store_create(world.comm, nullptr, &store), REPRISE_ERR_USAGE);
  EXPECT_EQ(store, nullptr);
  EXPECT_EQ(reprise_disk_level_create(world.comm, checkpoint, nullptr, nullptr), REPRISE_ERR_USAGE);
  reprise_faults* faults = nullptr;
  setenv("REPRISE_TEST_BAD_FAULTS", "two@three", 1);
  EXPECT_EQ(reprise_faults_from_env("REPRISE_TEST_BAD_FAULTS", 2, &faults), REPRISE_ERR_USAGE);
  EXPECT_NE(std::string(reprise_last_error()).find("REPRISE_TEST_BAD_FAULTS"), std::string::npos) << reprise_last_error();
  std::uint64_t version = 0;
  EXPECT_EQ(reprise_checkpoint_commit(checkpoint, &version), REPRISE_OK) << reprise_last_error();
  EXPECT_EQ(version, reprise_checkpoint_version(checkpoint));
  reprise_checkpoint_free(checkpoint);
}

TEST(CInterface, TheDriverRespawnsAKilledProcessAndRestoresItsState) {
  World world;
  Sums sums{.comm = world.comm, .victim = reprise_comm_original_size(world.comm) - 1, .kill_at = 7};
  reprise_checkpoint* checkpoint = nullptr;
  ASSERT_EQ(reprise_checkpoint_create(world.comm, nullptr, &checkpoint), REPRISE_OK) << reprise_last_error();
  ASSERT_EQ(reprise_checkpoint_protect(checkpoint, "total", &sums.total, sizeof sums.total), REPRISE_OK);
  ASSERT_EQ(reprise_checkpoint_protect_array(checkpoint, "trail", sums.trail.data(), REPRISE_FLOAT64, sums.trail.size()),
            REPRISE_OK);
  reprise_driver* driver = nullptr;
  const reprise_driver_config config{.mode = REPRISE_RESPAWN, .max_recoveries = 0, .every_steps = 5, .every_seconds = 0,
                                     .mtbf_seconds = 0, .inject_faults = 0};
  ASSERT_EQ(reprise_driver_create(world.comm, checkpoint, &config, &driver), REPRISE_OK) << reprise_last_error();
  int recoveries_seen = 0;
  ASSERT_EQ(reprise_driver_on_recovery(
                driver,
                [](const reprise_recovery* recovery, void* user) {
                  ++*static_cast<int*>(user);
                  return recovery->lost_count == 1 ? REPRISE_OK : 99;
                },
                &recoveries_seen),
            REPRISE_OK);
  constexpr std::uint64_t kSteps = 12;
  ASSERT_EQ(reprise_driver_run(driver, kSteps, add_sums, &sums), REPRISE_OK) << reprise_last_error();
  const int size = reprise_comm_size(world.comm);
  EXPECT_EQ(size, reprise_comm_original_size(world.comm));
  EXPECT_EQ(sums.total, static_cast<std::int64_t>(kSteps) * size * (size - 1) / 2);
  for (const double value : sums.trail) EXPECT_EQ(value, static_cast<double>(kSteps * (kSteps - 1) / 2));
  EXPECT_EQ(reprise_driver_step(driver), kSteps);
  EXPECT_EQ(recoveries_seen, 1);
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
}

// inject_faults: the driver carries out REPRISE_FAULTS itself (the last
// process dies before step 7, the step does nothing for it) and refuses a
// plan for a rank the job never had.
TEST(CInterface, TheDriverCarriesOutTheFaultPlanWhenAsked) {
  World world;
  const int last = reprise_comm_original_size(world.comm) - 1;
  Sums sums{.comm = world.comm};
  reprise_checkpoint* checkpoint = nullptr;
  ASSERT_EQ(reprise_checkpoint_create(world.comm, nullptr, &checkpoint), REPRISE_OK) << reprise_last_error();
  ASSERT_EQ(reprise_checkpoint_protect(checkpoint, "total", &sums.total, sizeof sums.total), REPRISE_OK);
  const reprise_driver_config config{.mode = REPRISE_RESPAWN, .max_recoveries = 0, .every_steps = 5, .every_seconds = 0,
                                     .mtbf_seconds = 0, .inject_faults = 1};
  reprise_driver* driver = nullptr;
  setenv("REPRISE_FAULTS", "9@2", 1);
  EXPECT_EQ(reprise_driver_create(world.comm, checkpoint, &config, &driver), REPRISE_ERR_USAGE);
  EXPECT_TRUE(starts_with(reprise_last_error(), "reprise_driver_create: REPRISE_FAULTS=\"9@2\": rank 9 does not exist"))
      << reprise_last_error();
  setenv("REPRISE_FAULTS", (std::to_string(last) + "@7").c_str(), 1);
  ASSERT_EQ(reprise_driver_create(world.comm, checkpoint, &config, &driver), REPRISE_OK) << reprise_last_error();
  unsetenv("REPRISE_FAULTS");
  constexpr std::uint64_t kSteps = 12;
  ASSERT_EQ(reprise_driver_run(driver, kSteps, add_sums, &sums), REPRISE_OK) << reprise_last_error();
  const int size = reprise_comm_size(world.comm);
  EXPECT_EQ(sums.total, static_cast<std::int64_t>(kSteps) * size * (size - 1) / 2);
  if (reprise_comm_is_replacement(world.comm) == 0) {
    EXPECT_EQ(reprise_driver_recoveries(driver), 1U);
  }
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
}

TEST(CInterface, AStepsOwnErrorEndsTheRunOnEveryProcess) {
  World world;
  std::int64_t value = 0;
  reprise_checkpoint* checkpoint = nullptr;
  ASSERT_EQ(reprise_checkpoint_create(world.comm, nullptr, &checkpoint), REPRISE_OK) << reprise_last_error();
  ASSERT_EQ(reprise_checkpoint_protect(checkpoint, "value", &value, sizeof value), REPRISE_OK);
  reprise_driver* driver = nullptr;
  const reprise_driver_config config{.mode = REPRISE_RESPAWN, .max_recoveries = 0, .every_steps = 2, .every_seconds = 0,
                                     .mtbf_seconds = 0, .inject_faults = 0};
  ASSERT_EQ(reprise_driver_create(world.comm, checkpoint, &config, &driver), REPRISE_OK) << reprise_last_error();
  Sums failing{.comm = world.comm};
  const auto status = reprise_driver_run(
      driver, 10,
      [](std::uint64_t step, void* user) {
        // The others go on into the checkpoint before step 4 and wait there.
        const auto& sums = *static_cast<const Sums*>(user);
        return step == 3 && reprise_comm_original_rank(sums.comm) == 1 ? 42 : REPRISE_OK;
      },
      &failing);
  if (reprise_comm_original_rank(world.comm) == 1) {
    EXPECT_EQ(status, REPRISE_ERR_STEP) << reprise_last_error();
    EXPECT_NE(std::string(reprise_last_error()).find("the step function at step 3 returned 42"), std::string::npos)
        << reprise_last_error();
  } else {
    EXPECT_EQ(status, REPRISE_ERR_OTHER) << reprise_last_error();
    EXPECT_NE(std::string(reprise_last_error()).find("another process ended with an error"), std::string::npos)
        << reprise_last_error();
  }
  reprise_driver_free(driver);
  reprise_checkpoint_free(checkpoint);
}

TEST(CInterface, TheStoreNamesLostBlocksAfterAShrink) {
  World world;
  constexpr std::size_t kBlockBytes = 16;
  constexpr std::uint64_t kBlocksEach = 8;
  const int me = reprise_comm_original_rank(world.comm), size = reprise_comm_size(world.comm);
  reprise_store* store = nullptr;
  const reprise_store_config config{
      .block_bytes = kBlockBytes, .copies = 1, .bytes_per_permuted_range = 0, .seed = 0, .join_timeout_seconds = 0};
  ASSERT_EQ(reprise_store_create(world.comm, &config, &store), REPRISE_OK) << reprise_last_error();
  const auto first = static_cast<std::uint64_t>(me) * kBlocksEach;
  std::vector<std::uint8_t> mine(kBlocksEach * kBlockBytes);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<std::uint8_t>(first * kBlockBytes + i);
  ASSERT_EQ(reprise_store_submit(store, {first, first + kBlocksEach}, mine.data(), mine.size()), REPRISE_OK)
      << reprise_last_error();
  const int victim = 1;
  if (me == victim) reprise::inject::kill_self(reprise::OriginalRank{me});
  int status = REPRISE_OK;
  while (status == REPRISE_OK) status = reprise_comm_check(world.comm, MPI_Barrier(reprise_comm_mpi(world.comm)), "MPI_Barrier");
  ASSERT_TRUE(status == REPRISE_ERR_PROCESS_FAILED || status == REPRISE_ERR_REVOKED) << reprise_last_error();
  ASSERT_EQ(reprise_comm_revoke(world.comm), REPRISE_OK);
  ASSERT_EQ(reprise_comm_shrink(world.comm), REPRISE_OK) << reprise_last_error();
  EXPECT_EQ(reprise_comm_size(world.comm), size - 1);
  const auto blocks = static_cast<std::uint64_t>(size) * kBlocksEach;
  const reprise_block_range everything{0, blocks};
  std::vector<std::uint8_t> loaded(blocks * kBlockBytes);
  ASSERT_EQ(reprise_store_load(store, &everything, 1, loaded.data(), loaded.size()), REPRISE_ERR_DATA_LOST)
      << reprise_last_error();
  std::array<reprise_block_range, 4> lost{};
  ASSERT_EQ(reprise_last_error_lost_ranges(lost.data(), lost.size()), 1U) << reprise_last_error();
  EXPECT_EQ(lost[0].begin, victim * kBlocksEach);
  EXPECT_EQ(lost[0].end, (victim + 1) * kBlocksEach);
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    if (i / (kBlocksEach * kBlockBytes) == static_cast<std::size_t>(victim)) continue;
    ASSERT_EQ(loaded[i], static_cast<std::uint8_t>(i)) << "byte " << i;
  }
  reprise_store_free(store);
}
