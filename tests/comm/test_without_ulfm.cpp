// The library built without ULFM still builds and works while nothing fails,
// and a recovery it cannot do ends the job with a message saying why.

#include <gtest/gtest.h>

#include "failure_helpers.hpp"
#include "reprise/comm.hpp"

using namespace reprise;

TEST(WithoutUlfm, WorksWhileNothingFails) {
  EXPECT_FALSE(Comm::fault_tolerant());
  auto comm = Comm::world();
  test::expect_working(comm);
  EXPECT_TRUE(comm.agree(true));
  EXPECT_FALSE(comm.agree(comm.rank().value() == 0));
  const std::vector<std::byte> payload(16, std::byte{7});
  const std::vector<OutgoingMessage> out{{Rank{(comm.rank().value() + 1) % comm.size()}, payload}};
  const auto in = comm.sparse_all_to_all(out);
  ASSERT_EQ(in.size(), 1U);
  EXPECT_EQ(in[0].payload, payload);
}

// Registered to pass only if the job ends with reprise's explanation.
TEST(WithoutUlfm, RecoveryEndsTheJobWithAMessage) {
  auto comm = Comm::world();
  auto shrunk = comm.shrink();
  ADD_FAILURE() << "shrink() returned without ULFM";
}
