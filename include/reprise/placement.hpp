#pragma once
/// \file
/// Where the copies of each block live: the replicated block store's layout.
/// Copy k of id range i lives on slot (i + k * floor(p/r)) mod p, where slot s
/// is the s-th process at submit time (the store maps slots to original
/// ranks). With permutation ranges, the block ids are cut into ranges that a
/// seeded pseudorandom permutation scatters over the slots, so one process's
/// blocks end up on many holders and reloading them has many senders. When
/// the node of each slot is known, copies that would share a node move on to
/// the next slot on a node not yet used, so they sit on r different nodes
/// whenever there are r nodes.

#include <cstdint>
#include <memory>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/rank.hpp"

namespace reprise {

namespace detail {
struct SlotTag {
  static constexpr const char* kPrefix = "slot ";
};
}  // namespace detail

/// A place in a layout: slot s is the s-th process in node-major order when
/// the layout was made (`slot_order`). Not a rank: ranks change with the
/// communicator, a layout's slots do not.
using Slot = detail::StrongRank<detail::SlotTag>;

namespace detail {
class FeistelPermutation;  // reprise/detail/feistel.hpp, inside the build
}  // namespace detail

/// How a store lays out its blocks.
struct PlacementConfig {
  std::uint64_t blocks = 0;                     ///< total number of blocks (ids 0 .. blocks-1)
  int slots = 0;                                ///< processes at submit time (p)
  int copies = 1;                               ///< copies of every block (r), 1 <= r <= p
  std::uint64_t blocks_per_permuted_range = 0;  ///< 0: no permutation
  std::uint64_t seed = 0;                       ///< seed of the permutation
  /// Node of each slot (any key per node), or empty if unknown. With at least
  /// r distinct nodes, the copies of every block go to r different nodes.
  std::vector<int> node_of_slot = {};
};

/// The layout: which slots hold each block, and which blocks each slot holds.
/// Identical on every process built from the same configuration.
class Placement {
 public:
  /// Validates `config`; `UsageError` saying what to change if it is not
  /// usable (no blocks, r = 0, r > p, a node list of the wrong length, ...).
  explicit Placement(const PlacementConfig& config);

  /// The configuration this layout was built from.
  [[nodiscard]] const PlacementConfig& config() const noexcept { return _config; }

  /// The slots holding `id`, copy 0 first; never two equal. `UsageError` if
  /// `id` is out of range.
  [[nodiscard]] std::vector<Slot> holders(BlockId id) const;

  /// Every block copy slot `slot` holds, as sorted, non-overlapping ranges.
  [[nodiscard]] std::vector<BlockRange> ranges_on(Slot slot) const;

  /// A run of consecutive ids whose copies all live on the same slots.
  struct Piece {
    BlockRange range;           ///< the ids
    std::vector<Slot> holders;  ///< copy 0 first
  };

  /// `range` cut into pieces, in id order: the units in which a store moves
  /// data. `UsageError` if `range` reaches past the last block.
  [[nodiscard]] std::vector<Piece> pieces(BlockRange range) const;

 private:
  // The id space is cut into units (the permuted ranges, or single blocks
  // without permutation); unit j sits at position permutation(j), and the
  // positions are cut into `slots` nearly equal slabs, slab s on slot s.
  [[nodiscard]] BlockRange blocks_of_unit(std::uint64_t unit) const noexcept;
  [[nodiscard]] int slab_of_position(std::uint64_t position) const noexcept;
  [[nodiscard]] std::uint64_t slab_begin(int slab) const noexcept;
  [[nodiscard]] const std::vector<Slot>& holders_of_unit(std::uint64_t unit) const;

  PlacementConfig _config;
  std::uint64_t _unit_blocks = 1;
  std::uint64_t _units = 0;
  std::shared_ptr<const detail::FeistelPermutation> _permutation;  // immutable, shared by copies
  std::vector<std::vector<Slot>> _slab_holders;                    // the slots holding slab s, copy 0 (slot s) first
  std::vector<std::vector<int>> _slabs_on;                         // the slabs slot s holds a copy of
};

/// The order in which processes take the slots of a layout: grouped by node
/// (`node_of_process[i]` is any key naming process i's node), in process
/// order within a node. Copies of a range are floor(p/r) slots apart, so in
/// this order they land on r different nodes with every process holding the
/// same amount whenever no node has more than floor(p/r) processes (which
/// balanced holding needs anyway); with bigger nodes the layout moves copies
/// off them and the small nodes hold more. Returns the process at each slot.
[[nodiscard]] std::vector<int> node_major_order(const std::vector<int>& node_of_process);

/// The slots of a layout in node-major order (`node_major_order`): the
/// process at each slot, and the node of each slot, ready for
/// `PlacementConfig::node_of_slot`.
struct SlotOrder {
  std::vector<int> process;  ///< per slot, the process there (a rank)
  std::vector<int> node;     ///< per slot, its node
};

/// `node_major_order` of `node_of_process`, with the node of each slot.
[[nodiscard]] SlotOrder slot_order(const std::vector<int>& node_of_process);

}  // namespace reprise
