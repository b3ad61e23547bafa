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
  std::size_t page_bytes = 0;               ///< bytes per page
  std::vector<std::size_t> region_bytes;    ///< bytes of each region
};

/// A destination for incremental checkpoint versions. Version 1 is full
/// (pages it does not hold are zero), every later version holds the pages
/// written since the one before. `begin`, `put` and `end` run on the commit
/// thread, in that order, one version at a time; they must not write to
/// protected memory. Errors are raised as `UsageError`.
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
  /// after checking everything it needs, so that a refusal changes nothing.
  /// `UsageError` if there is nothing to restore or it does not fit `layout`.
  virtual void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) = 0;
};

/// Versions as files `v<N>.reprise-inc` in a directory of this process's
/// own. Each file is written to a temporary name, flushed and renamed, and
/// carries a checksum: a crash while writing leaves the versions before it,
/// and a damaged file is refused.
class DirectorySink : public IncrementalSink {
 public:
  /// Creates `directory` if needed. `UsageError` if it cannot be used.
  explicit DirectorySink(std::string directory);
  ~DirectorySink() override;
  DirectorySink(const DirectorySink&) = delete;
  DirectorySink& operator=(const DirectorySink&) = delete;

  std::uint64_t newest() override;
  void begin(std::uint64_t version, const IncrementalLayout& layout) override;
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override;
  void end() override;
  void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> _impl;
};

}  // namespace reprise
