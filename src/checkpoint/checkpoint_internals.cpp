#include "reprise/detail/checkpoint_internals.hpp"

#include <algorithm>
#include <optional>
#include <utility>

#include "huge_pages.hpp"
#include "log.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/placement.hpp"
#include "words.hpp"

namespace reprise {

namespace {

constexpr const char* kWhere = "reprise::Checkpoint";

}  // namespace

std::vector<Registration> detail::CheckpointInternals::registrations(const Checkpoint& checkpoint) {
  std::vector<Registration> result;
  result.reserve(checkpoint._items.size());
  for (const auto& item : checkpoint._items) result.push_back({item.name, item.shape, item.fixed_bytes, item.blocks});
  return result;
}

std::span<const std::byte> detail::CheckpointInternals::committed_state(const Checkpoint& checkpoint) {
  checkpoint.settle_copies();
  const auto it = checkpoint._held.find(checkpoint._comm.original_rank());
  if (it == checkpoint._held.end() || !checkpoint.has_commit()) return {};
  return it->second;
}

std::vector<std::byte> detail::CheckpointInternals::capture(const Checkpoint& checkpoint) {
  std::vector<std::byte> state;
  checkpoint.serialize(state);
  return state;
}

void detail::CheckpointInternals::visit_current(const Checkpoint& checkpoint,
                                                const std::function<void(const CurrentPiece&)>& visit) {
  std::vector<std::byte> scratch;
  for (std::size_t i = 0; i < checkpoint._items.size(); ++i) {
    if (checkpoint._items[i].view) {
      visit({i, checkpoint._items[i].view(), true});
    } else {
      scratch.clear();
      checkpoint._items[i].save(scratch);
      visit({i, scratch, false});
    }
  }
}

void detail::CheckpointInternals::load_split(Checkpoint& checkpoint,
                                             std::span<const std::span<const std::byte>> pieces) try {
  const std::string where = std::string(kWhere) + "::load_split";
  const auto& items = checkpoint._items;
  if (pieces.size() != items.size()) {
    throw UsageError(where + ": " + std::to_string(pieces.size()) + " pieces for " + std::to_string(items.size()) +
                     " registrations; give one piece per registration, in order");
  }
  for (std::size_t i = 0; i < items.size(); ++i) checkpoint.check_piece(items[i], pieces[i].size(), where);
  for (std::size_t i = 0; i < items.size(); ++i) items[i].load(pieces[i]);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::load_split");
}

void detail::prefer_huge_pages_of(void* data, std::size_t bytes) noexcept { prefer_huge_pages(data, bytes); }

void detail::CheckpointInternals::load_in_place(
    Checkpoint& checkpoint, std::span<const std::size_t> sizes,
    const std::function<void(std::size_t, std::span<std::byte>)>& fill) try {
  const auto places = place_pieces(checkpoint, sizes);
  std::vector<std::byte> scratch;
  for (std::size_t i = 0; i < checkpoint._items.size(); ++i) {
    if (checkpoint._items[i].place) {
      fill(i, places[i]);
    } else {
      scratch.resize(sizes[i]);
      fill(i, scratch);
      checkpoint._items[i].load(scratch);
    }
  }
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::load_in_place");
}

std::vector<std::span<std::byte>> detail::CheckpointInternals::place_pieces(Checkpoint& checkpoint,
                                                                            std::span<const std::size_t> sizes) try {
  const std::string where = std::string(kWhere) + "::place_pieces";
  const auto& items = checkpoint._items;
  if (sizes.size() != items.size()) {
    throw UsageError(where + ": " + std::to_string(sizes.size()) + " pieces for " + std::to_string(items.size()) +
                     " registrations; give one piece per registration, in order");
  }
  for (std::size_t i = 0; i < items.size(); ++i) checkpoint.check_piece(items[i], sizes[i], where);
  std::vector<std::span<std::byte>> places(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].place) places[i] = items[i].place(sizes[i]);
  }
  return places;
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::place_pieces");
}

std::vector<std::span<const std::byte>> detail::CheckpointInternals::split_state(const Checkpoint& checkpoint,
                                                                                 std::span<const std::byte> state) {
  return checkpoint.split(state, "split_state");
}

