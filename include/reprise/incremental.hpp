#pragma once
/// \file
/// `IncrementalCheckpoint`: asynchronous incremental checkpoints of protected
/// memory (after AI-Ckpt, Nicolae and Cappello). `checkpoint()` returns at
/// once; a background thread commits only the pages written since the last
/// checkpoint (the first one saves everything), while the application keeps
/// writing: a write to a page not yet committed copies the page into a small
/// copy-on-write buffer, or waits for it when the buffer is full. The commit
/// order is learned from how the pages were written in the epoch before, so
/// that the pages the application touches first are committed first.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reprise/incremental_sink.hpp"

namespace reprise {

/// How the pages of a checkpoint are committed.
enum class CommitMode {
  kSync,  ///< `checkpoint()` returns once every page is committed
  /// In the background, in address order and nothing else ("async-no-pattern"):
  /// a write that finds no free copy-on-write slot waits until the commit
  /// reaches its page. The baseline the learned order is measured against.
  kAsyncAddress,
  /// In the background, steered by the writes: a page a writer waits for is
  /// committed next, copied pages before the rest, and the rest in the order
  /// learned from the epoch before (pages that made writers wait or copy
  /// first, then by first write).
  kAsyncAdaptive,
};

/// Settings of an incremental checkpoint.
struct IncrementalConfig {
  CommitMode mode = CommitMode::kAsyncAdaptive;    ///< sync, address order, or learned order
  std::size_t cow_bytes = std::size_t{16} << 20U;  ///< copy-on-write buffer, in whole pages (0: writers wait)
};

/// What one checkpoint did. The counts are of pages whose first write after
/// the checkpoint started was: COW (copied aside), WAIT (waited for its
/// commit), AVOIDED (during the commit, with nothing of the page pending),
/// AFTER (once the commit was over, trapped or noticed by the kernel's
/// written bits; final when the next checkpoint starts).
struct IncrementalStats {
  std::uint64_t version = 0;        ///< 1 for the full checkpoint, then 2, 3, ...
  std::size_t pages_committed = 0;  ///< pages handed to the sink
  std::size_t cow = 0;              ///< first writes that copied the page aside
  std::size_t wait = 0;             ///< first writes that waited for the commit
  std::size_t avoided = 0;          ///< first writes during the commit that did neither
  std::size_t after = 0;            ///< first writes after the commit
  std::size_t cow_peak_pages = 0;   ///< most pages in the copy-on-write buffer at once
  double wait_seconds = 0;          ///< time writers spent waiting, all threads together
  double commit_seconds = 0;        ///< from the start of the checkpoint to the end of the commit
  double call_seconds = 0;          ///< time `checkpoint()` itself took
};

/// What `IncrementalCheckpoint::restore` did.
struct IncrementalRestore {
  std::uint64_t version = 0;  ///< the version now in memory
  /// Empty if it is the newest version the sink holds; otherwise which
  /// newer versions were skipped and why (also printed on stderr).
  std::string skipped;
};

/// Incremental checkpoints of page-aligned regions of this process. One per
/// process at a time (the write trap is process-wide).
///
/// Call `checkpoint()` when the regions hold a consistent state and no other
/// thread is writing them; other threads may write again once it returns.
/// Memory: the copy-on-write buffer, 16 bytes per protected page, and
/// whatever the sink keeps.
class IncrementalCheckpoint {
 public:
  /// Versions go to `sink`. `UsageError` if another `IncrementalCheckpoint`
  /// exists in this process.
  explicit IncrementalCheckpoint(std::unique_ptr<IncrementalSink> sink, IncrementalConfig config = {});
  /// Versions go to files in `directory` (a `DirectorySink`).
  explicit IncrementalCheckpoint(std::string directory, IncrementalConfig config = {});
  /// Waits for a running commit, then unprotects the regions.
  ~IncrementalCheckpoint();
  IncrementalCheckpoint(const IncrementalCheckpoint&) = delete;
  IncrementalCheckpoint& operator=(const IncrementalCheckpoint&) = delete;

  /// Protects `region` (page-aligned, whole pages, for instance from
  /// `protected_alloc`). Register the same regions in the same order in a
  /// process that will restore, all before the first checkpoint.
  /// `UsageError` as `DirtyTracker::add`, or after the first checkpoint.
  void protect(std::span<std::byte> region);

  /// Waits for the previous checkpoint's commit (and publishes it), then
  /// starts a new version and returns its number; in `kSync` mode, returns
  /// once it is committed. Raises the error of a failed previous commit.
  /// The first checkpoint of an object whose sink already holds versions
  /// (another run's chain) is refused with a `UsageError`, nothing written,
  /// unless `restore()` came first: a restarted run continues the chain it
  /// restored, a new run needs an empty directory.
  std::uint64_t checkpoint();

  /// Waits until the newest checkpoint is committed and published; its
  /// statistics so far. Collective when the sink is (`MemorySink`).
  const IncrementalStats& wait();

  /// Loads the newest complete version into the registered regions (after
  /// waiting for a running commit). A `DirectorySink` whose newest versions
  /// are damaged restores the newest one it can, and says what it skipped
  /// (in the result and on stderr). Memory is unchanged when it raises:
  /// `UsageError` if there is no version or it does not match the regions,
  /// `CorruptData` naming the files if every version is damaged, `IoError` if
  /// the system refuses a file operation. Collective when the sink is.
  IncrementalRestore restore();

  /// The newest version: right after construction, the newest the sink
  /// already holds (0: none; with a `DirectorySink`, `version() > 0` says
  /// whether a run before left something to `restore()`), then the newest
  /// `checkpoint()` started or `restore()` loaded.
  [[nodiscard]] std::uint64_t version() const noexcept;

  /// Statistics of every checkpoint taken by this object, oldest first.
  [[nodiscard]] std::span<const IncrementalStats> history() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> _impl;
};

}  // namespace reprise
