// SlotLayout: the words a store or a checkpoint broadcasts its slots in,
// read back exactly, and refused when they end too soon.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "reprise/error.hpp"
#include "reprise/slot_layout.hpp"

using namespace reprise;

TEST(SlotLayout, WordsRoundTrip) {
  const std::vector<std::uint64_t> words{99, 3, 5, 7, 2, 0, 1, 1, 42};  // 99 before, 42 after
  std::size_t at = 1;
  const auto layout = SlotLayout::read_from(words, at);
  EXPECT_EQ(at, 8U) << "past the layout, at the next word";
  ASSERT_EQ(layout.size(), 3);
  EXPECT_EQ(layout.owners(), (std::vector<OriginalRank>{OriginalRank{5}, OriginalRank{7}, OriginalRank{2}}));
  EXPECT_EQ(layout.nodes(), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(layout.owner(Slot{1}), OriginalRank{7});
  EXPECT_EQ(layout.slot_of(OriginalRank{2}), Slot{2});
  EXPECT_FALSE(layout.slot_of(OriginalRank{3}).has_value());
  std::vector<std::uint64_t> again{99};
  layout.append_to(again);
  again.push_back(42);
  EXPECT_EQ(again, words);
}

TEST(SlotLayout, TruncatedWordsAreCorrupt) {
  std::size_t at = 0;
  EXPECT_THROW((void)SlotLayout::read_from(std::vector<std::uint64_t>{3, 1, 2, 0}, at), CorruptData);
  at = 0;
  EXPECT_THROW((void)SlotLayout::read_from(std::vector<std::uint64_t>{UINT64_MAX, 1}, at), CorruptData);
  at = 1;
  EXPECT_THROW((void)SlotLayout::read_from(std::vector<std::uint64_t>{0}, at), CorruptData) << "nothing left to read";
  at = 0;
  EXPECT_EQ(SlotLayout::read_from(std::vector<std::uint64_t>{0}, at).size(), 0) << "an empty layout is one word";
}