std::vector<std::byte> detail::CheckpointInternals::join_state(const Checkpoint& checkpoint,
                                                               std::span<const std::span<const std::byte>> pieces) {
  const auto& items = checkpoint._items;
  if (pieces.size() != items.size()) {
    throw UsageError(std::string(kWhere) + "::join_state: " + std::to_string(pieces.size()) + " pieces for " +
                     std::to_string(items.size()) + " registrations; give one piece per registration, in order");
  }
  std::size_t total = sizeof(std::uint64_t);
  for (const auto piece : pieces) total += 2 * sizeof(std::uint64_t) + piece.size();
  std::vector<std::byte> state;
  state.reserve(total);
  detail::append_word(state, items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    detail::append_word(state, std::hash<std::string>{}(items[i].name));
    detail::append_word(state, pieces[i].size());
    state.insert(state.end(), pieces[i].begin(), pieces[i].end());
  }
  return state;
}

void detail::CheckpointInternals::load_state(Checkpoint& checkpoint, std::span<const std::byte> state) try {
  checkpoint.apply(state, "load_state");
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::load_state");
}

CommitHook detail::CheckpointInternals::on_commit(Checkpoint& checkpoint,
                                                  std::function<void(std::uint64_t version)> callback) {
  const CommitHook hook{checkpoint._next_hook++};
  checkpoint._hooks.emplace_back(hook.id, std::move(callback));
  return hook;
}

void detail::CheckpointInternals::remove_commit_hook(Checkpoint& checkpoint, CommitHook hook) noexcept {
  std::erase_if(checkpoint._hooks, [&](const auto& entry) { return entry.first == hook.id; });
}

void detail::CheckpointInternals::continue_from(Checkpoint& checkpoint, std::uint64_t version) {
  if (checkpoint.has_commit()) {
    throw UsageError(std::string(kWhere) + "::continue_from: this checkpoint has committed version " +
                     std::to_string(checkpoint._version) +
                     " already; continue a saved version only before the first checkpoint()");
  }
  checkpoint._version = version;
}

detail::CheckpointInternals::CopiesOnMove detail::CheckpointInternals::copies_on_move(
    Checkpoint& checkpoint, std::span<const OriginalRank> leaving) {
  checkpoint.settle_copies();
  // 0: no committed version; 1: committed, copies missing; 2: holds them.
  const auto kept = checkpoint._comm.allgather(checkpoint.has_commit() ? (checkpoint._holds_copies ? 2 : 1) : 0);
  if (std::find(kept.begin(), kept.end(), 0) != kept.end()) return CopiesOnMove::kRetaken;
  std::vector<int> holds_of(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) holds_of[i] = kept[i] == 2 ? 1 : 0;
  // Whether every committed state has a copy on a process that `holding` marks.
  const auto every_state_held = [&checkpoint](const std::vector<int>& holding) {
    const auto holders = checkpoint.live_holders(holding);
    return std::all_of(holders.begin(), holders.end(), [](const auto& holder) { return holder.has_value(); });
  };
  bool leaving_hold_theirs = true;
  for (const auto owner : leaving) {
    if (const auto rank = checkpoint._comm.rank_of(owner)) {
      leaving_hold_theirs = leaving_hold_theirs && holds_of[static_cast<std::size_t>(rank->value())] != 0;
    }
  }
  return leaving_hold_theirs && every_state_held(holds_of) ? CopiesOnMove::kCarried : CopiesOnMove::kRetaken;
}

std::vector<detail::CheckpointInternals::HeldCopy> detail::CheckpointInternals::held_copies(
    const Checkpoint& checkpoint) {
  checkpoint.settle_copies();
  std::vector<HeldCopy> copies;
  if (!checkpoint._holds_copies) return copies;
  for (const auto& [owner, state] : checkpoint._held) copies.push_back({owner, state});
  return copies;
}

std::vector<std::uint64_t> detail::CheckpointInternals::committed_layout(const Checkpoint& checkpoint) {
  std::vector<std::uint64_t> words;
  if (!checkpoint.has_commit()) return words;
  words.push_back(checkpoint._version);
  checkpoint._slots.append_to(words);
  return words;
}

void detail::CheckpointInternals::continue_commit(Checkpoint& checkpoint, std::span<const std::uint64_t> layout,
                                                  std::map<OriginalRank, std::vector<std::byte>> copies) {
  std::vector<OriginalRank> owners;
  for (const auto& [owner, state] : copies) owners.push_back(owner);
  checkpoint.adopt_layout(layout, std::move(owners));
  checkpoint._holds_copies = !copies.empty();
  checkpoint._held = std::move(copies);
}

