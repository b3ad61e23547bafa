#pragma once
// What the SIGSEGV handler of protected memory and the commit thread of an
// asynchronous incremental checkpoint share. The handler runs in signal
// context, so everything here is atomics, fixed arrays and a spin lock that
// only the handler and the commit thread take (neither can be interrupted by
// the handler while holding it: the commit thread never writes protected
// memory, and the handler never faults on it).

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

/// The state of the running checkpoint seen by the handler.
struct CommitShared {
  std::atomic<bool> active{false};  ///< a checkpoint is being committed
  /// The commit reacts to writes (the learned order): a page a writer waits
  /// for is committed next, copied pages before the rest. Without it (the
  /// address order), the commit keeps to its order and a writer waits until
  /// the commit reaches its page.
  std::atomic<bool> follow_writes{true};

  // Guarded by `lock`: the copy-on-write slots, which of them hold a page to
  // commit (oldest first), and the pages writers are waiting for.
  std::atomic_flag lock = ATOMIC_FLAG_INIT;
  std::byte* cow = nullptr;           ///< slot i at cow + i * page size
  std::uint32_t* free_slots = nullptr;  ///< stack of free slot indices
  std::uint32_t free_count = 0;
  std::uint32_t slot_count = 0;
  std::uint32_t* filled = nullptr;    ///< ring of filled slots
  PageId* filled_page = nullptr;      ///< the page held by each slot
  std::uint32_t filled_head = 0;
  std::uint32_t filled_size = 0;
  PageId urgent[kMaxUrgent]{};
  int urgent_count = 0;
  std::uint32_t peak_used = 0;  ///< most slots in use at once since the last reset

  std::atomic<std::uint32_t> progress{0};  ///< futex word: bumped at each page committed
  std::atomic<int> waiters{0};             ///< writers sleeping on `progress`

  // Statistics of the running epoch (first writes only), reset by the
  // checkpoint that starts a commit.
  std::atomic<std::uint64_t> cow_pages{0};
  std::atomic<std::uint64_t> wait_pages{0};
  std::atomic<std::uint64_t> avoided_pages{0};
  std::atomic<std::uint64_t> after_pages{0};
  std::atomic<std::uint64_t> wait_nanoseconds{0};  ///< all writers' time spent waiting
};

/// The process's shared state (one, like the handler).
CommitShared& commit_shared();

/// The bookkeeping of region `id`'s pages (nullptr if there is no such region).
PageInfo* page_infos(int id);

/// Wakes the writers waiting for a page to be committed.
void wake_waiters();

/// Spin lock over `CommitShared::lock`, usable in the handler.
class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& flag) : _flag(flag) {
    while (_flag.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinGuard() { _flag.clear(std::memory_order_release); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag& _flag;
};

}  // namespace reprise::detail
