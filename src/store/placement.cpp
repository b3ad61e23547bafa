#include "reprise/placement.hpp"

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <string>

#include "mix.hpp"
#include "reprise/detail/feistel.hpp"
#include "reprise/error.hpp"

namespace reprise {

namespace detail {

namespace {

__extension__ using Uint128 = unsigned __int128;

constexpr int kFeistelRounds = 4;

}  // namespace

FeistelPermutation::FeistelPermutation(std::uint64_t size, std::uint64_t seed) : _size(size), _seed(seed) {
  while (_half_bits < 32 && (Uint128{1} << (2 * _half_bits)) < size) ++_half_bits;
}

std::uint64_t FeistelPermutation::round_function(int round, std::uint64_t half) const noexcept {
  const std::uint64_t mask = (std::uint64_t{1} << _half_bits) - 1;
  return mix64(_seed ^ mix64(half + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(round + 1))) & mask;
}

std::uint64_t FeistelPermutation::encrypt(std::uint64_t x) const noexcept {
  const std::uint64_t mask = (std::uint64_t{1} << _half_bits) - 1;
  std::uint64_t left = x >> _half_bits;
  std::uint64_t right = x & mask;
  for (int round = 0; round < kFeistelRounds; ++round) {
    const std::uint64_t next = left ^ round_function(round, right);
    left = right;
    right = next;
  }
  return (left << _half_bits) | right;
}

std::uint64_t FeistelPermutation::decrypt(std::uint64_t y) const noexcept {
  const std::uint64_t mask = (std::uint64_t{1} << _half_bits) - 1;
  std::uint64_t left = y >> _half_bits;
  std::uint64_t right = y & mask;
  for (int round = kFeistelRounds - 1; round >= 0; --round) {
    const std::uint64_t previous = right ^ round_function(round, left);
    right = left;
    left = previous;
  }
  return (left << _half_bits) | right;
}

// Cycle walking: the network permutes [0, 4^half_bits); applying it until the
// value falls inside [0, size) permutes [0, size), and walking back inverts it.
std::uint64_t FeistelPermutation::forward(std::uint64_t x) const noexcept {
  do {
    x = encrypt(x);
  } while (x >= _size);
  return x;
}

std::uint64_t FeistelPermutation::inverse(std::uint64_t y) const noexcept {
  do {
    y = decrypt(y);
  } while (y >= _size);
  return y;
}

}  // namespace detail

namespace {

PlacementConfig checked(const PlacementConfig& config) {
  const std::string where = "reprise::Placement: ";
  if (config.blocks == 0) throw UsageError(where + "no blocks; a store needs at least one block");
  if (config.slots < 1) throw UsageError(where + "needs at least one process, got " + std::to_string(config.slots));
  if (config.copies < 1) {
    throw UsageError(where + "copies is " + std::to_string(config.copies) +
                     ", below 1; keep at least one copy of every block");
  }
  if (config.copies > config.slots) {
    throw UsageError(where + std::to_string(config.copies) +
                     " copies need at least that many processes, but there are " + std::to_string(config.slots) +
                     "; lower the copies or run on more processes");
  }
  if (!config.node_of_slot.empty() && config.node_of_slot.size() != static_cast<std::size_t>(config.slots)) {
    throw UsageError(where + "the node list names " + std::to_string(config.node_of_slot.size()) +
                     " slots, but there are " + std::to_string(config.slots) + "; give one node per slot or none");
  }
  return config;
}

// The slots holding each slab. Copy k starts at (s + k * floor(p/r)) mod p;
// where nodes are known and at least r of them exist, a copy whose node
// already holds one of the slab's copies walks on to the next slot on an
// unused node.
std::vector<std::vector<Slot>> holders_of_slabs(const PlacementConfig& config) {
  const int p = config.slots;
  const int stride = p / config.copies;
  const auto& node = config.node_of_slot;
  const bool spread =
      !node.empty() && static_cast<int>(std::set<int>(node.begin(), node.end()).size()) >= config.copies;
  std::vector<std::vector<Slot>> holders(static_cast<std::size_t>(p));
  for (int slab = 0; slab < p; ++slab) {
    auto& slots = holders[static_cast<std::size_t>(slab)];
    std::set<int> used_nodes;
    for (int k = 0; k < config.copies; ++k) {
      int slot = (slab + k * stride) % p;
      if (spread) {
        while (used_nodes.contains(node[static_cast<std::size_t>(slot)])) slot = (slot + 1) % p;
        used_nodes.insert(node[static_cast<std::size_t>(slot)]);
      }
      slots.emplace_back(slot);
    }
  }
  return holders;
}

std::uint64_t units_for(const PlacementConfig& config) {
  const std::uint64_t per_unit = config.blocks_per_permuted_range == 0 ? 1 : config.blocks_per_permuted_range;
  return (config.blocks + per_unit - 1) / per_unit;
}

}  // namespace

Placement::Placement(const PlacementConfig& config)
    : _config(checked(config)),
      _unit_blocks(config.blocks_per_permuted_range == 0 ? 1 : config.blocks_per_permuted_range),
      _units(units_for(config)),
      _permutation(std::make_shared<const detail::FeistelPermutation>(_units, config.seed)),
      _slab_holders(holders_of_slabs(_config)),
      _slabs_on(static_cast<std::size_t>(_config.slots)) {
  for (int slab = 0; slab < _config.slots; ++slab) {
    for (const Slot slot : _slab_holders[static_cast<std::size_t>(slab)]) {
      _slabs_on[static_cast<std::size_t>(slot.value())].push_back(slab);
    }
  }
}

BlockRange Placement::blocks_of_unit(std::uint64_t unit) const noexcept {
  const std::uint64_t begin = unit * _unit_blocks;
  return {BlockId{begin}, BlockId{std::min(begin + _unit_blocks, _config.blocks)}};
}

int Placement::slab_of_position(std::uint64_t position) const noexcept {
  const auto p = static_cast<std::uint64_t>(_config.slots);
  return static_cast<int>(((detail::Uint128{position} + 1) * p - 1) / _units);
}

std::uint64_t Placement::slab_begin(int slab) const noexcept {
  return static_cast<std::uint64_t>(detail::Uint128{static_cast<std::uint64_t>(slab)} * _units /
                                    static_cast<std::uint64_t>(_config.slots));
}

const std::vector<Slot>& Placement::holders_of_unit(std::uint64_t unit) const {
  const std::uint64_t position = _config.blocks_per_permuted_range == 0 ? unit : _permutation->forward(unit);
  return _slab_holders[static_cast<std::size_t>(slab_of_position(position))];
}

std::vector<Slot> Placement::holders(BlockId id) const {
  if (id.value >= _config.blocks) {
    throw UsageError("reprise::Placement: block id " + std::to_string(id.value) + " is out of range; the store has " +
                     std::to_string(_config.blocks) + " blocks");
  }
  return holders_of_unit(id.value / _unit_blocks);
}

std::vector<BlockRange> Placement::ranges_on(Slot slot) const {
  if (slot.value() < 0 || slot.value() >= _config.slots) {
    throw UsageError("reprise::Placement: slot " + std::to_string(slot.value()) + " is out of range; there are " +
                     std::to_string(_config.slots) + " slots");
  }
  std::vector<BlockRange> ranges;
  for (int slab : _slabs_on[static_cast<std::size_t>(slot.value())]) {
    const std::uint64_t begin = slab_begin(slab);
    const std::uint64_t end = slab_begin(slab + 1);
    if (_config.blocks_per_permuted_range == 0) {
      if (begin < end) ranges.push_back({BlockId{begin}, BlockId{end}});
      continue;
    }
    for (std::uint64_t position = begin; position < end; ++position) {
      ranges.push_back(blocks_of_unit(_permutation->inverse(position)));
    }
  }
  std::sort(ranges.begin(), ranges.end(), [](BlockRange a, BlockRange b) { return a.begin < b.begin; });
  std::vector<BlockRange> merged;
  for (const auto& range : ranges) {
    if (!merged.empty() && merged.back().end == range.begin) {
      merged.back().end = range.end;
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

std::vector<Placement::Piece> Placement::pieces(BlockRange range) const {
  if (range.end < range.begin || range.end.value > _config.blocks) {
    throw UsageError("reprise::Placement: block range [" + std::to_string(range.begin.value) + ", " +
                     std::to_string(range.end.value) + ") is not inside [0, " + std::to_string(_config.blocks) + ")");
  }
  std::vector<Piece> result;
  std::uint64_t id = range.begin.value;
  while (id < range.end.value) {
    const std::uint64_t unit = id / _unit_blocks;
    // Without permutation, a whole slab shares its holders; with it, a unit.
    std::uint64_t end = 0;
    if (_config.blocks_per_permuted_range == 0) {
      end = slab_begin(slab_of_position(unit) + 1);
    } else {
      end = blocks_of_unit(unit).end.value;
    }
    end = std::min(end, range.end.value);
    const auto& slots = holders_of_unit(unit);
    if (!result.empty() && result.back().holders == slots && result.back().range.end.value == id) {
      result.back().range.end = BlockId{end};
    } else {
      result.push_back({{BlockId{id}, BlockId{end}}, slots});
    }
    id = end;
  }
  return result;
}

std::vector<int> node_major_order(const std::vector<int>& node_of_process) {
  std::vector<int> order(node_of_process.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node_of_process[static_cast<std::size_t>(a)] < node_of_process[static_cast<std::size_t>(b)];
  });
  return order;
}

SlotOrder slot_order(const std::vector<int>& node_of_process) {
  SlotOrder order{node_major_order(node_of_process), {}};
  for (int process : order.process) order.node.push_back(node_of_process[static_cast<std::size_t>(process)]);
  return order;
}

}  // namespace reprise
