#pragma once
/// \file
/// `MemorySink`: incremental checkpoints kept in the memory of other
/// processes, so that they survive the loss of a process with no disk at
/// all. Each process's memory is mirrored, as of its last published version,
/// by `copies - 1` buddies (chosen as a `Checkpoint`'s are: the store's
/// placement, on other nodes where there are any), and by a local copy on
/// the process itself; a version travels as the pages it changed,
/// and every copy applies them.

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "reprise/comm.hpp"
#include "reprise/incremental_sink.hpp"

namespace reprise {

/// An `IncrementalSink` in other processes' memory. Every member of the
/// communicator checkpoints together: with this sink `checkpoint()`,
/// `wait()` and `restore()` of `IncrementalCheckpoint` are collective.
///
/// A version is safe once published (`wait()`, or the next `checkpoint()`).
/// If a process fails during a publish, no process keeps that version.
/// `restore()` after `comm.respawn()` gives every process, replacements
/// included, the last published version from a live mirror, then gives
/// mirrors again to the processes that lost theirs, so the next failure is
/// survivable too. After `comm.shrink()` the survivors roll back and the
/// departed processes' images are dropped.
///
/// Memory per process: `copies` images the size of a process's protected
/// regions (its own and `copies - 1` mirrors), and, while a version is
/// published, the pages it changed.
class MemorySink : public IncrementalSink {
 public:
  /// `UsageError` if `copies` is below 2 or above the communicator's size.
  /// The sink follows `comm` when the application replaces it in place.
  MemorySink(Comm& comm, int copies = 2);

  std::uint64_t newest() override { return _published; }
  void begin(std::uint64_t version, const IncrementalLayout& layout) override;
  void put(std::size_t region, std::size_t page, std::span<const std::byte> bytes) override;
  void end() override {}
  /// Collective: sends the version's pages to the mirrors and commits it
  /// everywhere, or nowhere if a process fails (`ProcessFailed`/`Revoked`).
  void publish() override;
  /// Collective: loads this process's last published version from a live
  /// mirror. `DataLost` on every process, naming the original ranks, if a
  /// process and all its mirrors are gone; `UsageError` on every process if
  /// a process's regions do not match its image (nothing is written then).
  void restore(const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions) override;

  /// Bytes of checkpoint images held here: this process's own copy and its
  /// mirrors of other processes.
  [[nodiscard]] std::size_t mirrored_bytes() const noexcept;

 private:
  /// Another process's memory as of a version.
  struct Mirror {
    std::uint64_t version = 0;
    std::vector<std::size_t> region_bytes;
    std::vector<std::byte> bytes;  // the regions back to back
  };
  /// Where every process's image comes from in a restore, the same everywhere.
  struct RestorePlan {
    std::uint64_t version = 0;              ///< the newest published version
    std::vector<int> source;                ///< by rank: the rank that sends it its image
    std::vector<std::uint64_t> holds_mine;  ///< by rank: 1 if it holds this process's image
  };
  [[nodiscard]] std::vector<Rank> buddies();
  [[nodiscard]] RestorePlan locate_images();
  [[nodiscard]] std::vector<IncomingMessage> send_images(const RestorePlan& plan, std::size_t page_bytes);
  void apply_image(const RestorePlan& plan, const std::vector<IncomingMessage>& received,
                   const IncrementalLayout& layout, std::span<const std::span<std::byte>> regions);
  void reseed(std::span<const std::span<std::byte>> regions, const std::vector<std::uint64_t>& held);
  void absorb(const std::vector<IncomingMessage>& received);

  Comm& _comm;
  int _copies;
  std::uint64_t _published = 0;
  std::vector<std::byte> _staged;                  // the version being written: header, then (region, page, bytes)
  bool _pending = false;                           // _staged holds a version not yet published
  std::vector<std::vector<std::byte>> _in_flight;  // images sent by the last restore (MPI may read them until recovery)
  std::size_t _page_bytes = 0;
  std::map<int, Mirror> _mirrors;  // by original rank of the process mirrored, this one's own included
};

}  // namespace reprise
