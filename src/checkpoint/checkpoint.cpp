#include "reprise/checkpoint.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <optional>
#include <utility>

#include "mix.hpp"
#include "msglog_hooks.hpp"
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
  static const auto begins =
      reinterpret_cast<reprise_msglog_checkpoint_begins_fn>(dlsym(RTLD_DEFAULT, detail::kMsglogCheckpointBegins));
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
  protect(std::string(kMessageLogPiece), _log_state);
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
      throw UsageError(std::string(kWhere) + ": '" + item.name +
                       "' is registered twice; give every piece of state its own name");
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
  add({std::move(name), [buffer](std::vector<std::byte>& out) { out.insert(out.end(), buffer.begin(), buffer.end()); },
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
                     std::to_string(block_bytes) +
                     " bytes; give a range with begin <= end, blocks of at least one "
                     "byte and exactly their bytes");
  }
  const auto blocks = mine.size();
  protect_fixed(std::move(name), data, ArrayShape{ElementType::kBytes, {blocks, block_bytes}},
                BlockHolding{block_bytes, mine});
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
    throw UsageError(where + ": '" + item.name + "' holds " + std::to_string(length) +
                     " bytes, not a whole number of its " + std::to_string(item.unit) + "-byte values");
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
    throw CorruptData(where + ": the saved state has " + std::to_string(in.remaining()) +
                      " bytes after its last piece");
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
  _snapshots.clear();  // older than this version
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
    throw UsageError(std::string(kWhere) + "::checkpoint: " + std::to_string(_config.copies) +
                     " copies need at least " + std::to_string(_config.copies) + " processes, but there are " +
                     std::to_string(p) + "; lower the copies or run on more processes");
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
  const Placement placement(
      {.blocks = static_cast<std::uint64_t>(p), .slots = p, .copies = _config.copies, .node_of_slot = slots.nodes()});
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

double young_daly_interval(double mtbf_seconds, double checkpoint_seconds) {
  if (!(mtbf_seconds > 0) || !(checkpoint_seconds > 0)) {
    throw UsageError("reprise::young_daly_interval: the mean time between failures and the checkpoint cost must be "
                     "positive (got " +
                     std::to_string(mtbf_seconds) + " s and " + std::to_string(checkpoint_seconds) + " s)");
  }
  if (checkpoint_seconds >= mtbf_seconds / 2) return mtbf_seconds;
  return std::sqrt(2 * checkpoint_seconds * mtbf_seconds) - checkpoint_seconds;
}

}  // namespace reprise
