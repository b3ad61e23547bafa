#pragma once
/// \file
/// Where an `IncrementalCheckpoint` puts its versions: the `IncrementalSink`
/// interface and `DirectorySink`, one file per version in a local directory.
/// `MemorySink` (memory_sink.hpp) keeps them in other processes' memory.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace reprise {

/// The shape of the memory a version covers: the page size and the size of
/// every protected region, in registration order.
struct IncrementalLayout {
  std::size_t page_bytes = 0;             ///< bytes per page
  std::vector<std::size_t> region_bytes;  ///< bytes of each region
};

/// A destination for incremental checkpoint versions. Version 1 is full
/// (pages it does not hold are zero), every later version holds the pages
/// written since the one before. `begin`, `put` and `end` run on the commit
/// thread, in that order, one version at a time; they must not write to
/// protected memory. Errors are raised as `UsageError` (a wrong call),
/// `IoError` (the system refused a file operation: a full disk) or
/// `CorruptData` (a version that cannot be read back).
class IncrementalSink {
 public:
  virtual ~IncrementalSink() = default;

  /// The newest complete version this sink holds for this process (0: none).
  [[nodiscard]] virtual std::uint64_t newest() = 0;

  /// Starts `version` of memory shaped as `layout`.
  virtual void begin(std::uint64_t version, const IncrementalLayout& layout) = 0;

  /// Adds page `page` of region `region` (its bytes, one page); each page at
  /// most once per version, in any order.
  virtual void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) = 0;

  /// Completes the version on this process (for a file: flushed and renamed).
  virtual void end() = 0;

  /// On the application's thread, after `end`: makes the completed version
  /// safe beyond this process. Collective for sinks that involve other
  /// processes; nothing to do for a local directory.
  virtual void publish() {}

  /// Writes the newest complete version into `regions` (shaped as `layout`),
  /// after checking everything it needs, so that a refusal changes nothing
  /// (a sink may fall back to an older version when newer ones are damaged;
  /// `restore_notes` then says so). `newest()` is then the version restored.
  /// `UsageError` if there is nothing to restore or it does not fit `layout`;
  /// `CorruptData` if what there is cannot be read back.
  virtual void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) = 0;

  /// What the last `restore` left out and why, so that a fallback to an
  /// older version is never silent; empty if it restored the newest.
  [[nodiscard]] virtual std::string restore_notes() const { return {}; }

  /// Where the versions go, for messages (for instance "directory 'ckpt'").
  [[nodiscard]] virtual std::string where() const { return "the sink"; }
};

/// Versions as files in a directory of this process's own: version 1, and
/// every version that merges older ones, as `v<N>.full.reprise-inc`, the
/// others as `v<N>.reprise-inc`. Each file is written to a temporary name,
/// flushed and renamed, and carries an XXH3-64 checksum of all its bytes: a
/// crash while writing leaves the versions before it, and a damaged file is
/// refused. `restore` restores the newest version whose files all check out
/// and says in `restore_notes` what it skipped. A lock file
/// (`reprise-inc.lock`) keeps other processes out of the directory while
/// the sink exists.
class DirectorySink : public IncrementalSink {
 public:
  /// Creates `directory` if needed and locks it. With `keep_versions` > 0,
  /// once a new version makes more than `keep_versions` files, the oldest
  /// are merged into one full version (written and renamed before any old
  /// file is removed), leaving it and the newest `keep_versions / 2`; 0
  /// keeps every version. `IoError` if the directory or its lock file cannot
  /// be created, `UsageError` if another process holds it.
  explicit DirectorySink(std::string directory, std::size_t keep_versions = 0);
  ~DirectorySink() override;
  DirectorySink(const DirectorySink&) = delete;
  DirectorySink& operator=(const DirectorySink&) = delete;

  std::uint64_t newest() override;
  void begin(std::uint64_t version, const IncrementalLayout& layout) override;
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override;
  void end() override;
  void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override;
  [[nodiscard]] std::string restore_notes() const override;
  [[nodiscard]] std::string where() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> _impl;
};

}  // namespace reprise
