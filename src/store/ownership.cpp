#include "reprise/ownership.hpp"

#include <algorithm>

namespace reprise {

Ownership::Ownership(const Comm& comm, const std::function<BlockRange(OriginalRank)>& range_of) {
  for (auto member : comm.members()) _entries.push_back({range_of(member), member});
}

std::vector<BlockRange> Ownership::adopt_departed(const Comm& comm) {
  std::vector<BlockRange> departed;
  std::erase_if(_entries, [&](const Entry& entry) {
    if (comm.rank_of(entry.owner)) return false;
    departed.push_back(entry.range);
    return true;
  });
  std::vector<BlockRange> mine;
  const auto n = static_cast<std::uint64_t>(comm.size());
  for (const auto& range : departed) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const BlockRange piece{BlockId{range.begin.value + range.size() * i / n},
                             BlockId{range.begin.value + range.size() * (i + 1) / n}};
      if (piece.size() == 0) continue;
      const auto owner = comm.original_rank(Rank{static_cast<int>(i)});
      _entries.push_back({piece, owner});
      if (owner == comm.original_rank()) mine.push_back(piece);
    }
  }
  return mine;
}

std::vector<BlockRange> Ownership::owned_by(OriginalRank owner) const {
  std::vector<BlockRange> ranges;
  for (const auto& entry : _entries) {
    if (entry.owner == owner) ranges.push_back(entry.range);
  }
  return ranges;
}

}  // namespace reprise
