#pragma once
// The copy-on-write page protocol of an asynchronous incremental checkpoint,
// in one place. A checkpoint commits the pages written in the epoch before
// while the application goes on writing. A first write to a page of the
// running checkpoint copies the page aside into a bounded buffer (COW),
// waits until the commit has saved it (WAIT), or finds nothing of it pending
// (AVOIDED; AFTER once the commit is over). The writer's side runs in the
// write trap's signal handler (or its userfaultfd thread), the committer's
// side on the commit thread; they share atomics, fixed arrays and a spin
// lock that neither can be interrupted by the other while holding (the
// commit thread never writes protected memory, the handler never faults on
// it). One per process, like the trap that calls into it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "commit_state.hpp"

namespace reprise::detail {

class CowProtocol {
 public:
  /// Saves one page: its region (by registration order), its index in the
  /// region, its bytes. The checkpoint's sink.
  using Put = std::function<void(std::size_t region_index, std::size_t page, std::span<const std::byte> bytes)>;

  /// First writes since the last reset, by how they went.
  struct Counts {
    std::uint64_t cow = 0;
    std::uint64_t wait = 0;
    std::uint64_t avoided = 0;
    std::uint64_t after = 0;
    double wait_seconds = 0;       ///< all writers' time spent waiting
    std::uint32_t peak_slots = 0;  ///< most buffer slots in use at once
  };

  /// The process's protocol: the trap's handler reaches it without context.
  static CowProtocol& instance();

  /// A buffer of `slots` pages of `page_bytes` (0: none, writers wait) and
  /// whether commits follow writes (a page a writer waits for goes next,
  /// copied pages before the rest) or keep to the order given. Only while no
  /// checkpoint runs.
  void configure(std::size_t slots, std::size_t page_bytes, bool follow_writes);
  /// Trap region `id` is the checkpoint's `index`-th region, at `memory`.
  void add_region(int id, std::size_t index, std::span<const std::byte> memory);
  /// Back to no buffer and no regions.
  void release();

  /// The writer's side: a write to the page at `page` (page `id`, with its
  /// bookkeeping `info`); `first` if it was the page's first in the epoch,
  /// whose access is then recorded and counted. Async-signal-safe.
  void on_write(PageInfo& info, PageId id, const std::byte* page, bool first);

  /// The committer's side. `start` begins a commit once the states of its
  /// pages are set (before the trap is armed); `commit` saves `pages`
  /// through `put`; `abandon` releases writers from a commit that failed;
  /// `finish` ends the commit (later first writes are AFTER).
  void start();
  void commit(std::span<const PageId> pages, const Put& put);
  void abandon(std::span<const PageId> pages);
  void finish();

  /// The region index `add_region` gave trap region `id`.
  [[nodiscard]] std::size_t region_index(int id) const noexcept { return _regions[id].index; }

  /// The counts since the last reset; `reset` starts them again.
  Counts counts(bool reset);

 private:
  /// A registered region as the commit sees it.
  struct Region {
    const std::byte* base = nullptr;
    std::size_t index = 0;
  };

  // Writer's side.
  [[nodiscard]] Access resolve(PageInfo& info, PageId id, const std::byte* page);
  void wait_committed(PageInfo& info);
  void count(Access access);

  // Committer's side.
  void commit_in_order(std::span<const PageId> pages, const Put& put);
  bool commit_in_place(PageId id, const Put& put);
  void commit_buffered(PageId id, std::uint32_t slot, const Put& put);
  void empty_buffer();
  void wake_waiters();

  std::atomic<bool> _active{false};        // a checkpoint is being committed
  std::atomic<bool> _follow_writes{true};  // the learned order (else the address order)
  std::size_t _page_bytes = 0;
  Region _regions[kMaxRegions]{};

  // Guarded by `_lock`: the copy-on-write slots, which of them hold a page
  // to commit (oldest first), and the pages writers are waiting for.
  std::atomic_flag _lock = ATOMIC_FLAG_INIT;
  std::vector<std::byte> _cow;             // slot i at i * page size
  std::vector<std::uint32_t> _free_slots;  // stack of free slot indices
  std::uint32_t _free_count = 0;
  std::uint32_t _slot_count = 0;
  std::vector<std::uint32_t> _filled;  // ring of filled slots
  std::vector<PageId> _filled_page;    // the page held by each slot
  std::uint32_t _filled_head = 0;
  std::uint32_t _filled_size = 0;
  PageId _urgent[kMaxUrgent]{};
  int _urgent_count = 0;
  std::uint32_t _peak_used = 0;  // most slots in use at once since the last reset

  std::atomic<std::uint32_t> _progress{0};  // futex word: bumped at each page committed
  std::atomic<int> _waiters{0};             // writers sleeping on `_progress`

  // Counts of the running epoch (first writes only).
  std::atomic<std::uint64_t> _cow_pages{0};
  std::atomic<std::uint64_t> _wait_pages{0};
  std::atomic<std::uint64_t> _avoided_pages{0};
  std::atomic<std::uint64_t> _after_pages{0};
  std::atomic<std::uint64_t> _wait_nanoseconds{0};
};

}  // namespace reprise::detail
