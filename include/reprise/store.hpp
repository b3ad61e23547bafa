#pragma once
/// \file
/// `Store`: a replicated in-memory block store (after ReStore, Hübner et al.).
/// Processes submit fixed-size blocks with global ids; every block is kept on
/// `copies` processes; after failures, any process loads any id ranges
/// from surviving copies, so survivors can take over lost processes' data.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/comm.hpp"
#include "reprise/placement.hpp"
#include "reprise/slot_layout.hpp"

namespace reprise {

/// How a store keeps its blocks.
struct StoreConfig {
  int copies = 2;                            ///< copies of every block, 1 <= copies <= processes
  std::size_t block_bytes = 0;               ///< size of every block, > 0
  std::size_t bytes_per_permuted_range = 0;  ///< 0: no permutation; else a multiple of block_bytes
  std::uint64_t seed = 0;                    ///< seed of the permutation
  /// How long `submit`, `load` and `heal` wait for every process to call
  /// them before they revoke the communicator and raise `Timeout`.
  double join_timeout_seconds = 60;
};

/// A replicated block store on a communicator. Every member calls `submit`,
/// `load` and `heal` together. The copies of a block go to processes on
/// different nodes whenever there are at least `copies` nodes.
///
/// Memory: each process keeps about copies * (all blocks) / processes
/// blocks; during `submit` it also holds, briefly, the bytes it sends (its
/// blocks, once per copy) and receives, and during `load` nothing beyond the
/// caller's buffer. Copies a process cannot allocate raise `OutOfMemory` on
/// every process (saying how much was needed where it failed, and which
/// process on the others); the store keeps what it held.
///
/// The store refers to `comm` and follows it when the application replaces
/// it in place (`comm = comm.shrink()`): copies held by processes that have
/// failed since the submit are never used.
class Store {
 public:
  /// `UsageError` if `config` cannot work on `comm` (no block size, copies
  /// out of range, a permutation range that is not a whole number of blocks).
  Store(Comm& comm, StoreConfig config);

  /// Collective: each process submits the blocks `mine` from `data`
  /// (mine.size() * block_bytes bytes, in id order). Together the processes'
  /// ranges must cover 0 .. N-1 exactly once; an empty range is allowed.
  /// Replaces whatever the store held. `UsageError` on every process if any
  /// process's input is wrong (overlapping or missing ids, wrong sizes).
  void submit(BlockRange mine, std::span<const std::byte> data);

  /// Collective: each process loads the blocks `wanted` (any ranges, possibly
  /// none) into `into`, which holds their bytes back to back in the order
  /// given. Each block comes from one live copy: this process's own if it has
  /// one, otherwise spread over the live holders. `DataLost` (naming the
  /// ranges) on a process whose request has no live copy left; its other
  /// blocks are still loaded. `UsageError` on every process if any request is
  /// out of range or `into` has the wrong size.
  void load(std::span<const BlockRange> wanted, std::span<std::byte> into);

  /// Collective, after a recovery (`comm.shrink()` or `comm.respawn()`):
  /// brings every block back to `copies` live copies (or to every process,
  /// if fewer remain), moving only what was lost. Replacements learn the
  /// store's layout from a survivor and fetch the copies the process they
  /// replace held, and can then `load` what it had submitted; blocks still
  /// short of copies get new holders along a per-range probe sequence over
  /// the live processes. Afterwards the store survives further failures as
  /// it did the first. If this recovery left some blocks with no live copy,
  /// the rest is healed first, then `DataLost` is raised on every process
  /// naming every range without a copy (`lost()`).
  void heal();

  /// Total number of blocks submitted (0 before the first submit).
  [[nodiscard]] std::uint64_t blocks() const noexcept { return _placement ? _placement->config().blocks : 0; }
  /// The block ranges of which every copy died since the last submit, as
  /// found by `heal()` (the same on every process; empty after a submit).
  /// `load` raises `DataLost` for them until the next submit.
  [[nodiscard]] const std::vector<BlockRange>& lost() const noexcept { return _lost; }
  /// Bytes of block copies this process holds now.
  [[nodiscard]] std::size_t stored_bytes() const noexcept;
  /// The configuration.
  [[nodiscard]] const StoreConfig& config() const noexcept { return _config; }

 private:
  friend class VariableStore;  // commits its two stores' submits together

