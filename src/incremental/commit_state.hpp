#pragma once
// The bookkeeping of every protected page, which the write trap keeps and
// the copy-on-write protocol (cow_protocol.hpp) reads and advances: where the
// page stands in the running checkpoint, and how its first write in the
// epoch went. The trap's handler runs in signal context, so everything here
// is atomics and fixed sizes.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace reprise::detail {

/// Where a page stands in the running checkpoint.
enum class PageState : std::uint8_t {
  kClean,       ///< nothing to commit (not written in the epoch before)
  kScheduled,   ///< to be committed, still in place
  kCopying,     ///< a writer is copying it into the copy-on-write buffer
  kInBuffer,    ///< its old content waits in the copy-on-write buffer
  kCommitting,  ///< the commit thread is saving it
  kCommitted,   ///< saved
};

/// How the first write of a page in an epoch went: what the flush order of
/// the next checkpoint learns from.
enum class Access : std::uint8_t {
  kNone,     ///< no trap (the page was new or prepared for a system call)
  kWait,     ///< the writer waited for the page to be committed
  kCow,      ///< the old content went to the copy-on-write buffer
  kAvoided,  ///< written during the checkpoint, once nothing of it was pending
  kAfter,    ///< written after the checkpoint had been committed
};

/// A page's `mark`: the epoch of its last first write, and that write's
/// order in the epoch (below 2^32).
constexpr std::uint64_t make_mark(std::uint64_t epoch, std::uint64_t order) { return (epoch << 32U) | order; }
constexpr std::uint64_t mark_epoch(std::uint64_t mark) { return mark >> 32U; }
constexpr std::uint64_t mark_order(std::uint64_t mark) { return mark & 0xffffffffU; }

/// The bookkeeping of one page of a registered region.
struct PageInfo {
  std::atomic<std::uint64_t> mark{0};  ///< make_mark(epoch, order of its first write in that epoch)
  std::atomic<PageState> state{PageState::kClean};
  std::atomic<Access> access{Access::kNone};  ///< access of the first write in the epoch of `mark`
  std::atomic<std::uint32_t> slot{0};         ///< the copy-on-write slot holding it, while kInBuffer

  /// True if the page was written in `epoch`.
  [[nodiscard]] bool written_in(std::uint64_t epoch) const {
    return mark_epoch(mark.load(std::memory_order_acquire)) == epoch;
  }
};

/// A page anywhere: region id and page index.
struct PageId {
  int region = 0;
  std::size_t page = 0;
};

/// Most regions registered at once.
constexpr int kMaxRegions = 256;

/// Most writers that can queue a page as urgent at once; more simply wait.
constexpr int kMaxUrgent = 64;

/// The bookkeeping of region `id`'s pages (nullptr if there is no such
/// region); kept by the write trap.
PageInfo* page_infos(int id);

}  // namespace reprise::detail
