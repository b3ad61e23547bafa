#pragma once
/// \file
/// `Checkpoint`: coordinated in-memory checkpoints of application state
/// (after the double in-memory checkpoints of Zheng, Ni and Kalé). Each
/// process's state is kept on the process itself and on `copies - 1`
/// buddies, on other nodes where there are any, so a lost process's state is
/// reloaded from memory in milliseconds instead of from a file system.

#include <cstddef>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/rank.hpp"
#include "reprise/slot_layout.hpp"

namespace reprise {

/// How a checkpoint keeps its copies.
struct CheckpointConfig {
  int copies = 2;  ///< copies of every process's state (its own + buddies), 1 <= copies <= processes
  /// How long `checkpoint()` waits for every process to call it before it
  /// revokes the communicator and raises `UsageError` (called by only some).
  double join_timeout_seconds = 60;
};

/// The saved state of one process, as `Checkpoint::fetch` returns it: its
/// registered pieces, looked up by name.
class SavedState {
 public:
  SavedState() = default;
  /// Parses a saved state; `CorruptData` if it is malformed.
  explicit SavedState(std::vector<std::byte> bytes);
  /// The bytes saved under `name`; `UsageError` if there is no such piece.
  [[nodiscard]] std::span<const std::byte> bytes(std::string_view name) const;
  /// The values of a vector saved under `name`.
  template <class T>
  [[nodiscard]] std::vector<T> values(std::string_view name) const {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto raw = bytes(name);
    std::vector<T> result(raw.size() / sizeof(T));
    if (!result.empty()) std::memcpy(result.data(), raw.data(), result.size() * sizeof(T));
    return result;
  }

 private:
  std::vector<std::byte> _bytes;
  std::map<std::size_t, std::span<const std::byte>> _pieces;  // by hash of the name
};

/// Protects registered state of every process. Every member registers the
/// same names in the same order, then calls `checkpoint()` and `restore()`
/// together. Like `Store`, it refers to `comm` and follows it when the
/// application replaces it in place (`comm = comm.respawn()`).
///
/// Memory: each process holds `copies` serialized states (its own and its
/// buddies') of the last committed checkpoint, and keeps the buffers of the
/// version before to write the next one into (so a checkpoint touches no new
/// pages): about 2 * copies * state size per process.
class Checkpoint {
 public:
  /// Appends the bytes of a piece of state.
  using Save = std::function<void(std::vector<std::byte>& out)>;
  /// Sets a piece of state from the bytes `Save` produced.
  using Load = std::function<void(std::span<const std::byte> bytes)>;

  /// `UsageError` if `config.copies` is below 1.
  explicit Checkpoint(Comm& comm, CheckpointConfig config = {});

  /// Registers a buffer of fixed size: restored in place, and a restore
  /// refuses (before changing anything) if the checkpoint holds another size.
  void protect(std::string name, std::span<std::byte> buffer);

  /// Registers a vector of trivially copyable values whose size may change
  /// between checkpoints; a restore resizes it.
  template <class T>
  void protect(std::string name, std::vector<T>& values) {
    static_assert(std::is_trivially_copyable_v<T>, "protect a vector of trivially copyable values, or use Save/Load");
    protect(
        std::move(name),
        [&values](std::vector<std::byte>& out) {
          const auto* first = reinterpret_cast<const std::byte*>(values.data());
          out.insert(out.end(), first, first + values.size() * sizeof(T));
        },
        [&values](std::span<const std::byte> bytes) {
          values.resize(bytes.size() / sizeof(T));
          if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
        },
        sizeof(T));
  }

  /// Registers one trivially copyable value (a counter, a struct of
  /// scalars, a `std::array`): restored in place.
  template <class T>
    requires std::is_trivially_copyable_v<T>
  void protect(std::string name, T& value) {
    protect(std::move(name), std::as_writable_bytes(std::span(&value, 1)));
  }

  /// Registers any object through a serializer pair.
  void protect(std::string name, Save save, Load load) { protect(std::move(name), std::move(save), std::move(load), 1); }

