#pragma once
/// \file
/// `SlotLayout`: who took each slot of a layout and on which node, fixed
/// when the layout is made, by original rank so that it outlives the
/// communicator. The store and the checkpoint keep their layouts in it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/placement.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// The slots of a layout: slot s is the s-th member of the communicator in
/// node-major order (`slot_order`) when the layout was made; each keeps the
/// original rank of that member and its node.
class SlotLayout {
 public:
  SlotLayout() = default;
  /// The slots of `comm`'s members in the order `order` gives them.
  SlotLayout(const Comm& comm, const SlotOrder& order);

  /// Number of slots (0 for an empty layout).
  [[nodiscard]] int size() const noexcept { return static_cast<int>(_owners.size()); }
  /// The original rank that took `slot`.
  [[nodiscard]] OriginalRank owner(Slot slot) const { return _owners.at(static_cast<std::size_t>(slot.value())); }
  /// The original rank of each slot.
  [[nodiscard]] const std::vector<OriginalRank>& owners() const noexcept { return _owners; }
  /// The node key of each slot (for `PlacementConfig::node_of_slot`).
  [[nodiscard]] const std::vector<int>& nodes() const noexcept { return _nodes; }
  /// The slot `owner` took, if any.
  [[nodiscard]] std::optional<Slot> slot_of(OriginalRank owner) const;
  /// The owners of `holders` (copy 0 first) that `is_live` accepts: who
  /// still has a copy. The store and the checkpoint judge liveness
  /// differently (failures since a baseline; holding this version's copies).
  [[nodiscard]] std::vector<OriginalRank> live_holders(std::span<const Slot> holders,
                                                       const std::function<bool(OriginalRank)>& is_live) const;

  /// Appends the layout as 64-bit words, to broadcast it.
  void append_to(std::vector<std::uint64_t>& words) const;
  /// Reads a layout that `append_to` wrote at `words[at]`, and moves `at`
  /// past it. `CorruptData` if the words end first.
  [[nodiscard]] static SlotLayout read_from(std::span<const std::uint64_t> words, std::size_t& at);

 private:
  std::vector<OriginalRank> _owners;
  std::vector<int> _nodes;
};

}  // namespace reprise
