#include "reprise/checkpoint.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "log.hpp"
#include "huge_pages.hpp"
#include "mix.hpp"
#include "msglog_hooks.hpp"
#include "reprise/detail/checkpoint_internals.hpp"
#include "reprise/detail/comm_internals.hpp"
#include "reprise/detail/rethrow.hpp"
#include "reprise/error.hpp"
#include "reprise/inject.hpp"
#include "reprise/placement.hpp"
#include "words.hpp"

namespace reprise {

namespace {

constexpr const char* kWhere = "reprise::Checkpoint";

[[noreturn]] void truncated() { throw CorruptData(std::string(kWhere) + ": a saved state is truncated"); }

/// After a commit over `comm`, when the program runs with the message log
/// (libreprise_msglog.so linked or preloaded, found through dlsym so that
/// libreprise does not depend on it): marks the log, which frees what the
/// receivers consumed (collective over `comm`). A failure of MPI is raised
/// as usual; a refusal (a member the log does not follow, said on stderr by
/// the log) ends the marking in this process.
void mark_message_log(Comm& comm) {
  using Mark = int (*)(MPI_Comm);
  static const auto mark = reinterpret_cast<Mark>(dlsym(RTLD_DEFAULT, "reprise_msglog_mark_checkpoint_on"));
  static bool refused = false;
  if (mark == nullptr || refused) return;
  const int rc = mark(comm.raw());
  if (rc == 0 || rc == -1) return;
  if (rc == MPI_ERR_ARG) {
    refused = true;
    return;
  }
  comm.check(rc, "marking the message log");
}

/// Before the copies of a commit over `comm`: the message log's state, to
/// save with them (collective; see carry_message_log).
void save_message_log(Comm& comm, std::vector<std::byte>& state) {
  static const auto save =
      reinterpret_cast<reprise_msglog_save_state_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogSaveState));
  const auto sink = [](void* context, const void* bytes, std::size_t size) {
    auto& out = *static_cast<std::vector<std::byte>*>(context);
    const auto* first = static_cast<const std::byte*>(bytes);
    out.assign(first, first + size);
  };
  comm.check(save(MPI_Comm_c2f(comm.raw()), sink, &state), "saving the message log's state");
}

/// A commit starts: its collectives do not count against a replay.
void begin_message_log_checkpoint() {
  static const auto begins = reinterpret_cast<reprise_msglog_checkpoint_begins_fn>(
      dlsym(RTLD_DEFAULT, detail::kMsglogCheckpointBegins));
  if (begins != nullptr) (void)begins();
}

/// Once that commit is done: the log frees what the receivers consumed.
void commit_message_log(Comm& comm) {
  static const auto commit =
      reinterpret_cast<reprise_msglog_commit_state_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogCommitState));
  comm.check(commit(), "marking the message log");
}

}  // namespace

void Checkpoint::carry_message_log() {
  if (_carries_log) return;
  if (dlsym(RTLD_DEFAULT, detail::kMsglogSaveState) == nullptr ||
      dlsym(RTLD_DEFAULT, detail::kMsglogCommitState) == nullptr) {
    throw UsageError(std::string(kWhere) + ": the message log is not loaded: link or preload libreprise_msglog.so");
  }
  protect("reprise::Driver message log", _log_state);
  _carries_log = true;
}

SavedState::SavedState(std::vector<std::byte> bytes) : _bytes(std::move(bytes)) {
  detail::WordReader in(_bytes);
  const auto count = in.word();
  for (std::uint64_t i = 0; in.ok() && i < count; ++i) {
    const auto name_hash = in.word();
    const auto piece = in.bytes(in.word());
    _pieces[static_cast<std::size_t>(name_hash)] = piece;
  }
  if (!in.ok()) truncated();
}

std::span<const std::byte> SavedState::bytes(std::string_view name) const {
  const auto it = _pieces.find(std::hash<std::string_view>{}(name));
  if (it == _pieces.end()) {
    throw UsageError(std::string(kWhere) + ": the saved state has no piece named '" + std::string(name) + "'");
  }
  return it->second;
}

Checkpoint::Checkpoint(Comm& comm, CheckpointConfig config) : _comm(comm), _config(config) {
  if (_config.copies < 1) {
    throw UsageError(std::string(kWhere) + ": " + std::to_string(_config.copies) +
                     " copies requested; a checkpoint needs at least 1 (2 survive one failure)");
  }
}

void Checkpoint::add(Item item) {
  for (const auto& existing : _items) {
    if (existing.name == item.name) {
      throw UsageError(std::string(kWhere) + ": '" + item.name + "' is registered twice; give every piece of state its own name");
    }
  }
  _items.push_back(std::move(item));
}

void Checkpoint::protect(std::string name, std::span<std::byte> buffer) {
  protect_fixed(std::move(name), buffer, ArrayShape{}, std::nullopt);
}

