#include "reprise/slot_layout.hpp"

#include <algorithm>

#include "reprise/error.hpp"

namespace reprise {

SlotLayout::SlotLayout(const Comm& comm, const SlotOrder& order) : _nodes(order.node) {
  for (const int process : order.process) _owners.push_back(comm.original_rank(Rank{process}));
}

std::optional<Slot> SlotLayout::slot_of(OriginalRank owner) const {
  const auto it = std::find(_owners.begin(), _owners.end(), owner);
  if (it == _owners.end()) return std::nullopt;
  return Slot{static_cast<int>(it - _owners.begin())};
}

std::vector<OriginalRank> SlotLayout::live_holders(std::span<const Slot> holders,
                                                   const std::function<bool(OriginalRank)>& is_live) const {
  std::vector<OriginalRank> live;
  for (const Slot slot : holders) {
    if (is_live(owner(slot))) live.push_back(owner(slot));
  }
  return live;
}

void SlotLayout::append_to(std::vector<std::uint64_t>& words) const {
  words.push_back(_owners.size());
  for (const auto owner : _owners) words.push_back(static_cast<std::uint64_t>(owner.value()));
  for (const int node : _nodes) words.push_back(static_cast<std::uint64_t>(node));
}

SlotLayout SlotLayout::read_from(std::span<const std::uint64_t> words, std::size_t& at) {
  if (at >= words.size() || words[at] > (words.size() - at - 1) / 2) {
    throw CorruptData("reprise: a broadcast slot layout is truncated");
  }
  const auto slots = static_cast<std::size_t>(words[at++]);
  SlotLayout layout;
  for (std::size_t s = 0; s < slots; ++s) layout._owners.emplace_back(static_cast<int>(words[at++]));
  for (std::size_t s = 0; s < slots; ++s) layout._nodes.push_back(static_cast<int>(words[at++]));
  return layout;
}

}  // namespace reprise
