#pragma once
/// \file
/// Strong rank types: a process's position in today's communicator (`Rank`)
/// and its identity since the job started (`OriginalRank`) must never mix.

#include <compare>
#include <cstddef>
#include <functional>
#include <ostream>

namespace reprise {

namespace detail {

/// An `int` that only compares with, and converts explicitly to, its own kind.
template <class Tag>
class StrongRank {
 public:
  constexpr StrongRank() = default;
  constexpr explicit StrongRank(int value) noexcept : _value(value) {}

  /// The plain integer, for MPI calls and printing.
  [[nodiscard]] constexpr int value() const noexcept { return _value; }

  friend constexpr auto operator<=>(StrongRank, StrongRank) = default;

  friend std::ostream& operator<<(std::ostream& out, StrongRank rank) { return out << Tag::kPrefix << rank._value; }

 private:
  int _value = 0;
};

struct RankTag {
  static constexpr const char* kPrefix = "";
};
struct OriginalRankTag {
  static constexpr const char* kPrefix = "#";
};

}  // namespace detail

/// Position of a process in the current communicator; changes after a shrink.
using Rank = detail::StrongRank<detail::RankTag>;

/// Identity of a process since the job started (its rank in the first
/// communicator). Fixed forever; a replacement takes the original rank of the
/// process it replaces. Printed with a leading `#`.
using OriginalRank = detail::StrongRank<detail::OriginalRankTag>;

}  // namespace reprise

/// \cond
template <class Tag>
struct std::hash<reprise::detail::StrongRank<Tag>> {
  std::size_t operator()(reprise::detail::StrongRank<Tag> rank) const noexcept {
    return std::hash<int>{}(rank.value());
  }
};
/// \endcond