void detail::CheckpointInternals::continue_commit(Checkpoint& checkpoint, std::span<const std::uint64_t> layout,
                                                  std::vector<OriginalRank> owners, ArrivingCopies arriving) {
  // Refused, the copies must still land before their memory goes.
  struct LandFirst {
    ArrivingCopies& arriving;
    ~LandFirst() {
      if (!arriving) return;
      try {
        (void)arriving();
      } catch (...) {  // they are dropped either way
      }
    }
  } land_first{arriving};
  std::sort(owners.begin(), owners.end());
  checkpoint.adopt_layout(layout, owners);
  checkpoint._held.clear();
  checkpoint._holds_copies = !owners.empty() && arriving;
  if (checkpoint._holds_copies) {
    checkpoint._arriving_owners = std::move(owners);
    checkpoint._copies_arriving = std::exchange(arriving, nullptr);
  }
}

// The version and layout a process taking over from another continues, with
// the copies of `owners` (sorted): exactly those its slot holds there.
void Checkpoint::adopt_layout(std::span<const std::uint64_t> layout, std::vector<OriginalRank> owners) {
  if (has_commit()) {
    throw UsageError(std::string(kWhere) + "::continue_commit: this checkpoint has committed version " +
                     std::to_string(_version) +
                     " already; continue another process's version only before the "
                     "first checkpoint()");
  }
  std::size_t at = 1;
  auto slots = layout.empty() ? SlotLayout{} : SlotLayout::read_from(layout, at);
  if (slots.size() == 0 || at != layout.size()) {
    throw CorruptData(std::string(kWhere) + "::continue_commit: the layout of " + std::to_string(layout.size()) +
                      " words is malformed; pass what committed_layout() returned in a process with a commit");
  }
  if (!owners.empty()) {
    // The copies must be exactly those this process's slot holds.
    const auto names = [](const auto& ranks) {
      std::string text;
      for (const auto rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank.value());
      return text;
    };
    std::vector<OriginalRank> expected;
    if (const auto mine = slots.slot_of(_comm.original_rank())) {
      const int p = slots.size();
      const Placement placement({.blocks = static_cast<std::uint64_t>(p),
                                 .slots = p,
                                 .copies = std::min(_config.copies, p),
                                 .node_of_slot = slots.nodes()});
      for (int slot = 0; slot < p; ++slot) {
        const auto holders = placement.holders(BlockId{static_cast<std::uint64_t>(slot)});
        if (std::find(holders.begin(), holders.end(), *mine) != holders.end())
          expected.push_back(slots.owner(Slot{slot}));
      }
      std::sort(expected.begin(), expected.end());
    }
    if (owners != expected) {
      throw CorruptData(std::string(kWhere) + "::continue_commit: the copies handed over belong to original rank(s) " +
                        names(owners) + ", but original rank " + std::to_string(_comm.original_rank().value()) +
                        " holds those of " + (expected.empty() ? std::string("none") : names(expected)) +
                        " in version " + std::to_string(layout[0]) +
                        "; every process must use the same CheckpointConfig::copies");
    }
  }
  _version = layout[0];
  _slots = std::move(slots);
}

void Checkpoint::settle_copies() const noexcept {
  if (!_copies_arriving) return;
  const auto arriving = std::exchange(_copies_arriving, {});
  const auto owners = std::exchange(_arriving_owners, {});
  std::optional<std::map<OriginalRank, std::vector<std::byte>>> copies;
  try {
    copies = arriving();
  } catch (...) {
    copies.reset();
  }
  const auto theirs = [&owners](const auto& landed) {
    return landed.size() == owners.size() &&
           std::equal(landed.begin(), landed.end(), owners.begin(),
                      [](const auto& copy, OriginalRank owner) { return copy.first == owner; });
  };
  if (copies && theirs(*copies)) {
    _held = std::move(*copies);
    return;
  }
  logging::warning(
      "original rank %d: the checkpoint copies its predecessor carried did not all arrive intact (it failed while "
      "they travelled); this process holds none of version %llu, whose states keep their other copies, until the "
      "next checkpoint",
      _comm.original_rank().value(), static_cast<unsigned long long>(_version));
  _held.clear();
  _holds_copies = false;
}

}  // namespace reprise
