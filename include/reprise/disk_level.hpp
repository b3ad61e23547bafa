#pragma once
/// \file
/// `DiskLevel`: the checkpoint level that survives losing the whole job (every
/// process, the wall-clock limit). Every n-th version a `Checkpoint` commits,
/// each process writes the image of its committed state (`reprise/image.hpp`)
/// to a directory, and a manifest written last marks the set complete. A new
/// job restarts from the newest complete set, on the same number of processes
/// (each loads its own state) or on another (state saved as blocks of the
/// store's kind is handed to whichever process now needs it).
///
/// Directory layout (one directory per job's checkpoints, shared by all
/// processes):
///   `<directory>/v<version>/rank<original rank>.h5`   one image per process
///   `<directory>/v<version>/manifest`                 written last, by process 0
/// A version is complete when its manifest is there and checks out; files are
/// written to a temporary name, fsynced, renamed, and the folder fsynced.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reprise/block.hpp"
#include "reprise/checkpoint.hpp"
#include "reprise/comm.hpp"
#include "reprise/rank.hpp"

namespace reprise {

/// Where and how often the disk level writes.
struct DiskLevelConfig {
  std::filesystem::path directory;  ///< created if missing; one job's checkpoints only
  std::uint64_t every = 1;          ///< write versions that are multiples of this (1: every version)
  int keep = 2;                     ///< complete versions kept on disk (older ones are removed)
};

/// One old process's blocks of a blocks piece (`Checkpoint::protect_blocks`).
struct HeldBlocks {
  OriginalRank holder;  ///< the old job's process that saved them
  BlockRange range;     ///< the global block ids it held
};

/// Who held what of one blocks piece in a saved version.
struct SavedBlocks {
  std::string name;              ///< the registration's name
  std::size_t block_bytes = 0;   ///< bytes of one block
  std::vector<HeldBlocks> held;  ///< one entry per old process, by original rank
};

/// What `DiskLevel::restart()` found.
enum class RestartOutcome {
  kNoCheckpoint,  ///< no complete version in the directory: start from scratch
  kRestored,      ///< same process count: every process has its own state back
  kRedistribute,  ///< another process count: nothing loaded; `fetch` and `load_blocks` what you need
};

/// The result of `DiskLevel::restart()`, the same on every process.
struct DiskRestart {
  RestartOutcome outcome = RestartOutcome::kNoCheckpoint;  ///< what was found, and so what to do
  std::uint64_t version = 0;  ///< the version restarted from (the next checkpoint is version + 1)
  int old_world_size = 0;     ///< processes of the job that wrote it
  std::vector<OriginalRank>
      old_members;                  ///< their original ranks, ascending (new rank i took old_members[i] on kRestored)
  std::vector<SavedBlocks> blocks;  ///< per blocks piece, who held which block ids
  std::vector<std::string> notes;   ///< newer versions passed over, and why (also printed by process 0)
};

/// One process's image file in a saved version, as `scan_disk_versions` sees it.
struct DiskFile {
  OriginalRank rank{0};              ///< the process that wrote it (its name: rank<r>.h5)
  std::filesystem::path path;        ///< where it is (or should be)
  bool present = false;              ///< whether the file is there
  std::uint64_t bytes = 0;           ///< its size on disk (0 if absent)
  std::uint64_t expected_bytes = 0;  ///< its size in the manifest (0 without one)
};

/// One `v<version>` folder of a disk level's directory.
struct DiskVersion {
  std::uint64_t version = 0;  ///< the checkpoint version it holds
  bool manifest = false;      ///< it has a manifest (without one, its writing never finished)
  bool complete = false;      ///< its manifest checks out and names files of the right sizes (contents not read)
  int world_size = 0;         ///< from the manifest (0 without one)
  /// The application's step at this version (the `Driver`'s step count: the
  /// step a restart from it does next), from the manifest; none without one,
  /// or if no driver registered its progress.
  std::optional<std::uint64_t> step;
  std::vector<DiskFile> files;  ///< the manifest's processes, else the image files found
  std::string problem;          ///< why it is not complete (empty if it is)
};

/// Lists the versions in a disk level's directory, oldest first, reading only
/// manifests and file sizes. `IoError` if the directory cannot be read.
[[nodiscard]] std::vector<DiskVersion> scan_disk_versions(const std::filesystem::path& directory);

/// Reads every file of a complete version and checks it against its manifest
/// (size and XXH3 of the file) and its datasets' checksums; returns one line
/// per problem, naming the file (empty: the version is good).
[[nodiscard]] std::vector<std::string> verify_disk_version(const std::filesystem::path& directory,
                                                           std::uint64_t version);

/// Writes a `Checkpoint`'s committed versions to disk and restarts a new job
/// from them. Construct it on every process of the job with the same
/// configuration, after (or before) registering state with the checkpoint;
/// it writes from the checkpoint's commit hook, so `Driver` checkpoints are
/// written too. Refers to `comm` and `checkpoint`, which must outlive it.
///
/// A write is collective and two-phase: every process writes its image, all
/// agree that every write worked, then process 0 writes the manifest. If any
/// write fails, the version is not marked complete and every process raises
/// `IoError` (naming the process and path) out of `checkpoint()`; the
/// checkpoint's in-memory version is committed regardless, and older complete
/// versions on disk stay. Only once a version is complete are versions beyond
/// the newest `keep` removed.
class DiskLevel {
 public:
  /// `UsageError` for `every` or `keep` below 1; `IoError` (path and
  /// reason) if the directory cannot be created.
  DiskLevel(Comm& comm, Checkpoint& checkpoint, DiskLevelConfig config);
  ~DiskLevel();
  DiskLevel(const DiskLevel&) = delete;
  DiskLevel& operator=(const DiskLevel&) = delete;

