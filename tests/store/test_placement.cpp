#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "reprise/detail/feistel.hpp"
#include "reprise/error.hpp"
#include "reprise/placement.hpp"

using namespace reprise;

TEST(FeistelPermutation, IsABijectionWithItsInverse) {
  for (std::uint64_t size : {1ULL, 2ULL, 3ULL, 5ULL, 16ULL, 17ULL, 1000ULL, 4099ULL}) {
    const detail::FeistelPermutation permutation(size, 42);
    std::vector<bool> seen(size, false);
    for (std::uint64_t x = 0; x < size; ++x) {
      const auto y = permutation.forward(x);
      ASSERT_LT(y, size);
      ASSERT_FALSE(seen[y]) << "size " << size << ": " << y << " hit twice";
      seen[y] = true;
      ASSERT_EQ(permutation.inverse(y), x);
    }
  }
}

TEST(FeistelPermutation, DependsOnTheSeed) {
  const detail::FeistelPermutation a(1000, 1);
  const detail::FeistelPermutation b(1000, 2);
  int same = 0;
  for (std::uint64_t x = 0; x < 1000; ++x) same += a.forward(x) == b.forward(x) ? 1 : 0;
  EXPECT_LT(same, 20);
}

namespace {

/// For every block, the set of slots that ranges_on() says hold it.
std::vector<std::set<Slot>> holders_by_ranges(const Placement& placement) {
  std::vector<std::set<Slot>> result(placement.config().blocks);
  for (int s = 0; s < placement.config().slots; ++s) {
    const Slot slot{s};
    BlockId previous_end{0};
    bool first = true;
    for (const auto& range : placement.ranges_on(slot)) {
      EXPECT_LT(range.begin, range.end);
      if (!first) {
        EXPECT_LT(previous_end, range.begin) << "ranges must be sorted, disjoint and merged";
      }
      first = false;
      previous_end = range.end;
      for (auto id = range.begin.value; id < range.end.value; ++id) result[id].insert(slot);
    }
  }
  return result;
}

}  // namespace

TEST(Placement, EveryBlockHasRDistinctHoldersAndRangesAgree) {
  for (int slots : {1, 2, 5, 7, 8}) {
    for (int copies = 1; copies <= std::min(slots, 4); ++copies) {
      for (std::uint64_t per_range : {0ULL, 1ULL, 8ULL, 13ULL}) {
        const Placement placement(
            {.blocks = 997, .slots = slots, .copies = copies, .blocks_per_permuted_range = per_range, .seed = 9});
        const auto by_ranges = holders_by_ranges(placement);
        for (std::uint64_t id = 0; id < 997; ++id) {
          const auto holders = placement.holders(BlockId{id});
          ASSERT_EQ(holders.size(), static_cast<std::size_t>(copies));
          const std::set<Slot> distinct(holders.begin(), holders.end());
          ASSERT_EQ(distinct.size(), holders.size()) << "two copies on one slot";
          ASSERT_EQ(distinct, by_ranges[id]) << "p=" << slots << " r=" << copies << " id=" << id;
        }
      }
    }
  }
}

TEST(Placement, CopyKOfRangeIIsOnSlotIPlusKTimesPOverR) {
  constexpr int kSlots = 8;
  constexpr std::uint64_t kPerSlot = 100;
  const Placement placement({.blocks = kSlots * kPerSlot, .slots = kSlots, .copies = 3});
  for (std::uint64_t id = 0; id < kSlots * kPerSlot; ++id) {
    const int range = static_cast<int>(id / kPerSlot);
    const auto holders = placement.holders(BlockId{id});
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(holders[static_cast<std::size_t>(k)], Slot{(range + k * (kSlots / 3)) % kSlots});
  }
}

TEST(Placement, EachSlotHoldsItsShare) {
  const Placement placement({.blocks = 100000, .slots = 6, .copies = 2, .blocks_per_permuted_range = 64, .seed = 3});
  for (int slot = 0; slot < 6; ++slot) {
    std::uint64_t held = 0;
    for (const auto& range : placement.ranges_on(Slot{slot})) held += range.size();
    EXPECT_NEAR(static_cast<double>(held), 2 * 100000 / 6.0, 2 * 64 + 2);
  }
}

