#pragma once
/// \file
/// `IncrementalCheckpoint`: checkpoints of protected memory that save only
/// the pages written since the previous checkpoint (the first one saves
/// everything), into a directory. A restore applies the full checkpoint and
/// then every increment in order. This is the synchronous form; the
/// asynchronous commit with a copy-on-write buffer builds on it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace reprise {

/// What one incremental checkpoint did.
struct IncrementalStats {
  std::uint64_t version = 0;        ///< 1 for the full checkpoint, then 2, 3, ...
  std::size_t pages_committed = 0;  ///< pages written to the sink
  double commit_seconds = 0;        ///< time to write them
};

/// Incremental checkpoints of page-aligned regions of this process, kept as
/// one file per version in `directory` (one directory per process). A
/// version is written to a temporary file and renamed when complete, so a
/// crash in the middle leaves the versions before it intact.
class IncrementalCheckpoint {
 public:
  /// Creates `directory` if needed. `UsageError` if it cannot be used.
  explicit IncrementalCheckpoint(std::string directory);
  ~IncrementalCheckpoint();
  IncrementalCheckpoint(const IncrementalCheckpoint&) = delete;
  IncrementalCheckpoint& operator=(const IncrementalCheckpoint&) = delete;

  /// Protects `region` (page-aligned, whole pages, for instance from
  /// `protected_alloc`). Register the same regions in the same order in a
  /// process that will restore. `UsageError` as `DirtyTracker::add`.
  void protect(std::span<std::byte> region);

  /// Saves the pages written since the last checkpoint (all of them the
  /// first time) and starts a new epoch.
  IncrementalStats checkpoint();

  /// Loads the newest complete version into the registered regions: the
  /// full checkpoint, then each increment. `UsageError` naming the file if a
  /// version is missing or corrupt, or if the regions do not match those
  /// that were saved (count or sizes); regions are only written once every
  /// file has been checked.
  void restore();

  /// The newest version saved in the directory (0: none).
  [[nodiscard]] std::uint64_t version() const noexcept { return _version; }

 private:
  std::string _directory;
  std::vector<int> _regions;  // DirtyTracker ids, in registration order
  std::uint64_t _version = 0;
};

}  // namespace reprise
