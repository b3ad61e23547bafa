#pragma once
/// \file
/// What the layers above `Checkpoint` (disk images, migration) build on and
/// users never call: the registrations and serialized states, the commit
/// hooks, and the copies a moving process carries. A detail header of the
/// checkpoint layer (not installed).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "reprise/checkpoint.hpp"
#include "reprise/element_type.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// One registered piece of state as other layers (disk images, migration)
/// see it: its name, its element type and shape, and what its size must be.
struct Registration {
  std::string name;                    ///< the name it was protected under
  ArrayShape shape;                    ///< `kBytes` unless registered as a typed array or vector
  std::size_t fixed_bytes = 0;         ///< 0: the size may change (vectors, Save/Load objects)
  std::optional<BlockHolding> blocks;  ///< set for `protect_blocks`
};

/// Which `on_commit` callback to remove with `remove_commit_hook`.
struct CommitHook {
  std::uint64_t id = 0;  ///< given by `on_commit`
};

namespace detail {

/// The members of `Checkpoint` the layers above use (a friend of
/// `Checkpoint`). A serialized state is what `checkpoint()` keeps of a
/// process: its pieces in registration order, each as its name's hash, its
/// length and its bytes. None of these is collective unless it says so.
struct CheckpointInternals {
  /// Every registered piece, in registration order.
  [[nodiscard]] static std::vector<Registration> registrations(const Checkpoint& checkpoint);
  /// This process's own state of the last committed version, serialized
  /// (empty if it holds none). Valid until the next `checkpoint()`/`restore()`.
  [[nodiscard]] static std::span<const std::byte> committed_state(const Checkpoint& checkpoint);
  /// Serializes the registered state as it is now.
  [[nodiscard]] static std::vector<std::byte> capture(const Checkpoint& checkpoint);
  /// The pieces of a serialized state, one per registration in order, after
  /// every check `restore()` makes (names, fixed sizes, whole values):
  /// `UsageError` if it does not fit the registrations, `CorruptData` if it
  /// is truncated. The spans point into `state`.
  [[nodiscard]] static std::vector<std::span<const std::byte>> split_state(const Checkpoint& checkpoint,
                                                                           std::span<const std::byte> state);
  /// The inverse of `split_state`: a serialized state from one piece per
  /// registration, in order (`UsageError` for another count).
  [[nodiscard]] static std::vector<std::byte> join_state(const Checkpoint& checkpoint,
                                                         std::span<const std::span<const std::byte>> pieces);
  /// One registered piece's bytes as they are now (`visit_current`).
  struct CurrentPiece {
    std::size_t index = 0;             ///< its place among the registrations
    std::span<const std::byte> bytes;  ///< its bytes
    /// True for buffers and vectors: `bytes` are the object's own memory,
    /// valid while it does not change; false for Save/Load objects, whose
    /// bytes are serialized into a buffer that lives during the call only.
    bool in_place = false;
  };
  /// Calls `visit` for every registered piece, in order, with its bytes as
  /// they are now, copying nothing it need not: what an image of the
  /// current state is built from.
  static void visit_current(const Checkpoint& checkpoint, const std::function<void(const CurrentPiece&)>& visit);
  /// Sets the registered state from one piece per registration, in order,
  /// after every check `split_state` makes: `UsageError`, with nothing
  /// changed, if they do not fit.
  static void load_split(Checkpoint& checkpoint, std::span<const std::span<const std::byte>> pieces);
  /// Sets the registered state in place, a piece of `sizes[i]` bytes per
  /// registration: after every check `load_split` makes on those sizes
  /// (`UsageError`, nothing changed), calls `fill(i, memory)` in order with
  /// the piece's own memory (a vector first resized to hold it) or, for a
  /// Save/Load object, a buffer it then loads. So a state read from an image
  /// is copied once. If `fill` throws, the pieces before it are loaded
  /// already: check what fills them first.
  static void load_in_place(Checkpoint& checkpoint, std::span<const std::size_t> sizes,
                            const std::function<void(std::size_t index, std::span<std::byte> memory)>& fill);
  /// Makes room for a restore: after the checks of `load_in_place` on
  /// `sizes` (`UsageError`, nothing changed), resizes each registered vector
  /// to its size and returns each piece's own memory, in order (empty for a
  /// Save/Load object). So bytes can arrive straight where they belong,
  /// before `load_in_place` fills the rest.
  [[nodiscard]] static std::vector<std::span<std::byte>> place_pieces(Checkpoint& checkpoint,
                                                                      std::span<const std::size_t> sizes);
  /// Sets the registered state from a serialized state: checks it like
  /// `split_state` first, so nothing changes on an error.
  static void load_state(Checkpoint& checkpoint, std::span<const std::byte> state);