TEST(Placement, PiecesCoverTheRangeWithTheRightHolders) {
  for (std::uint64_t per_range : {0ULL, 7ULL}) {
    const Placement placement({.blocks = 5000, .slots = 7, .copies = 2, .blocks_per_permuted_range = per_range});
    const BlockRange asked{BlockId{123}, BlockId{4321}};
    const auto pieces = placement.pieces(asked);
    ASSERT_FALSE(pieces.empty());
    EXPECT_EQ(pieces.front().range.begin, asked.begin);
    EXPECT_EQ(pieces.back().range.end, asked.end);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (i > 0) {
        EXPECT_EQ(pieces[i - 1].range.end, pieces[i].range.begin);
      }
      for (auto id = pieces[i].range.begin.value; id < pieces[i].range.end.value; ++id) {
        ASSERT_EQ(placement.holders(BlockId{id}), pieces[i].holders);
      }
    }
  }
}

TEST(Placement, PermutationSpreadsOneProcesssBlocksOverManyHolders) {
  constexpr int kSlots = 32;
  constexpr std::uint64_t kPerSlot = 4096;
  auto first_holders_of_slot0_data = [&](std::uint64_t per_range) {
    const Placement placement(
        {.blocks = kSlots * kPerSlot, .slots = kSlots, .copies = 2, .blocks_per_permuted_range = per_range});
    std::set<Slot> holders;
    for (const auto& piece : placement.pieces({BlockId{0}, BlockId{kPerSlot}})) holders.insert(piece.holders[0]);
    return holders.size();
  };
  EXPECT_EQ(first_holders_of_slot0_data(0), 1U);
  EXPECT_GE(first_holders_of_slot0_data(64), 24U) << "64 ranges of slot 0's data should land on most of 32 slots";
}

