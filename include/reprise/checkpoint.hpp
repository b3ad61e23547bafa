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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/comm.hpp"
#include "reprise/element_type.hpp"
#include "reprise/rank.hpp"
#include "reprise/slot_layout.hpp"

namespace reprise {

namespace detail {
struct CheckpointInternals;
struct SnapshotTransfers;
/// Asks the kernel for transparent huge pages on the whole huge pages of
/// [data, data + bytes), which nothing has touched yet: a restore's fresh
/// memory faults in faster and a later move pins fewer pages. A hint only.
void prefer_huge_pages_of(void* data, std::size_t bytes) noexcept;
}  // namespace detail

/// How a checkpoint keeps its copies.
struct CheckpointConfig {
  int copies = 2;  ///< copies of every process's state (its own + buddies), 1 <= copies <= processes
  /// How long `checkpoint()` waits for every process to call it before it
  /// revokes the communicator and raises `Timeout` (called by only some).
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

/// Blocks of the store's kind held by one process: the global block ids
/// `range`, `block_bytes` each, back to back. Recorded with a registration so
/// that a disk image can be redistributed over another process count.
struct BlockHolding {
  std::size_t block_bytes = 0;  ///< bytes per block
  BlockRange range;             ///< the ids held
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
    add({.name = std::move(name),
         .save =
             [&values](std::vector<std::byte>& out) {
               const auto* first = reinterpret_cast<const std::byte*>(values.data());
               out.insert(out.end(), first, first + values.size() * sizeof(T));
             },
         .load =
             [&values](std::span<const std::byte> bytes) {
               values.resize(bytes.size() / sizeof(T));
               if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
             },
         .fixed_bytes = 0,
         .unit = sizeof(T),
         .shape = shape_of<T>(),
         .blocks = std::nullopt,
         .view = [&values] { return std::as_bytes(std::span(values)); },
         .place =
             [&values](std::size_t bytes) {
               const std::size_t count = bytes / sizeof(T);
               if (count > values.capacity()) {
                 // Fresh storage, its pages asked for huge before they are
                 // zeroed (the old values are overwritten anyway).
                 std::vector<T> fresh;
                 fresh.reserve(count);
                 detail::prefer_huge_pages_of(fresh.data(), count * sizeof(T));
                 values = std::move(fresh);
               }
               values.resize(count);
               return std::as_writable_bytes(std::span(values));
             }});
  }

  /// Registers a fixed-size typed array, restored in place, whose element
  /// type and shape images record (so that HDF5 readers see a
  /// `double[n][m]`). `extents` (slowest first) must multiply to
  /// `values.size()`; empty means one dimension. `UsageError` otherwise.
  template <class T>
  requires std::is_arithmetic_v<T>
  void protect_array(std::string name, std::span<T> values, std::vector<std::uint64_t> extents = {}) {
    protect_fixed(std::move(name), std::as_writable_bytes(values), ArrayShape{element_type_of<T>(), std::move(extents)},
                  std::nullopt);
  }

  /// As above, for memory whose element type is known only at run time (the
  /// C and Python interfaces): `bytes` holds elements of `type`, whose size
  /// divides its size. `UsageError` otherwise.
  void protect_array(std::string name, std::span<std::byte> bytes, ElementType type,
                     std::vector<std::uint64_t> extents = {});

  /// Registers blocks of the store's kind: this process holds the global
  /// block ids `mine`, `block_bytes` each, back to back in `data` (restored
  /// in place). Like a buffer in memory; a disk image also records the
  /// range, so that a restart on another process count can hand any block
  /// ranges to any process (`DiskLevel::load_blocks`). `UsageError` unless
  /// `data` holds exactly `mine.size() * block_bytes` bytes and `block_bytes > 0`.
  void protect_blocks(std::string name, std::size_t block_bytes, BlockRange mine, std::span<std::byte> data);

  /// Registers one trivially copyable value (a counter, a struct of
  /// scalars, a `std::array`): restored in place. An arithmetic value keeps
  /// its type in images (HDF5 readers see a `double` as float64), anything
  /// else is bytes.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void protect(std::string name, T& value) {
    protect_fixed(std::move(name), std::as_writable_bytes(std::span(&value, 1)), shape_of<T>(), std::nullopt);
  }