  /// Collective, at the start of a new job, before its first checkpoint and
  /// after every registration (a `Driver` registers its step counter when
  /// constructed: construct it first): finds the newest complete version whose files all check out (a damaged
  /// or truncated file makes a version unusable: a note says which and why,
  /// and the next older complete version is tried). With as many processes
  /// as wrote it, each loads its state into the registrations (checked on
  /// every process before any changes: `UsageError` everywhere otherwise).
  /// With another count it loads nothing and says who held what: the program
  /// takes what it needs (`load_blocks`, `fetch`, `load_progress`) before its
  /// next checkpoint, or that checkpoint raises `UsageError` (a program that
  /// ignored the saved state would start again from the beginning). Either way
  /// the checkpoint continues at that version. `kNoCheckpoint` when the
  /// directory holds no complete version; `CorruptData` naming the files if
  /// complete versions exist but none checks out; `UsageError` if the saved
  /// set was written with other registrations (another program), or if the
  /// checkpoint has committed a version already. In a replacement process
  /// (`Comm::is_replacement()`, started by a respawn of a running job) it
  /// returns `kNoCheckpoint` at once, without communicating: its state comes
  /// from the in-memory checkpoint's `restore()`.
  [[nodiscard]] DiskRestart restart();

  /// After `restart()` found a version (not collective): the saved states of
  /// the old processes `old_ranks`, read from their images (checksums
  /// checked), looked up by name like `Checkpoint::fetch`'s. `UsageError` for
  /// a rank not in the version.
  [[nodiscard]] std::map<OriginalRank, SavedState> fetch(std::span<const OriginalRank> old_ranks) const;

  /// After `restart()` found a version (not collective): copies the block ids
  /// `wanted` of the blocks piece `name`, in the order given, into `into`
  /// (which must hold exactly their bytes), reading only the images that hold
  /// some of them. `UsageError` (nothing read) for a name that is not a blocks
  /// piece, a wrong size, or blocks the version does not hold.
  void load_blocks(std::string_view name, std::span<const BlockRange> wanted, std::span<std::byte> into) const;

  /// After `restart()` found a version on another process count (not
  /// collective): the `Driver`'s step count (`Driver::kProgressPiece`) from
  /// the old process of lowest original rank, so that `Driver::run` goes on
  /// from the restarted version's step. `UsageError` if no `Driver` was
  /// constructed on the checkpoint before `restart()`.
  void load_progress();

  /// The newest version this object completed on disk (0: none yet).
  [[nodiscard]] std::uint64_t last_written() const noexcept { return _last_written; }

 private:
  struct Restarted;  // the version restart() found, its manifest parsed

  void write(std::uint64_t version);
  [[nodiscard]] const Restarted& restarted(std::string_view operation) const;
  [[nodiscard]] std::filesystem::path image_path(std::uint64_t version, OriginalRank rank) const;

  Comm& _comm;
  Checkpoint& _checkpoint;
  DiskLevelConfig _config;
  std::uint64_t _commit_hook = 0;  // the id of the hook this level adds to the checkpoint
  std::uint64_t _last_written = 0;
  std::unique_ptr<Restarted> _restart;
  /// False from a restart on another count until the program takes saved state.
  mutable bool _saved_state_taken = true;
};

}  // namespace reprise