  struct Chunk {
    BlockRange range;
    std::vector<std::byte> bytes;
  };
  /// A submit whose copies have all arrived but are not the store's yet.
  struct StagedSubmit {
    Placement placement;
    std::map<std::uint64_t, Chunk> chunks;
    SlotLayout slots;
  };
  /// Holders added by `heal()` beyond the layout's, for one piece of the layout.
  struct ExtraCopies {
    BlockRange range;
    std::vector<OriginalRank> holders;
  };
  /// Collective: checks the input and moves every copy to its holders,
  /// changing nothing in the store (the exchange's closing agreement decides
  /// alike everywhere whether all copies arrived).
  [[nodiscard]] StagedSubmit stage_submit(BlockRange mine, std::span<const std::byte> data);
  /// The copies a submit brings to this process: the layout, the chunks it
  /// keeps, and where each source rank's pieces land in them.
  struct IncomingCopies {
    std::optional<Placement> placement;
    std::map<std::uint64_t, Chunk> chunks;
    std::vector<std::vector<std::span<std::byte>>> landing;
  };
  /// What this process found wrong as a collective operation began:
  /// nothing (`what` empty), its caller's input, or memory it could not
  /// allocate.
  struct Problem {
    enum class Kind : std::uint8_t {
      kNone,    ///< nothing wrong
      kInput,   ///< the caller's input (`UsageError`)
      kMemory,  ///< memory this process could not allocate (`OutOfMemory`)
    };
    Kind kind = Kind::kNone;
    std::string what;  ///< what, for this process's error
    /// A problem with the input, `what` saying what (none if empty).
    static Problem input(std::string what) { return {what.empty() ? Kind::kNone : Kind::kInput, std::move(what)}; }
    /// The problem as one number, found on the process of original rank
    /// `where`: the maximum over processes is the worst kind, found on the
    /// lowest rank (0: none).
    [[nodiscard]] std::uint64_t code(OriginalRank where) const noexcept;
  };
  /// Submit's allocate phase: the layout and this process's copies; the
  /// problem to report if they cannot be allocated.
  [[nodiscard]] Problem allocate_copies(IncomingCopies& copies, PlacementConfig layout,
                                        const std::vector<BlockRange>& submitted, const std::vector<int>& order,
                                        Slot my_slot) const;
  /// Submit's exchange phase: `mine` from `data` to every holder's copies.
  void send_submitted(const Placement& placement, BlockRange mine, std::span<const std::byte> data,
                      const std::vector<int>& slot_process, const IncomingCopies& copies);
  /// Local: makes a staged submit the store's content.
  void commit(StagedSubmit&& staged);
  /// Local: forgets everything, as before the first submit.
  void clear() noexcept;
  /// The layout of `blocks` blocks over one slot per entry of `node_of_slot`.
  [[nodiscard]] PlacementConfig placement_config(std::uint64_t blocks, std::vector<int> node_of_slot) const;
  /// Collective: loads `ranges` from live copies and keeps them here.
  void fetch_copies(const std::vector<BlockRange>& ranges);
  /// `load`, with what this process found wrong before (`mine`) reported
  /// alike on every process.
  void load_blocks(std::span<const BlockRange> wanted, std::span<std::byte> into, const Problem& mine);
  /// True if `holder` is a member, was one at the baseline, and is still the
  /// process that was there then (it has not failed since, replaced or not).
  [[nodiscard]] bool is_live(OriginalRank holder) const;
  /// True if `range` overlaps a range known to be lost.
  [[nodiscard]] bool is_lost(BlockRange range) const;
  /// The live processes holding `piece` (a piece of the layout, or part of
  /// one); none for a lost piece.
  [[nodiscard]] std::vector<OriginalRank> live_holders(const Placement::Piece& piece) const;
  /// The live process holding a copy of `piece` that this process should ask.
  [[nodiscard]] std::optional<Rank> pick_holder(const Placement::Piece& piece, std::size_t spread) const;
  /// Gives every piece short of copies new holders, which fetch it.
  void rereplicate();
  /// Local, the same on every member: forgets the holders heal() added for
  /// pieces whose own holders are all live again (their replacements
  /// fetched them), and drops this process's copies of those pieces.
  void drop_surplus_copies();
  /// Appends the pieces of memory holding `range` (which this process holds) to `out`.
  void held_pieces(BlockRange range, std::vector<std::span<const std::byte>>& out) const;
  /// Sends the layout from the lowest rank that has one to every member.
  void share_layout();
  /// Agrees with every member whether any found a problem; if one did,
  /// throws everywhere: `UsageError` for input, `OutOfMemory` for memory
  /// (with `problem` where it was found, naming the process elsewhere).
  void agree_on_input(const Problem& problem, const char* operation);
  /// The entry of a collective operation: waits (up to the join timeout)
  /// for every member to call it, then as `agree_on_input`.
  void join(const Problem& problem, const char* operation);
  /// Throws the error for the worst problem found anywhere, `worst` (a
  /// `Problem::code`), or `mine` where this process found one.
  [[noreturn]] void raise_problem(const Problem& mine, std::uint64_t worst, const char* operation) const;

  Comm& _comm;
  StoreConfig _config;
  std::optional<Placement> _placement;
  SlotLayout _slots;                             // who took each slot at the submit
  std::vector<OriginalRank> _baseline_renewals;  // Comm::failures() and moves() when the holders were last right
  std::vector<OriginalRank> _baseline_members;   // the members then, sorted
  std::vector<BlockRange> _lost;                 // pieces with no copy left, sorted
  std::map<std::uint64_t, Chunk> _chunks;        // copies held here, by first id
  std::map<std::uint64_t, ExtraCopies> _extra;   // holders added by heal(), by first id of the piece
  bool _awaiting_copies = false;                 // new to the store, its slots' copies not fetched yet
};

}  // namespace reprise