TEST(Placement, BadConfigurationsSayWhatToChange) {
  auto message_of = [](const PlacementConfig& config) {
    try {
      Placement placement(config);
    } catch (const UsageError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message_of({.blocks = 0, .slots = 4, .copies = 2}).find("no blocks"), std::string::npos);
  EXPECT_NE(message_of({.blocks = 10, .slots = 0, .copies = 1}).find("at least one process"), std::string::npos);
  EXPECT_NE(message_of({.blocks = 10, .slots = 4, .copies = 0}).find("below 1"), std::string::npos);
  EXPECT_NE(message_of({.blocks = 10, .slots = 4, .copies = 5}).find("lower the copies"), std::string::npos);
  const Placement placement({.blocks = 10, .slots = 4, .copies = 2});
  EXPECT_THROW((void)placement.holders(BlockId{10}), UsageError);
  EXPECT_THROW((void)placement.ranges_on(Slot{4}), UsageError);
  EXPECT_THROW((void)placement.pieces({BlockId{5}, BlockId{11}}), UsageError);
}

TEST(Placement, NodeMajorOrderPutsCopiesOnDifferentNodes) {
  // 16 processes on 4 nodes, numbered round-robin (process i on node i % 4),
  // the worst case for a layout that ignores nodes.
  std::vector<int> node_of(16);
  for (int i = 0; i < 16; ++i) node_of[static_cast<std::size_t>(i)] = i % 4;
  for (int copies : {2, 3, 4}) {
    const Placement placement({.blocks = 1600, .slots = 16, .copies = copies});
    const auto order = node_major_order(node_of);
    int same_node_naive = 0;
    for (std::uint64_t id = 0; id < 1600; id += 7) {
      std::set<int> nodes;
      std::set<int> naive_nodes;
      for (const Slot slot : placement.holders(BlockId{id})) {
        nodes.insert(node_of[static_cast<std::size_t>(order[static_cast<std::size_t>(slot.value())])]);
        naive_nodes.insert(node_of[static_cast<std::size_t>(slot.value())]);
      }
      ASSERT_EQ(nodes.size(), static_cast<std::size_t>(copies)) << "block " << id << ", r=" << copies;
      same_node_naive += naive_nodes.size() < static_cast<std::size_t>(copies) ? 1 : 0;
    }
    if (copies != 3) {  // strides 8 and 4 are multiples of 4: naively, copies share nodes
      EXPECT_GT(same_node_naive, 0) << "without the order some copies share a node (r=" << copies << ")";
    }
  }
}

TEST(Placement, UnequalNodesStillGetCopiesOnDistinctNodes) {
  // Nodes of very different sizes, some bigger than floor(p/r): the stride
  // alone would put two copies on the big node.
  const std::vector<std::vector<int>> node_sizes = {{6, 1, 1}, {5, 2, 1}, {3, 3, 1, 1}, {9, 2, 2, 1}, {4, 4}};
  for (const auto& sizes : node_sizes) {
    std::vector<int> node_of_slot;  // already node-major, as the store builds it
    for (std::size_t node = 0; node < sizes.size(); ++node)
      node_of_slot.insert(node_of_slot.end(), sizes[node], static_cast<int>(node));
    const auto slots = static_cast<int>(node_of_slot.size());
    for (int copies = 1; copies <= static_cast<int>(sizes.size()); ++copies) {
      for (std::uint64_t per_range : {0ULL, 5ULL}) {
        const Placement placement({.blocks = 499,
                                   .slots = slots,
                                   .copies = copies,
                                   .blocks_per_permuted_range = per_range,
                                   .seed = 4,
                                   .node_of_slot = node_of_slot});
        const Placement plain(
            {.blocks = 499, .slots = slots, .copies = copies, .blocks_per_permuted_range = per_range, .seed = 4});
        const auto by_ranges = holders_by_ranges(placement);
        int plain_shares_a_node = 0;
        for (std::uint64_t id = 0; id < 499; ++id) {
          const auto holders = placement.holders(BlockId{id});
          std::set<int> nodes;
          for (const Slot slot : holders) nodes.insert(node_of_slot[static_cast<std::size_t>(slot.value())]);
          ASSERT_EQ(nodes.size(), static_cast<std::size_t>(copies)) << "block " << id << " r=" << copies;
          ASSERT_EQ(std::set<Slot>(holders.begin(), holders.end()), by_ranges[id]);
          EXPECT_EQ(holders.front(), plain.holders(BlockId{id}).front()) << "copy 0 stays where it was";
          std::set<int> plain_nodes;
          for (const Slot slot : plain.holders(BlockId{id})) {
            plain_nodes.insert(node_of_slot[static_cast<std::size_t>(slot.value())]);
          }
          plain_shares_a_node += plain_nodes.size() < nodes.size() ? 1 : 0;
        }
        if (copies == 2 && sizes.front() > slots / 2) {
          EXPECT_GT(plain_shares_a_node, 0) << "the case is one the stride alone gets wrong";
        }
      }
    }
  }
}

TEST(Placement, FewerNodesThanCopiesKeepsTheStrideLayout) {
  // Two nodes, three copies: distinct nodes are impossible, distinct
  // processes still hold.
  const std::vector<int> node_of_slot = {0, 0, 0, 1, 1, 1};
  const Placement with_nodes({.blocks = 60, .slots = 6, .copies = 3, .node_of_slot = node_of_slot});
  const Placement plain({.blocks = 60, .slots = 6, .copies = 3});
  for (std::uint64_t id = 0; id < 60; ++id) EXPECT_EQ(with_nodes.holders(BlockId{id}), plain.holders(BlockId{id}));
}

TEST(Placement, ANodeListOfTheWrongLengthIsRefused) {
  try {
    const Placement placement({.blocks = 10, .slots = 4, .copies = 2, .node_of_slot = {0, 1}});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("one node per slot"), std::string::npos) << e.what();
  }
}

TEST(Placement, NodeMajorOrderKeepsProcessOrderWithinANode) {
  EXPECT_EQ(node_major_order({7, 3, 7, 3, 5}), (std::vector<int>{1, 3, 4, 0, 2}));
  EXPECT_EQ(node_major_order({0, 0, 0}), (std::vector<int>{0, 1, 2}));
}