  /// Registers any object through a serializer pair.
  void protect(std::string name, Save save, Load load) {
    add({.name = std::move(name),
         .save = std::move(save),
         .load = std::move(load),
         .fixed_bytes = 0,
         .unit = 1,
         .shape = ArrayShape{},
         .blocks = std::nullopt,
         .view = {},
         .place = {}});
  }

  /// Collective: stores every process's registered state as a new version,
  /// here and on its buddies, and returns the version number (1, 2, ...).
  /// Two-phase: the new copies are only kept once every process has received
  /// its share; if a process fails meanwhile, every survivor raises and the
  /// previous version stays complete. `UsageError` on every process if they
  /// registered different names or are at different versions. `Timeout` on
  /// the callers, with the communicator revoked, if some process does not
  /// call it within `join_timeout_seconds`.
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

  /// Whether this process holds a committed version in memory (what
  /// `restore()` rolls back to); false before the first `checkpoint()`, in a
  /// replacement before its restore, and in a job restarted from a disk
  /// image before its first `checkpoint()`.
  [[nodiscard]] bool has_commit() const noexcept { return _slots.size() > 0; }

  /// Sets the registered pieces `names` from a saved state (not collective),
  /// for instance values that were the same on every process, taken from any
  /// old process after a restart on another process count (`DiskLevel::fetch`).
  /// Checks every piece first (registered, present, fixed size, whole values):
  /// `UsageError`, with nothing changed, otherwise.
  void load_pieces(const SavedState& saved, const std::vector<std::string>& names);

 private:
  friend class Driver;
  // The layers' plumbing (disk images, migration): reprise/detail/checkpoint_internals.hpp.
  friend struct detail::CheckpointInternals;
  /// Which processes take back their state in `restore_as`.
  enum class RestoreScope {
    kEveryone,          ///< every process rolls back, then a fresh checkpoint (`restore()`)
    kEveryoneNoRetake,  ///< every process rolls back; the caller takes the next checkpoint
    /// only the processes that hold no copies (the replacements of this recovery; those of an earlier one
    /// were handed copies): the others keep their state
    kReplacements,
  };
  void restore_as(RestoreScope scope);
  /// Carries the message log's state (libreprise_msglog.so) with every
  /// commit, for `Driver`'s replay: registered as a piece of state, filled
  /// by the log before the copies are taken, the log marked once committed.
  void carry_message_log();
  /// The name under which `carry_message_log` registers the log's state.
  static constexpr std::string_view kMessageLogPiece = "reprise::Driver message log";
  /// The log's state saved with the last committed (or restored) version.
  [[nodiscard]] const std::vector<std::byte>& message_log_state() const noexcept { return _log_state; }
  // Snapshots between two checkpoints, for the Driver's replay (snapshots.cpp): each process sends
  // its state, with the log's state for a snapshot, to the first holder of its checkpoint's copy,
  // which keeps the last one it received of this version; restore_as(kReplacements) serves a lone
  // replacement its snapshot instead when the log says it can.
  void enable_snapshots();
  /// Sends this process's snapshot, unless the last one is still on its way (not collective).
  void send_snapshot();
  /// Keeps the snapshots that arrived here (not collective).
  void receive_snapshots();
  void keep_snapshot();
  [[nodiscard]] std::optional<Rank> snapshot_holder() const;
  /// restore_as(kReplacements) with one replacement, of `owner`, whose
  /// state `holder` serves (collective): every survivor reports to it what it
  /// consumed from the lost process; true at the holder if it serves the
  /// snapshot, which the log says covers them all, instead of the copy.
  [[nodiscard]] bool snapshot_serves(OriginalRank owner, Rank holder);
  /// The snapshots on their way on a communicator a recovery replaced are let go.
  void abandon_snapshot_transfers();

