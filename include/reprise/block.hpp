#pragma once
/// \file
/// Block identifiers and ranges of them: the unit of data the store keeps.

#include <compare>
#include <cstdint>
#include <ostream>

namespace reprise {

/// Global identifier of one block.
struct BlockId {
  std::uint64_t value = 0;  ///< the id
  /// Ids compare as numbers.
  friend constexpr auto operator<=>(BlockId, BlockId) = default;
};

/// The block ids [begin, end).
struct BlockRange {
  BlockId begin;  ///< the first id
  BlockId end;    ///< one past the last id
  /// Number of blocks in the range.
  [[nodiscard]] constexpr std::uint64_t size() const noexcept { return end.value - begin.value; }
  /// The same ids.
  friend constexpr bool operator==(BlockRange, BlockRange) = default;
  /// Printed as `[begin, end)`.
  friend std::ostream& operator<<(std::ostream& out, BlockRange range) {
    return out << '[' << range.begin.value << ", " << range.end.value << ')';
  }
};

}  // namespace reprise