  /// Collective: stores every process's registered state as a new version,
  /// here and on its buddies, and returns the version number (1, 2, ...).
  /// Two-phase: the new copies are only kept once every process has received
  /// its share; if a process fails meanwhile, every survivor raises and the
  /// previous version stays complete. `UsageError` on every process if they
  /// registered different names or are at different versions; on the
  /// callers, with the communicator revoked, if some process does not call
  /// it within `join_timeout_seconds`.
  std::uint64_t checkpoint();

  /// Collective: rolls every process back to the last committed version.
  /// After `comm = comm.respawn()`, each replacement (with the same
  /// registrations) receives the state of the process it replaces from a
  /// buddy, and the restore ends with a fresh checkpoint (the next version)
  /// so that the next failure is survivable too. After `comm = comm.shrink()`
  /// the survivors roll back and keep the lost processes' copies: `fetch`
  /// what you need of them, redistribute, then call `checkpoint()`.
  /// `DataLost` on every process, naming the lost original ranks (as
  /// `lost_processes()`, and as one-block ranges), if a process and all its
  /// buddies failed. `UsageError` if there
  /// is no checkpoint, or if a process's state does not fit its
  /// registrations (that process's state is left untouched, and the
  /// committed checkpoint is kept for another try).
  void restore();

  /// Collective, after `restore()` following a shrink: each process gets the
  /// saved states of the original ranks in `wanted` (any, possibly none),
  /// from live copies. `DataLost` naming the ranks whose copies are all gone;
  /// `UsageError` for a rank that was not in the checkpoint.
  [[nodiscard]] std::map<OriginalRank, SavedState> fetch(std::span<const OriginalRank> wanted);

  /// The original ranks that took part in the last commit but are no longer
  /// members (after a shrink); empty after a respawn.
  [[nodiscard]] std::vector<OriginalRank> departed() const;

  /// The last committed version on this process (0: none).
  [[nodiscard]] std::uint64_t version() const noexcept { return _version; }
  /// Bytes of serialized state this process holds (its own and its buddies').
  [[nodiscard]] std::size_t held_bytes() const noexcept;

 private:
  struct Item {
    std::string name;
    Save save;
    Load load;
    std::size_t fixed_bytes;  // 0: any size
    std::size_t unit;         // the size must be a multiple of this
  };
  void protect(std::string name, Save save, Load load, std::size_t unit);
  void add(Item item);
  void serialize(std::vector<std::byte>& out) const;
  [[nodiscard]] std::vector<std::byte> take_spare(OriginalRank owner);
  [[nodiscard]] std::vector<int> join_checkpoint();
  [[nodiscard]] std::map<OriginalRank, std::vector<std::byte>> exchange_copies(const SlotOrder& order,
                                                                               const SlotLayout& slots);
  void apply(std::span<const std::byte> state);
  [[nodiscard]] bool share_layout();
  [[nodiscard]] std::vector<int> who_holds_copies();
  [[nodiscard]] std::vector<std::optional<Rank>> live_holders(const std::vector<int>& holds_of) const;

  Comm& _comm;
  CheckpointConfig _config;
  std::vector<Item> _items;
  std::uint64_t _version = 0;
  SlotLayout _slots;                                        // who took each slot, at the last commit
  std::map<OriginalRank, std::vector<std::byte>> _held;     // committed states held here, by owner
  bool _holds_copies = false;                               // took part in the last commit
  std::map<OriginalRank, std::vector<std::byte>> _spare;    // buffers of the version before, reused
};

/// The checkpoint interval (seconds of work between two checkpoints) that
/// wastes the least expected time, after Young and Daly: for a job whose mean
/// time between failures is `mtbf_seconds` and whose checkpoint costs
/// `checkpoint_seconds`, sqrt(2 * cost * mtbf) - cost while cost < mtbf / 2,
/// else mtbf. `UsageError` unless both are positive.
[[nodiscard]] double young_daly_interval(double mtbf_seconds, double checkpoint_seconds);

}  // namespace reprise