  struct Item {
    std::string name;
    Save save;
    Load load;
    std::size_t fixed_bytes;  // 0: any size
    std::size_t unit;         // the size must be a multiple of this
    ArrayShape shape;
    std::optional<BlockHolding> blocks;
    std::function<std::span<const std::byte>()> view;        // the bytes in place; empty for Save/Load objects
    std::function<std::span<std::byte>(std::size_t)> place;  // made to hold that many bytes, in place; idem
  };
  template <class T>
  [[nodiscard]] static ArrayShape shape_of() {
    if constexpr (std::is_arithmetic_v<T>) {
      return ArrayShape{element_type_of<T>(), {}};
    } else {
      return ArrayShape{};
    }
  }
  void check_piece(const Item& item, std::size_t length, const std::string& where) const;
  void protect_fixed(std::string name, std::span<std::byte> buffer, ArrayShape shape,
                     std::optional<BlockHolding> blocks);
  void add(Item item);
  void serialize(std::vector<std::byte>& out) const;
  [[nodiscard]] std::vector<std::span<const std::byte>> split(std::span<const std::byte> state,
                                                              std::string_view operation) const;
  [[nodiscard]] std::vector<std::byte> take_spare(OriginalRank owner);
  [[nodiscard]] std::vector<int> join_checkpoint();
  [[nodiscard]] std::map<OriginalRank, std::vector<std::byte>> exchange_copies(const SlotOrder& order,
                                                                               const SlotLayout& slots);
  void apply(std::span<const std::byte> state, std::string_view operation);
  [[nodiscard]] bool share_layout();
  [[nodiscard]] std::vector<int> who_holds_copies();
  [[nodiscard]] std::vector<int> share_holders(const char* operation);
  [[nodiscard]] std::vector<std::optional<Rank>> live_holders(const std::vector<int>& holds_of) const;
  /// The placement of the last commit's slots.
  [[nodiscard]] Placement slot_placement() const;
  /// After the restore of a replay: the copies of the others' states each
  /// replacement's predecessor held, from their live holders.
  void hand_over_copies(std::span<const Rank> replacements, const std::vector<std::optional<Rank>>& holders);

  Comm& _comm;
  CheckpointConfig _config;
  std::vector<Item> _items;
  std::uint64_t _version = 0;
  SlotLayout _slots;  // who took each slot, at the last commit
  void settle_copies() const noexcept;
  void adopt_layout(std::span<const std::uint64_t> layout, std::vector<OriginalRank> owners);

  // The copies a migration carried may still be arriving
  // (`CheckpointInternals::continue_commit`):
  // the first call that looks at them, a const one too, waits for them and
  // drops them if they did not arrive intact.
  mutable std::map<OriginalRank, std::vector<std::byte>> _held;  // committed states held here, by owner
  mutable bool _holds_copies = false;                            // took part in the last commit
  std::map<OriginalRank, std::vector<std::byte>> _spare;         // buffers of the version before, reused
  std::vector<std::pair<std::uint64_t, std::function<void(std::uint64_t)>>> _hooks;  // by id, in order
  std::uint64_t _next_hook = 1;
  bool _carries_log = false;          // carry_message_log()
  std::vector<std::byte> _log_state;  // the message log's state, saved with each commit
  // enable_snapshots(): the snapshots on their way (snapshots.cpp; what MPI may still use outlives
  // the checkpoint), and the last one of each process received here, of this version.
  std::shared_ptr<detail::SnapshotTransfers> _transfers;
  std::map<OriginalRank, std::vector<std::byte>> _snapshots;
  // Last, so that they go first: the copies still landing, and whose they are.
  mutable std::vector<OriginalRank> _arriving_owners;
  mutable std::function<std::optional<std::map<OriginalRank, std::vector<std::byte>>>()> _copies_arriving;
};

/// The checkpoint interval (seconds of work between two checkpoints) that
/// wastes the least expected time, after Young and Daly: for a job whose mean
/// time between failures is `mtbf_seconds` and whose checkpoint costs
/// `checkpoint_seconds`, sqrt(2 * cost * mtbf) - cost while cost < mtbf / 2,
/// else mtbf. `UsageError` unless both are positive.
[[nodiscard]] double young_daly_interval(double mtbf_seconds, double checkpoint_seconds);

}  // namespace reprise
