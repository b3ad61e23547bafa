#pragma once
/// \file
/// `Ownership`: which process works on which block ranges, the same table on
/// every process, and the even split of a departed process's ranges over the
/// members left after a shrink (what it owned, adopted ranges included).

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/comm.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Who owns (computes on) which block ranges. Every process keeps the same
/// table by making the same calls; nothing is communicated.
class Ownership {
 public:
  /// One entry of the table.
  struct Entry {
    BlockRange range;    ///< the ids
    OriginalRank owner;  ///< who computes on them
  };

  /// Each member of `comm` owns `range_of(member)`.
  Ownership(const Comm& comm, const std::function<BlockRange(OriginalRank)>& range_of);

  /// After a shrink: every range owned by a process that is not a member of
  /// `comm` any more is cut into `comm.size()` nearly equal pieces, piece i
  /// going to the member of rank i. Returns the pieces this process got, in
  /// table order (load them with `Store::load`); empty if no owner left.
  std::vector<BlockRange> adopt_departed(const Comm& comm);

  /// The ranges `owner` owns, in table order.
  [[nodiscard]] std::vector<BlockRange> owned_by(OriginalRank owner) const;

  /// Every range and its owner.
  [[nodiscard]] const std::vector<Entry>& entries() const noexcept { return _entries; }

  /// Replaces the table by `entries` (another process's copy): for a process
  /// that joins the others later, such as one started by a migration, which
  /// restores the table from its predecessor's state.
  void assign(std::vector<Entry> entries) { _entries = std::move(entries); }

 private:
  std::vector<Entry> _entries;
};

}  // namespace reprise