void Checkpoint::protect_fixed(std::string name, std::span<std::byte> buffer, ArrayShape shape,
                               std::optional<BlockHolding> blocks) {
  const auto unit = element_size(shape.type);
  if (!shape.extents.empty()) {
    std::uint64_t elements = 1;
    for (const auto extent : shape.extents) elements *= extent;
    if (elements * unit != buffer.size()) {
      throw UsageError(std::string(kWhere) + ": the extents of '" + name + "' make " + std::to_string(elements) +
                       " elements but it holds " + std::to_string(buffer.size() / unit) +
                       "; give extents whose product is the number of values");
    }
  }
  add({std::move(name),
       [buffer](std::vector<std::byte>& out) { out.insert(out.end(), buffer.begin(), buffer.end()); },
       [buffer](std::span<const std::byte> bytes) {
         if (!bytes.empty()) std::memcpy(buffer.data(), bytes.data(), bytes.size());
       },
       buffer.size(), unit, std::move(shape), blocks, [buffer] { return std::span<const std::byte>(buffer); },
       [buffer](std::size_t) { return buffer; }});
}

void Checkpoint::protect_array(std::string name, std::span<std::byte> bytes, ElementType type,
                               std::vector<std::uint64_t> extents) {
  if (type == ElementType::kBytes || bytes.size() % element_size(type) != 0) {
    throw UsageError(std::string(kWhere) + ": array '" + name + "' of " + std::string(element_type_name(type)) +
                     " holds " + std::to_string(bytes.size()) + " bytes; give a numeric element type and memory of " +
                     "a whole number of its elements");
  }
  protect_fixed(std::move(name), bytes, ArrayShape{type, std::move(extents)}, std::nullopt);
}

void Checkpoint::protect_blocks(std::string name, std::size_t block_bytes, BlockRange mine, std::span<std::byte> data) {
  if (block_bytes == 0 || mine.end < mine.begin || mine.size() * block_bytes != data.size()) {
    throw UsageError(std::string(kWhere) + ": blocks '" + name + "' hold " + std::to_string(data.size()) +
                     " bytes for " + std::to_string(mine.end < mine.begin ? 0 : mine.size()) + " blocks of " +
                     std::to_string(block_bytes) + " bytes; give a range with begin <= end, blocks of at least one "
                     "byte and exactly their bytes");
  }
  const auto blocks = mine.size();
  protect_fixed(std::move(name), data, ArrayShape{ElementType::kBytes, {blocks, block_bytes}},
                BlockHolding{block_bytes, mine});
}

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

