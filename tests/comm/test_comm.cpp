// Comm without failures: ranks, original ranks, collectives, bad input.

#include <gtest/gtest.h>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"

using namespace reprise;

TEST(Comm, WorldKnowsRanksAndOriginalRanks) {
  auto comm = Comm::world();
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(comm.rank().value(), world_rank);
  EXPECT_EQ(comm.size(), world_size);
  EXPECT_EQ(comm.original_size(), world_size);
  EXPECT_EQ(comm.original_rank(), OriginalRank{world_rank});
  EXPECT_TRUE(comm.missing().empty());
  EXPECT_TRUE(comm.failed().empty());
  EXPECT_FALSE(comm.is_replacement());
  EXPECT_FALSE(comm.is_revoked());
  ASSERT_EQ(comm.members().size(), static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(comm.original_rank(Rank{r}), OriginalRank{r});
    EXPECT_EQ(comm.rank_of(OriginalRank{r}), Rank{r});
  }
  EXPECT_TRUE(Comm::fault_tolerant()) << "the tests run under mpirun --with-ft ulfm";
}

TEST(Comm, CollectivesWork) {
  auto comm = Comm::world();
  test::expect_working(comm);
  comm.barrier();
  EXPECT_TRUE(comm.agree(true));
  EXPECT_FALSE(comm.agree(comm.rank().value() != 0)) << "rank 0 votes false";
  EXPECT_DOUBLE_EQ(comm.allreduce(1.5, MPI_MAX), 1.5);
}

TEST(Comm, BadRanksGiveClearErrors) {
  auto comm = Comm::world();
  try {
    (void)comm.original_rank(Rank{-1});
    ADD_FAILURE() << "negative rank accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("rank -1 is out of range"), std::string::npos) << error.what();
  }
  EXPECT_THROW((void)comm.original_rank(Rank{comm.size()}), UsageError);
  try {
    (void)comm.rank_of(OriginalRank{comm.original_size()});
    ADD_FAILURE() << "unknown original rank accepted";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("never existed"), std::string::npos) << error.what();
  }
  EXPECT_THROW((void)comm.rank_of(OriginalRank{-3}), UsageError);
  const std::vector<OutgoingMessage> bad{{Rank{comm.size() + 2}, {}}};
  EXPECT_THROW((void)comm.sparse_all_to_all(bad), UsageError);
  const std::vector<OutgoingMessage> negative{{Rank{-1}, {}}};
  EXPECT_THROW((void)comm.sparse_all_to_all(negative), UsageError);
  // The communicator is still usable after rejected input.
  test::expect_working(comm);
}

TEST(Comm, CheckTurnsMpiErrorsIntoExceptions) {
  auto comm = Comm::world();
  int value = 0;
  try {
    comm.check(MPI_Bcast(&value, 1, MPI_INT, comm.size() + 5, comm.raw()), "MPI_Bcast");
    ADD_FAILURE() << "an invalid root was accepted";
  } catch (const MpiError& error) {
    EXPECT_EQ(error.mpi_error_class(), MPI_ERR_ROOT);
    EXPECT_NE(std::string(error.what()).find("MPI_Bcast"), std::string::npos);
  }
}
