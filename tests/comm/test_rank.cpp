#include <gtest/gtest.h>

#include <sstream>
#include <type_traits>
#include <unordered_set>

#include "reprise/rank.hpp"

using reprise::OriginalRank;
using reprise::Rank;

static_assert(!std::is_convertible_v<int, Rank>, "a plain int must not silently become a Rank");
static_assert(!std::is_convertible_v<Rank, OriginalRank>, "current and original ranks must not mix");
static_assert(!std::is_convertible_v<OriginalRank, Rank>, "current and original ranks must not mix");
static_assert(!std::is_convertible_v<Rank, int>, "a Rank converts to int only through value()");

TEST(Rank, ComparesAndPrints) {
  EXPECT_LT(Rank{1}, Rank{2});
  EXPECT_EQ(OriginalRank{3}, OriginalRank{3});
  EXPECT_NE(OriginalRank{3}, OriginalRank{4});
  std::ostringstream out;
  out << Rank{5} << ' ' << OriginalRank{7};
  EXPECT_EQ(out.str(), "5 #7");
}

TEST(Rank, Hashes) {
  std::unordered_set<OriginalRank> set{OriginalRank{1}, OriginalRank{2}, OriginalRank{1}};
  EXPECT_EQ(set.size(), 2U);
}