void detail::CheckpointInternals::load_in_place(Checkpoint& checkpoint, std::span<const std::size_t> sizes,
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

void Checkpoint::load_pieces(const SavedState& saved, const std::vector<std::string>& names) try {
  std::vector<std::pair<const Item*, std::span<const std::byte>>> pieces;
  for (const auto& name : names) {
    const auto item = std::find_if(_items.begin(), _items.end(), [&](const Item& each) { return each.name == name; });
    if (item == _items.end()) {
      throw UsageError(std::string(kWhere) + "::load_pieces: '" + name + "' is not registered; register it first");
    }
    const auto bytes = saved.bytes(name);
    if ((item->fixed_bytes != 0 && bytes.size() != item->fixed_bytes) || bytes.size() % item->unit != 0) {
      throw UsageError(std::string(kWhere) + "::load_pieces: '" + name + "' holds " + std::to_string(bytes.size()) +
                       " bytes in the saved state, which do not fit its registration (" +
                       (item->fixed_bytes != 0 ? std::to_string(item->fixed_bytes) + " bytes"
                                               : "values of " + std::to_string(item->unit) + " bytes") +
                       "); nothing was loaded");
    }
    pieces.emplace_back(&*item, bytes);
  }
  for (const auto& [item, bytes] : pieces) item->load(bytes);
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::load_pieces");
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

std::size_t Checkpoint::held_bytes() const noexcept {
  settle_copies();
  std::size_t total = 0;
  for (const auto& [owner, state] : _held) total += state.size();
  return total;
}

// Layout of a saved state: item count, then per item its name's hash, its
// length and its bytes.
void Checkpoint::serialize(std::vector<std::byte>& out) const {
  out.clear();
  detail::append_word(out, _items.size());
  for (const auto& item : _items) {
    detail::append_word(out, std::hash<std::string>{}(item.name));
    const std::size_t length_at = out.size();
    detail::append_word(out, 0);
    const std::size_t begin = out.size();
    item.save(out);
    const std::uint64_t length = out.size() - begin;
    std::memcpy(out.data() + length_at, &length, sizeof length);
  }
}

std::vector<std::byte> Checkpoint::take_spare(OriginalRank owner) {
  const auto it = _spare.find(owner);
  if (it == _spare.end()) return {};
  auto buffer = std::move(it->second);
  _spare.erase(it);
  return buffer;
}

void Checkpoint::check_piece(const Item& item, std::size_t length, const std::string& where) const {
  if (item.fixed_bytes != 0 && length != item.fixed_bytes) {
    throw UsageError(where + ": buffer '" + item.name + "' is " + std::to_string(item.fixed_bytes) +
                     " bytes but its saved state holds " + std::to_string(length) +
                     "; register it again with the size it had, or protect a std::vector whose size may change");
  }
  if (length % item.unit != 0) {
    throw UsageError(where + ": '" + item.name + "' holds " + std::to_string(length) + " bytes, not a whole number of its " +
                     std::to_string(item.unit) + "-byte values");
  }
}

std::vector<std::span<const std::byte>> Checkpoint::split(std::span<const std::byte> state,
                                                          std::string_view operation) const {
  const std::string where = std::string(kWhere) + "::" + std::string(operation);
  detail::WordReader in(state);
  const auto count = in.word();
  if (!in.ok()) truncated();
  if (count != _items.size()) {
    throw UsageError(where + ": the saved state holds " + std::to_string(count) + " pieces of state but " +
                     std::to_string(_items.size()) + " are registered; register the same names as when it was taken");
  }
  std::vector<std::span<const std::byte>> parts;
  parts.reserve(_items.size());
  for (const auto& item : _items) {
    const auto name_hash = in.word();
    const auto piece = in.bytes(in.word());
    if (!in.ok()) truncated();
    const auto length = piece.size();
    if (name_hash != std::hash<std::string>{}(item.name)) {
      throw UsageError(where + ": '" + item.name +
                       "' was not registered at this place when the state was saved; register the same names in "
                       "the same order");
    }
    check_piece(item, length, where);
    parts.push_back(piece);
  }
  if (in.remaining() != 0) {
    throw CorruptData(where + ": the saved state has " + std::to_string(in.remaining()) + " bytes after its last piece");
  }
  return parts;
}

// Check everything before changing anything.
void Checkpoint::apply(std::span<const std::byte> state, std::string_view operation) {
  const auto parts = split(state, operation);
  for (std::size_t i = 0; i < _items.size(); ++i) _items[i].load(parts[i]);
}

// A checkpoint in its phases: every process enters together and checks
// that all are at the same version with the same registrations; the new
// state travels to the buddies and lands beside the committed copies; the
// exchange's closing agreement says every process got its share, so every
// survivor commits, and the old copies become spares.
std::uint64_t Checkpoint::checkpoint() try {
  if (_carries_log) begin_message_log_checkpoint();
  settle_copies();
  const auto order = slot_order(join_checkpoint());
  SlotLayout slots(_comm, order);
  if (_carries_log) save_message_log(_comm, _log_state);
  auto pending = exchange_copies(order, slots);
  _spare = std::move(_held);
  _held = std::move(pending);
  _holds_copies = true;
  _slots = std::move(slots);
  ++_version;
  if (_carries_log) {
    commit_message_log(_comm);
  } else {
    mark_message_log(_comm);
  }
  // A hook may add or remove hooks: call the ones there were at the commit.
  const auto hooks = _hooks;
  for (const auto& [id, hook] : hooks) hook(_version);
  return _version;
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::checkpoint");
}

// The check phase: the node of each member, once every process has entered
// at the same version with the same registrations.
std::vector<int> Checkpoint::join_checkpoint() {
  inject::fault_point("checkpoint.join", _comm.original_rank());
  // One reduction of a fingerprint and its complement gives its max and min.
  std::uint64_t fingerprint = detail::mix64(_version + 1);
  for (const auto& item : _items) fingerprint = detail::mix64(fingerprint ^ std::hash<std::string>{}(item.name));
  std::uint64_t both[2] = {fingerprint, ~fingerprint};
  // A failure may let only some processes through these collectives: they
  // wait in the agreement that closes the exchange of copies.
  std::vector<int> node_of_member;
  detail::run_before(_comm, detail::FirstAgreement::kExchange, [&] {
    detail::CommInternals::join(_comm, both, "Checkpoint::checkpoint()", _config.join_timeout_seconds);
    node_of_member = _comm.node_of_each_member();
  });
  if (both[0] != ~both[1]) {
    throw UsageError(std::string(kWhere) +
                     "::checkpoint: the processes registered different names or are at different versions; register "
                     "the same names in the same order everywhere and call checkpoint() on every process");
  }
  const int p = _comm.size();
  if (_config.copies > p) {
    throw UsageError(std::string(kWhere) + "::checkpoint: " + std::to_string(_config.copies) + " copies need at least " +
                     std::to_string(_config.copies) + " processes, but there are " + std::to_string(p) +
                     "; lower the copies or run on more processes");
  }
  return node_of_member;
}

// The exchange phase: this process's state goes to its buddies (slot s's
// state lives on slot s and its buddies), theirs land here in the spare
// buffers of last time; returns every copy this process now holds.
std::map<OriginalRank, std::vector<std::byte>> Checkpoint::exchange_copies(const SlotOrder& order,
                                                                          const SlotLayout& slots) {
  const int p = slots.size();
  const auto my_slot = *slots.slot_of(_comm.original_rank());
  const Placement placement({.blocks = static_cast<std::uint64_t>(p),
                             .slots = p,
                             .copies = _config.copies,
                             .node_of_slot = slots.nodes()});
  auto state = take_spare(_comm.original_rank());
  serialize(state);
  std::vector<GatherMessage> messages;
  for (const Slot slot : placement.holders(BlockId{static_cast<std::uint64_t>(my_slot.value())})) {
    if (slot == my_slot) continue;
    messages.push_back({Rank{order.process[static_cast<std::size_t>(slot.value())]}, {state}});
  }
  std::map<OriginalRank, std::vector<std::byte>> pending;
  _comm.sparse_all_to_all(messages, [&](Rank source, std::size_t bytes) {
    const auto owner = _comm.original_rank(source);
    auto& copy = pending[owner];
    copy = take_spare(owner);  // same size as last time: no new pages, no zeroing
    copy.resize(bytes);
    return std::vector<std::span<std::byte>>{copy};
  });
  pending[_comm.original_rank()] = std::move(state);
  return pending;
}

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

std::vector<int> Checkpoint::who_holds_copies() {
  return _comm.allgather(_holds_copies ? 1 : 0);
}

// For each slot of the committed layout, the first process along its copies
// that is a member and took part in the last commit; the same answer
// everywhere.
std::vector<std::optional<Rank>> Checkpoint::live_holders(const std::vector<int>& holds_of) const {
  const int p = _slots.size();
  const Placement placement({.blocks = static_cast<std::uint64_t>(p),
                             .slots = p,
                             .copies = std::min(_config.copies, p),
                             .node_of_slot = _slots.nodes()});
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
  std::vector<GatherMessage> messages;
  std::vector<OriginalRank> lost;
  for (std::size_t slot = 0; slot < _slots.owners().size(); ++slot) {
    const OriginalRank owner = _slots.owners()[slot];
    const auto& holder = holders[slot];
    if (!holder) {
      lost.push_back(owner);
      continue;
    }
    const auto needy = _comm.rank_of(owner);
    if (needy && holds_of[static_cast<std::size_t>(needy->value())] == 0 && *holder == _comm.rank()) {
      messages.push_back({*needy, {_held.at(owner)}});
    }
  }
  if (!lost.empty()) {
    // Every process found the same states lost. Raising at once would
    // revoke the communicator under processes still inside the collectives
    // above, and they would report a failure instead of the loss: the
    // agreement lets every process get there first.
    (void)_comm.agree(false);
    throw_lost(lost, "restore", _version);
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
  // them again. After a shrink the application first fetches and
  // redistributes the departed processes' state.
  if (scope == RestoreScope::kEveryone && departed().empty()) checkpoint();
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::restore");
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
                     std::to_string(_version) + " already; continue another process's version only before the "
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
        if (std::find(holders.begin(), holders.end(), *mine) != holders.end()) expected.push_back(slots.owner(Slot{slot}));
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
           std::equal(landed.begin(), landed.end(), owners.begin(), [](const auto& copy, OriginalRank owner) {
             return copy.first == owner;
           });
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
    for (auto owner : owners) header.insert(header.end(), {owner, _held.at(OriginalRank{static_cast<int>(owner)}).size()});
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
      states.emplace(OriginalRank{static_cast<int>(owner_and_length[0])},
                     SavedState(std::vector<std::byte>(begin, begin + static_cast<std::ptrdiff_t>(owner_and_length[1]))));
      offset += owner_and_length[1];
    }
  }
  if (!lost.empty()) throw_lost(lost, "fetch", _version);
  return states;
} catch (const Error&) {
  detail::rethrow_naming("reprise::Checkpoint::fetch");
}

double young_daly_interval(double mtbf_seconds, double checkpoint_seconds) {
  if (!(mtbf_seconds > 0) || !(checkpoint_seconds > 0)) {
    throw UsageError("reprise::young_daly_interval: the mean time between failures and the checkpoint cost must be "
                     "positive (got " + std::to_string(mtbf_seconds) + " s and " + std::to_string(checkpoint_seconds) +
                     " s)");
  }
  if (checkpoint_seconds >= mtbf_seconds / 2) return mtbf_seconds;
  return std::sqrt(2 * checkpoint_seconds * mtbf_seconds) - checkpoint_seconds;
}

}  // namespace reprise
