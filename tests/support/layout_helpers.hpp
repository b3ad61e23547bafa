#pragma once
// Helpers for tests that compute, independently of the store, which blocks
// a set of dead slots takes with it.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/placement.hpp"

namespace reprise::test {

/// True if every copy of block `id` in `placement` sat on one of the slots
/// `dead` (slot numbers).
inline bool only_on(const Placement& placement, std::uint64_t id, const std::vector<int>& dead) {
  const auto holders = placement.holders(BlockId{id});
  return std::all_of(holders.begin(), holders.end(),
                     [&](Slot slot) { return std::find(dead.begin(), dead.end(), slot.value()) != dead.end(); });
}

/// Appends block `id` to `ranges`, extending the last range if it ends there.
inline void append_block(std::vector<BlockRange>& ranges, std::uint64_t id) {
  if (!ranges.empty() && ranges.back().end.value == id) {
    ranges.back().end = BlockId{id + 1};
  } else {
    ranges.push_back({BlockId{id}, BlockId{id + 1}});
  }
}

}  // namespace reprise::test