  /// Calls `callback` on this process after each commit (`checkpoint()`,
  /// and the one that ends `restore()` after a respawn) with the new
  /// version: every process calls its hooks, in the order they were added,
  /// so a hook may be collective. An exception from a hook comes out of
  /// `checkpoint()`, with the version already committed in memory. This is
  /// how the disk level sees every commit, the `Driver`'s included, without
  /// the checkpoint layer knowing it.
  [[nodiscard]] static CommitHook on_commit(Checkpoint& checkpoint,
                                            std::function<void(std::uint64_t version)> callback);
  /// Removes a hook added by `on_commit` (nothing if it is gone already).
  static void remove_commit_hook(Checkpoint& checkpoint, CommitHook hook) noexcept;

  /// After a restart from a saved version (a new job, restored from disk):
  /// the next `checkpoint()` takes version `version + 1` on every process.
  /// `restore()` still has nothing to roll back to until then. `UsageError`
  /// if this checkpoint has committed a version already.
  static void continue_from(Checkpoint& checkpoint, std::uint64_t version);

  /// Where the committed checkpoint's copies are after a move
  /// (`copies_on_move`).
  enum class CopiesOnMove {
    /// Every leaving process holds its copies and carries them to its
    /// successor (`held_copies`, `continue_commit`): the version stays as
    /// redundant as at its commit, through the move and after it.
    kCarried,
    /// Not: the move must end with a new checkpoint.
    kRetaken,
  };
  /// Collective: where the committed copies would be if the processes of
  /// original ranks `leaving` moved away: carried, so that a move needs no
  /// new checkpoint, unless some member has no committed version or a
  /// leaving process lacks its copies.
  [[nodiscard]] static CopiesOnMove copies_on_move(Checkpoint& checkpoint, std::span<const OriginalRank> leaving);

  /// One committed copy this process holds: whose state, and its bytes.
  struct HeldCopy {
    OriginalRank owner;                ///< the original rank the state belongs to
    std::span<const std::byte> state;  ///< its serialized state
  };
  /// The committed copies this process holds (its own state's and its
  /// buddies'), by owner; empty if it holds none. Valid until the next
  /// `checkpoint()`/`restore()`.
  [[nodiscard]] static std::vector<HeldCopy> held_copies(const Checkpoint& checkpoint);

  /// The committed version and its layout (who held which copies), as
  /// words for `continue_commit` in a process that takes over from this one
  /// (a migration's image carries them); empty if there is none.
  [[nodiscard]] static std::vector<std::uint64_t> committed_layout(const Checkpoint& checkpoint);

  /// In a process that takes over from another (a migration's new process,
  /// after its state is loaded): continues the committed version that
  /// `committed_layout()` described there, so that a `restore` serves this
  /// process; the next checkpoint is the version after. Without `copies`
  /// it holds none of the version's copies until the next checkpoint;
  /// with them (what its predecessor's `held_copies()` were, by owner) it
  /// holds them as its predecessor did. `UsageError` if this checkpoint has
  /// committed a version already; `CorruptData` if `layout` is malformed or
  /// `copies` are not the owners this process's place in it holds.
  static void continue_commit(Checkpoint& checkpoint, std::span<const std::uint64_t> layout,
                              std::map<OriginalRank, std::vector<std::byte>> copies = {});

  /// Copies still on their way (see the overload below): all of them, by
  /// owner, once they arrived intact, else nothing.
  using ArrivingCopies = std::function<std::optional<std::map<OriginalRank, std::vector<std::byte>>>()>;

  /// The same, for copies of `owners` that are still coming (a migration
  /// lands them while the application runs again): the first call that
  /// looks at the copies (every collective one, `held_copies`,
  /// `committed_state`, `held_bytes`, the destructor) calls `arriving`
  /// first, once. If it gives nothing, or the copies of others, this
  /// process holds none, as a process respawned without them, and says so
  /// on stderr. Errors as above (`arriving` is still called before they
  /// are raised, so that its copies land before their memory goes).
  static void continue_commit(Checkpoint& checkpoint, std::span<const std::uint64_t> layout,
                              std::vector<OriginalRank> owners, ArrivingCopies arriving);
};

}  // namespace detail
}  // namespace reprise
