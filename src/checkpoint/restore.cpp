#include "reprise/checkpoint.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>

#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"
#include "reprise/placement.hpp"

namespace reprise {

namespace {

constexpr const char* kWhere = "reprise::Checkpoint";

}  // namespace

// The lowest rank with a committed version tells the others (replacements
// have none) the version and who held what.
bool Checkpoint::share_layout() {
  const int root = _comm.allreduce(has_commit() ? _comm.rank().value() : INT_MAX, MPI_MIN);
  if (root == INT_MAX) return false;
  std::vector<std::uint64_t> layout;
  if (_comm.rank().value() == root) {
    layout = {_version};
    _slots.append_to(layout);
  }
  _comm.bcast(layout, Rank{root});
  if (_version != layout[0]) {  // a replacement, or a process that missed the last commit
    _held.clear();
    _holds_copies = false;
  }
  _version = layout[0];
  std::size_t at = 1;
  _slots = SlotLayout::read_from(layout, at);
  return true;
}

std::vector<int> Checkpoint::share_holders(const char* operation) {
  bool shared = false;
  std::vector<int> holds_of;
  // A failure can complete these collectives on some processes and fail
  // them on others; what follows agrees, so their outcome must be the same
  // everywhere first.
  _comm.run_uniformly(
      [&] {
        shared = share_layout();
        if (shared) holds_of = who_holds_copies();
      },
      std::string(kWhere) + "::" + operation + ": sharing the layout of the last checkpoint");
  if (!shared) {
    throw UsageError(std::string(kWhere) + "::" + operation + ": there is no checkpoint yet; call checkpoint() first");
  }
  return holds_of;
}

std::vector<int> Checkpoint::who_holds_copies() { return _comm.allgather(_holds_copies ? 1 : 0); }

// For each slot of the committed layout, the first process along its copies
// that is a member and took part in the last commit; the same answer
// everywhere.
Placement Checkpoint::slot_placement() const {
  const int p = _slots.size();
  return Placement({.blocks = static_cast<std::uint64_t>(p),
                    .slots = p,
                    .copies = std::min(_config.copies, p),
                    .node_of_slot = _slots.nodes()});
}

std::vector<std::optional<Rank>> Checkpoint::live_holders(const std::vector<int>& holds_of) const {
  const int p = _slots.size();
  const Placement placement = slot_placement();
  // A holder is live if it is a member that holds this version's copies.
  const auto holds_copies = [&](OriginalRank owner) {
    const auto rank = _comm.rank_of(owner);
    return rank && holds_of[static_cast<std::size_t>(rank->value())] != 0;
  };
  std::vector<std::optional<Rank>> result(static_cast<std::size_t>(p));
  for (int slot = 0; slot < p; ++slot) {
    const auto live = _slots.live_holders(placement.holders(BlockId{static_cast<std::uint64_t>(slot)}), holds_copies);
    if (!live.empty()) result[static_cast<std::size_t>(slot)] = _comm.rank_of(live.front());
  }
  return result;
}

std::vector<OriginalRank> Checkpoint::departed() const {
  std::vector<OriginalRank> gone;
  for (auto owner : _slots.owners()) {
    if (!_comm.rank_of(owner)) gone.push_back(owner);
  }
  return gone;
}

namespace {

/// `DataLost` naming `owners` (as one-block ranges) whose copies are all gone.
[[noreturn]] void throw_lost(const std::vector<OriginalRank>& owners, const char* operation, std::uint64_t version) {
  std::vector<BlockRange> lost;
  std::string names;
  for (auto owner : owners) {
    const auto id = static_cast<std::uint64_t>(owner.value());
    lost.push_back({BlockId{id}, BlockId{id + 1}});
    names += (names.empty() ? "" : ", ") + std::to_string(owner.value());
  }
  throw DataLost(std::string(kWhere) + "::" + operation + ": the state of original rank(s) " + names +
                     " is lost: the process and all its buddies failed since version " + std::to_string(version),
                 lost, owners);
}

}  // namespace

void Checkpoint::restore() { restore_as(RestoreScope::kEveryone); }

void Checkpoint::restore_as(RestoreScope scope) try {
  const bool takes_back = scope != RestoreScope::kReplacements || !_holds_copies;
  settle_copies();
  inject::fault_point("checkpoint.restore", _comm.original_rank());
  const auto holds_of = share_holders("restore");
  const auto holders = live_holders(holds_of);
  // Every saved state must still have a live copy: the members' to restore
  // them, the departed ones' to fetch them.
  std::vector<std::pair<Rank, std::size_t>> needs;  // a process to serve, and the slot of its state
  std::vector<OriginalRank> lost;
  for (std::size_t slot = 0; slot < _slots.owners().size(); ++slot) {
    const OriginalRank owner = _slots.owners()[slot];
    if (!holders[slot]) {
      lost.push_back(owner);
      continue;
    }
    const auto needy = _comm.rank_of(owner);
    if (needy && holds_of[static_cast<std::size_t>(needy->value())] == 0) needs.emplace_back(*needy, slot);
  }
  if (!lost.empty()) {
    // Every process found the same states lost. Raising at once would
    // revoke the communicator under processes still inside the collectives
    // above, and they would report a failure instead of the loss: the
    // agreement lets every process get there first.
    (void)_comm.agree(false);
    throw_lost(lost, "restore", _version);
  }
  abandon_snapshot_transfers();
  // A lone replacement in a replay may be served its snapshot (snapshots.cpp).
  const bool lone = scope == RestoreScope::kReplacements && _transfers != nullptr && needs.size() == 1;
  std::vector<GatherMessage> messages;
  std::vector<Rank> replacements;
  for (const auto& [needy, slot] : needs) {
    const OriginalRank owner = _slots.owners()[slot];
    const Rank holder = *holders[slot];
    const bool snapshot = lone && snapshot_serves(owner, holder);
    if (holder == _comm.rank()) messages.push_back({needy, {snapshot ? _snapshots.at(owner) : _held.at(owner)}});
    replacements.push_back(needy);
  }
  _comm.sparse_all_to_all(messages, [&](Rank, std::size_t bytes) {
    auto& copy = _held[_comm.original_rank()];
    copy.resize(bytes);
    return std::vector<std::span<std::byte>>{copy};
  });
  // Every process validates its own state first; all refuse together.
  std::string problem;
  try {
    if (takes_back) apply(_held.at(_comm.original_rank()), "restore");
  } catch (const UsageError& error) {
    problem = error.what();
  }
  if (!_comm.agree(problem.empty())) {
    throw UsageError(problem.empty() ? std::string(kWhere) + "::restore: another process could not apply its state "
                                                             "(its error says why)"
                                     : problem);
  }
  // After a respawn the copies the failed processes held are gone: take
  // them again (in a replay, where the others go on, hand them over). After
  // a shrink the application first fetches and redistributes the departed
  // processes' state.
  if (scope == RestoreScope::kEveryone && departed().empty()) checkpoint();
  if (scope == RestoreScope::kReplacements) hand_over_copies(replacements, holders);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::restore");
}

// No checkpoint follows a replay's restore, so the copies its lost
// processes held would be missing until the next one, and a second failure
// before it could lose a state (its other holder). Each replacement takes
// them from the live holder of each state its slot holds a copy of, and its
// own state's committed copy too (it may have been served a snapshot), so
// that it is a holder like any other.
void Checkpoint::hand_over_copies(std::span<const Rank> replacements, const std::vector<std::optional<Rank>>& holders) {
  const Placement placement = slot_placement();
  std::map<int, std::vector<std::byte>> outgoing;  // by current rank: (owner, size, bytes)...
  for (int slot = 0; slot < _slots.size(); ++slot) {
    const auto& holder = holders[static_cast<std::size_t>(slot)];
    if (!holder || *holder != _comm.rank()) continue;
    const OriginalRank owner = _slots.owners()[static_cast<std::size_t>(slot)];
    const std::vector<std::byte>& copy = _held.at(owner);
    for (const Slot held_by : placement.holders(BlockId{static_cast<std::uint64_t>(slot)})) {
      const auto rank = _comm.rank_of(_slots.owner(held_by));
      if (!rank || std::ranges::find(replacements, *rank) == replacements.end()) continue;
      auto& out = outgoing[rank->value()];
      for (const std::uint64_t word : {static_cast<std::uint64_t>(owner.value()), std::uint64_t{copy.size()}}) {
        const auto* bytes = reinterpret_cast<const std::byte*>(&word);
        out.insert(out.end(), bytes, bytes + sizeof word);
      }
      out.insert(out.end(), copy.begin(), copy.end());
    }
  }
  std::vector<OutgoingMessage> messages;
  for (const auto& [rank, bytes] : outgoing) messages.push_back({Rank{rank}, bytes});
  for (const IncomingMessage& message : _comm.sparse_all_to_all(messages)) {
    std::span<const std::byte> rest = message.payload;
    while (rest.size() >= 2 * sizeof(std::uint64_t)) {
      std::uint64_t words[2] = {0, 0};
      std::memcpy(words, rest.data(), sizeof words);
      rest = rest.subspan(sizeof words);
      if (words[1] > rest.size()) break;
      const auto copy = rest.first(static_cast<std::size_t>(words[1]));
      _held[OriginalRank{static_cast<int>(words[0])}].assign(copy.begin(), copy.end());
      rest = rest.subspan(copy.size());
    }
    if (!rest.empty()) throw CorruptData(std::string(kWhere) + "::restore: a copy handed over is cut short");
  }
  if (std::ranges::find(replacements, _comm.rank()) != replacements.end()) _holds_copies = true;
}

std::map<OriginalRank, SavedState> Checkpoint::fetch(std::span<const OriginalRank> wanted) try {
  settle_copies();
  std::vector<int> holds_of;
  _comm.run_uniformly([&] { holds_of = who_holds_copies(); },
                      std::string(kWhere) + "::fetch: finding who holds copies");
  const auto holders = live_holders(holds_of);
  std::string problem;
  std::vector<OriginalRank> lost;
  std::map<int, std::vector<std::uint64_t>> requests;  // by holder rank
  for (auto owner : wanted) {
    const auto slot = _slots.slot_of(owner);
    if (!slot) {
      problem = "original rank " + std::to_string(owner.value()) + " took no part in checkpoint version " +
                std::to_string(_version) + "; fetch only ranks listed by departed()";
      continue;
    }
    const auto& holder = holders[static_cast<std::size_t>(slot->value())];
    if (!holder) {
      lost.push_back(owner);
      continue;
    }
    requests[holder->value()].push_back(static_cast<std::uint64_t>(owner.value()));
  }
  if (!_comm.agree(problem.empty())) {
    throw UsageError(std::string(kWhere) + "::fetch: " +
                     (problem.empty() ? "another process asked for a rank not in the checkpoint" : problem));
  }
  std::vector<OutgoingMessage> asks;
  for (const auto& [holder, owners] : requests) {
    asks.push_back({Rank{holder}, std::as_bytes(std::span<const std::uint64_t>(owners))});
  }
  // Replies: for each asked state, its owner and length, then the states.
  std::vector<std::vector<std::uint64_t>> headers;
  std::vector<GatherMessage> replies;
  const auto asked = _comm.sparse_all_to_all(asks);
  headers.reserve(asked.size());
  for (const auto& ask : asked) {
    std::vector<std::uint64_t> owners(ask.payload.size() / sizeof(std::uint64_t));
    std::memcpy(owners.data(), ask.payload.data(), owners.size() * sizeof(std::uint64_t));
    auto& header = headers.emplace_back();
    GatherMessage reply{ask.source, {}};
    for (auto owner : owners)
      header.insert(header.end(), {owner, _held.at(OriginalRank{static_cast<int>(owner)}).size()});
    reply.pieces.emplace_back(std::as_bytes(std::span<const std::uint64_t>(header)));
    for (auto owner : owners) reply.pieces.emplace_back(_held.at(OriginalRank{static_cast<int>(owner)}));
    replies.push_back(std::move(reply));
  }
  std::map<OriginalRank, SavedState> states;
  std::map<int, std::vector<std::byte>> arrived;
  _comm.sparse_all_to_all(replies, [&](Rank source, std::size_t bytes) {
    auto& buffer = arrived[source.value()];
    buffer.resize(bytes);
    return std::vector<std::span<std::byte>>{buffer};
  });
  for (auto& [holder, buffer] : arrived) {
    const auto count = requests[holder].size();
    std::size_t offset = 2 * count * sizeof(std::uint64_t);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t owner_and_length[2];
      std::memcpy(owner_and_length, buffer.data() + 2 * i * sizeof(std::uint64_t), sizeof owner_and_length);
      const auto begin = buffer.begin() + static_cast<std::ptrdiff_t>(offset);
      states.emplace(
          OriginalRank{static_cast<int>(owner_and_length[0])},
          SavedState(std::vector<std::byte>(begin, begin + static_cast<std::ptrdiff_t>(owner_and_length[1]))));
      offset += owner_and_length[1];
    }
  }
  if (!lost.empty()) throw_lost(lost, "fetch", _version);
  return states;
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::fetch");
}

}  // namespace reprise
