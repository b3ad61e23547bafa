#pragma once
/// \file
/// Protected memory: page-aligned regions whose writes reprise notices, so
/// that an incremental checkpoint saves only the pages written since the
/// last one (after AI-Ckpt, Nicolae and Cappello). Pages are write-protected
/// with `mprotect` (a `SIGSEGV` handler), or with userfaultfd on request
/// (`REPRISE_WRITE_TRAP=userfaultfd`, where the kernel allows it); the first
/// write to a page traps, is recorded, and the page is opened again.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise {

/// The size of a memory page.
[[nodiscard]] std::size_t page_size() noexcept;

/// Allocates `bytes` (rounded up to whole pages) of zeroed, page-aligned
/// memory, ready to be protected. Release it with `protected_free`.
/// `UsageError` if `bytes` is 0, `IoError` if the memory cannot be mapped.
[[nodiscard]] void* protected_alloc(std::size_t bytes);

/// Releases memory from `protected_alloc` (unregistering it first if it is
/// still registered). `UsageError` for any other pointer: nothing is freed.
void protected_free(void* memory);

/// How the first write to a protected page is noticed.
enum class WriteTrap {
  kUserfaultfd,  ///< userfaultfd write-protection served by a thread; a system call writing into a protected page waits
                 ///< for it instead of failing
  kMprotect,  ///< `mprotect` and a `SIGSEGV` handler; a system call writing into a protected page fails with `EFAULT`
              ///< unless prepared
};

/// One page of a registered region.
struct PageRef {
  int region = 0;           ///< the region's id
  std::size_t page = 0;     ///< page index within the region
  std::uint64_t order = 0;  ///< when it was first written in the epoch (1, 2, ...)
  bool trapped = true;      ///< false: written while its region was open (`open_all`), so no order or trap was seen
};

/// Tracks which pages of the registered regions are written. One per
/// process (the trap is process-wide); thread-safe. With the `mprotect`
/// trap, writes by the kernel on behalf of a system call (`read()` into a
/// protected page) do not trap but fail with `EFAULT`: call
/// `prepare_for_write` on such buffers first (harmless with userfaultfd).
class DirtyTracker {
 public:
  /// The process's tracker (sets up the trap on first use: `mprotect`, or
  /// userfaultfd if `REPRISE_WRITE_TRAP=userfaultfd` and the kernel allows
  /// it; it costs more per trapped write but lets system calls write into
  /// protected pages). `REPRISE_WRITE_TRAP` is `mprotect` (the default) or
  /// `userfaultfd`, `REPRISE_WRITTEN_BITS` `1` (the default) or `0`;
  /// `UsageError` for any other value.
  static DirtyTracker& instance();

  /// The trap in use.
  [[nodiscard]] WriteTrap trap() const noexcept;

  /// Registers the page-aligned region [base, base + bytes); returns its id.
  /// Its pages count as written until the next `protect_all`. `UsageError`
  /// if it is not page-aligned, is empty, or overlaps a registered region.
  int add(void* base, std::size_t bytes);

  /// Unregisters region `id` and makes it writable again; `UsageError` if
  /// there is no such region.
  void remove(int id);

  /// The memory of region `id`.
  [[nodiscard]] std::span<std::byte> region(int id) const;

  /// Write-protects every page of every region and forgets which pages were
  /// written: a new epoch starts.
  void protect_all();

  /// Opens every page for writing until the next `protect_all`, leaving
  /// the noticing of writes to the kernel's written bits (Linux 6.7), which
  /// cost a write no trap. For when nothing needs to see writes as they
  /// happen any more, e.g. once a checkpoint is committed. False where the
  /// kernel keeps no such bits (or `REPRISE_WRITTEN_BITS=0`, or the
  /// userfaultfd trap is in use): the pages then stay protected.
  bool open_all();

  /// True if `open_all` can hand the noticing of writes to the kernel.
  [[nodiscard]] bool keeps_written_bits() const noexcept;

  /// The pages written since the last `protect_all` (all pages of regions
  /// registered since): the trapped ones in order of first write, then
  /// those written while open, in address order.
  [[nodiscard]] std::vector<PageRef> written() const;

  /// Makes [data, data + bytes) writable ahead of a write the kernel does
  /// itself (`read`, `recv`), recording those pages as written.
  void prepare_for_write(void* data, std::size_t bytes);

  DirtyTracker(const DirtyTracker&) = delete;
  DirtyTracker& operator=(const DirtyTracker&) = delete;

 private:
  DirtyTracker();
};

}  // namespace reprise
