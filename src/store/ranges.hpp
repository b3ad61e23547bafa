#pragma once
// Lists of block ranges as the store reports them: sorted, merged.

#include <algorithm>
#include <vector>

#include "reprise/block.hpp"

namespace reprise::detail {

/// Sorts `ranges` and merges the ones that overlap or touch.
inline void normalize(std::vector<BlockRange>& ranges) {
  std::sort(ranges.begin(), ranges.end(), [](BlockRange a, BlockRange b) { return a.begin < b.begin; });
  std::vector<BlockRange> merged;
  for (const auto& range : ranges) {
    if (!merged.empty() && merged.back().end >= range.begin) {
      merged.back().end = std::max(merged.back().end, range.end);
    } else {
      merged.push_back(range);
    }
  }
  ranges = std::move(merged);
}

}  // namespace reprise::detail
